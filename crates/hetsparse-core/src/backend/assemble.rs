//! A product from its chunks: C sized once from the chunks' row counts, each chunk copied once
//! into its final place, rows in parallel.
//!
//! One assembly for every caller that computes a product in parts: the scheduler (chunks from
//! many devices, rows of A × column panels of B) and a backend that had to cut one product
//! itself (OpenCL's ESC SpGEMM, B in column slices when the expansion exceeds its memory
//! budget: the parts of one row band side by side).

use std::ops::Range;

use rayon::prelude::*;

use super::ProductChunk;
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::host;
use crate::scalar::Scalar;

/// Rows one parallel task copies.
const ROWS_PER_TASK: usize = 2048;

/// Rows of C and the tiles covering them, in column order.
type Band = (Range<usize>, Vec<usize>);

/// A computed part of a product: its place in C and its values (`chunk.rows.len() ×
/// chunk.cols.len()`, columns relative to `chunk.cols.start`).
pub type Tile<T> = (ProductChunk, Csr<T>);

/// Assembles the `nrows × ncols` product from `tiles`, which must partition it (every entry of
/// C in exactly one tile), in any order. The result is canonical as the tiles are (each row's
/// columns sorted: a row's tiles are laid side by side in column order). Tiles that do not
/// partition the product, or whose shapes are not their chunks', are [`Error::Internal`] (a bug
/// of the caller); host buffers that cannot be had are [`Error::OutOfMemory`].
pub fn assemble_chunks<T: Scalar>(
    nrows: usize,
    ncols: usize,
    mut tiles: Vec<Tile<T>>,
) -> Result<Csr<T>> {
    let _span = tracing::debug_span!("assemble", rows = nrows, tiles = tiles.len()).entered();
    check_shapes(nrows, ncols, &tiles)?;
    if tiles.len() == 1 && tiles[0].0.rows.len() == nrows && tiles[0].0.cols.len() == ncols {
        if let Some((_, c)) = tiles.pop() {
            return Ok(c);
        }
    }
    tiles.sort_by_key(|(chunk, _)| (chunk.cols.start, chunk.rows.start));
    let bands = bands(nrows, ncols, &tiles)?;

    // Entries per row, then offsets.
    let mut row_nnz = host::try_filled(nrows, 0u64, "assembled product row counts")?;
    split_by_rows(&mut row_nnz, &bands, |r| r)
        .into_par_iter()
        .for_each(|((rows, covering), out)| {
            for (slot, i) in out.iter_mut().zip(rows.clone()) {
                *slot = covering
                    .iter()
                    .map(|&t| tiles[t].1.row_nnz(i - tiles[t].0.rows.start))
                    .sum();
            }
        });
    let mut offsets = host::try_with_capacity(nrows + 1, "assembled product row offsets")?;
    let mut total = 0u64;
    offsets.push(0);
    for n in &row_nnz {
        total += n;
        offsets.push(total);
    }
    drop(row_nnz);
    let nnz = usize::try_from(total).map_err(|_| Error::TooLarge {
        what: "the product's entries".into(),
        needed: total,
        limit: usize::MAX as u64,
        unit: "entries",
    })?;

    // Each band's rows, chunk by chunk in column order.
    // Filled in parallel, so that the pages are first touched by many threads.
    let mut cols: Vec<u32> = host::try_with_capacity(nnz, "assembled product column indices")?;
    cols.par_extend(rayon::iter::repeat_n(0u32, nnz));
    let mut vals: Vec<T> = host::try_with_capacity(nnz, "assembled product values")?;
    vals.par_extend(rayon::iter::repeat_n(T::default(), nnz));
    let at = |r: usize| offsets[r] as usize;
    let col_parts = split_by_rows(&mut cols, &bands, at);
    let val_parts = split_by_rows(&mut vals, &bands, at);
    col_parts.into_par_iter().zip(val_parts).for_each(
        |(((rows, covering), out_cols), (_, out_vals))| {
            let mut pos = 0;
            for i in rows.clone() {
                for &t in covering {
                    let (chunk, tile) = (&tiles[t].0, &tiles[t].1);
                    let (tc, tv) = tile.row(i - chunk.rows.start);
                    let shift = chunk.cols.start as u32;
                    for (dst, &c) in out_cols[pos..pos + tc.len()].iter_mut().zip(tc) {
                        *dst = c + shift;
                    }
                    out_vals[pos..pos + tv.len()].copy_from_slice(tv);
                    pos += tc.len();
                }
            }
        },
    );
    drop(tiles);
    Ok(Csr::try_new(nrows, ncols, offsets, cols, vals)?)
}

/// Row ranges of at most [`ROWS_PER_TASK`] rows, each inside one tile of every column range,
/// with the tiles covering it in column order; an error unless those tiles' columns run from 0
/// to `ncols` without gap or overlap (so the tiles cover the product exactly once).
fn bands<T: Scalar>(nrows: usize, ncols: usize, tiles: &[Tile<T>]) -> Result<Vec<Band>> {
    let mut cuts: Vec<usize> = tiles
        .iter()
        .flat_map(|(c, _)| [c.rows.start, c.rows.end])
        .chain([0, nrows])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut bands = Vec::new();
    for w in cuts.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        if lo == hi {
            continue;
        }
        // Tiles are sorted by column start, so the covering ones come in column order.
        let covering: Vec<usize> = (0..tiles.len())
            .filter(|&t| {
                let r = &tiles[t].0.rows;
                r.start <= lo && hi <= r.end && !tiles[t].0.cols.is_empty()
            })
            .collect();
        let mut next_col = 0;
        for &t in &covering {
            let cols = &tiles[t].0.cols;
            if cols.start != next_col {
                return Err(internal(format!(
                    "rows {lo}..{hi}: a chunk starts at column {} where {next_col} was expected",
                    cols.start
                )));
            }
            next_col = cols.end;
        }
        if next_col != ncols {
            return Err(internal(format!(
                "rows {lo}..{hi}: chunks cover columns 0..{next_col} of {ncols}"
            )));
        }
        let mut start = lo;
        while start < hi {
            let end = (start + ROWS_PER_TASK).min(hi);
            bands.push((start..end, covering.clone()));
            start = end;
        }
    }
    Ok(bands)
}

/// `data` cut at the bands' boundaries (`at(row)` is a row's position in `data`), each part
/// with its band.
fn split_by_rows<'a, 'b, E>(
    mut data: &'a mut [E],
    bands: &'b [Band],
    at: impl Fn(usize) -> usize,
) -> Vec<(&'b Band, &'a mut [E])> {
    let mut parts = Vec::with_capacity(bands.len());
    let mut consumed = 0;
    for band in bands {
        let end = at(band.0.end);
        let (part, rest) = std::mem::take(&mut data).split_at_mut(end - consumed);
        parts.push((band, part));
        data = rest;
        consumed = end;
    }
    parts
}

/// Every tile has its chunk's shape and lies inside the product (that the tiles cover it
/// exactly once is checked band by band in [`bands`]).
fn check_shapes<T: Scalar>(nrows: usize, ncols: usize, tiles: &[Tile<T>]) -> Result<()> {
    for (chunk, c) in tiles {
        if c.shape() != (chunk.rows.len(), chunk.cols.len())
            || chunk.rows.end > nrows
            || chunk.cols.end > ncols
        {
            return Err(internal(format!(
                "a chunk of rows {:?}, columns {:?} came back {}×{}",
                chunk.rows,
                chunk.cols,
                c.nrows(),
                c.ncols()
            )));
        }
    }
    Ok(())
}

fn internal(what: String) -> Error {
    Error::Internal {
        backend: "core".into(),
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{generate, reference, PlusTimes};

    fn tile(a: &Csr<f64>, b: &Csr<f64>, rows: Range<usize>, cols: Range<usize>) -> Tile<f64> {
        let part = reference::spgemm::<f64, PlusTimes>(
            &a.rows(rows.clone()).unwrap(),
            &b.column_panel(cols.clone()).unwrap(),
        )
        .unwrap();
        (ProductChunk { rows, cols }, part)
    }

    #[test]
    fn tiles_in_any_order_give_the_product() {
        let a = generate::uniform::<f64>(5000, 300, 5, 1);
        let b = generate::uniform::<f64>(300, 200, 4, 2);
        let c = reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        let tiles = vec![
            tile(&a, &b, 2500..5000, 70..200),
            tile(&a, &b, 0..2500, 0..200),
            tile(&a, &b, 2500..4000, 0..70),
            tile(&a, &b, 4000..5000, 0..10),
            tile(&a, &b, 4000..5000, 10..70),
        ];
        assert_eq!(assemble_chunks(5000, 200, tiles).unwrap(), c);
    }

    #[test]
    fn column_parts_of_one_band_lie_side_by_side() {
        // What a backend that cuts B into column slices hands over: every row of A times each
        // slice, the slices of unequal widths (one empty, one a single column).
        let a = generate::uniform::<f64>(300, 120, 6, 3);
        let b = generate::uniform::<f64>(120, 90, 5, 4);
        let c = reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        let cuts = [0, 1, 31, 31, 64, 90];
        let mut tiles: Vec<Tile<f64>> = cuts
            .windows(2)
            .map(|w| tile(&a, &b, 0..300, w[0]..w[1]))
            .collect();
        tiles.reverse();
        let got = assemble_chunks(300, 90, tiles).unwrap();
        assert_eq!(got, c);
        assert!((0..got.nrows()).all(|i| got.row(i).0.windows(2).all(|p| p[0] < p[1])));
    }

    #[test]
    fn a_gap_or_an_overlap_is_an_error() {
        let a = generate::uniform::<f64>(40, 30, 3, 1);
        let gap = vec![tile(&a, &a.transpose().unwrap(), 0..20, 0..40)];
        assert!(matches!(
            assemble_chunks(40, 40, gap),
            Err(Error::Internal { .. })
        ));
        let overlap = vec![
            tile(&a, &a.transpose().unwrap(), 0..30, 0..40),
            tile(&a, &a.transpose().unwrap(), 20..30, 0..40),
            tile(&a, &a.transpose().unwrap(), 30..40, 0..40),
        ];
        assert!(assemble_chunks(40, 40, overlap).is_err());
    }

    #[test]
    fn empty_products_assemble() {
        assert_eq!(
            assemble_chunks::<f64>(0, 0, vec![]).unwrap().shape(),
            (0, 0)
        );
        let z = Csr::<f64>::zeros(3, 4).unwrap();
        let tiles = vec![(
            ProductChunk {
                rows: 0..3,
                cols: 0..4,
            },
            z.clone(),
        )];
        assert_eq!(assemble_chunks(3, 4, tiles).unwrap(), z);
    }
}

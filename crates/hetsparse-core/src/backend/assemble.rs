//! A product from its chunks: C sized once from the chunks' row counts, each chunk copied once
//! into its final place, rows in parallel.
//!
//! One assembly for every caller that computes a product in parts: the scheduler (chunks from
//! many devices, rows of A × column panels of B) and a backend that had to cut one product
//! itself (OpenCL's ESC SpGEMM, B in column slices when the expansion exceeds its memory
//! budget: the parts of one row band side by side).

use std::mem::MaybeUninit;
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
///
/// C's arrays are allocated once, backed by huge pages where the system allows, and written
/// once: in parallel over bands of rows, a band of one chunk of every column as one copy.
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
    // Entries of each band, then where each starts.
    let band_nnz: Vec<u64> = bands
        .par_iter()
        .map(|(rows, covering)| {
            covering
                .iter()
                .map(|&t| tile_entries(&tiles[t], rows))
                .sum()
        })
        .collect();

    let mut band_start = Vec::with_capacity(bands.len() + 1);
    let mut total = 0u64;
    band_start.push(total);
    for n in &band_nnz {
        total += n;
        band_start.push(total);
    }
    let nnz = host::entry_count(total, "the product's entries")?;
    let mut offsets = host::try_with_capacity(nrows + 1, "assembled product row offsets")?;
    offsets.push(0u64);
    let mut cols: Vec<u32> = host::try_with_capacity(nnz, "assembled product column indices")?;
    let mut vals: Vec<T> = host::try_with_capacity(nnz, "assembled product values")?;
    crate::advise_huge_pages(cols.spare_capacity_mut());
    crate::advise_huge_pages(vals.spare_capacity_mut());
    let copy = tracing::debug_span!("copy the chunks", entries = total).entered();

    // Row offsets, band by band in parallel.
    let offset_parts = split_spare(&mut offsets, &bands, |b| b.0.len());
    offset_parts
        .into_par_iter()
        .zip(&band_start)
        .for_each(|(((rows, covering), out), &start)| {
            let mut at = start;
            for (slot, i) in out.iter_mut().zip(rows.clone()) {
                at += covering
                    .iter()
                    .map(|&t| tiles[t].1.row_nnz(i - tiles[t].0.rows.start))
                    .sum::<u64>();
                slot.write(at);
            }
        });
    // Columns and values: each band's rows, chunk by chunk in column order.
    let len_of = |b: &Band| -> usize {
        b.1.iter()
            .map(|&t| tile_entries(&tiles[t], &b.0) as usize)
            .sum()
    };
    let col_parts = split_spare(&mut cols, &bands, len_of);
    let val_parts = split_spare(&mut vals, &bands, len_of);
    col_parts.into_par_iter().zip(val_parts).for_each(
        |(((rows, covering), out_cols), (_, out_vals))| {
            if let [t] = covering[..] {
                // One chunk of every column: the band is one run of its arrays.
                let (chunk, tile) = (&tiles[t].0, &tiles[t].1);
                let at = |i: usize| tile.row_offsets()[i - chunk.rows.start] as usize;
                let run = at(rows.start)..at(rows.end);
                copy_into(out_cols, &tile.col_indices()[run.clone()]);
                copy_into(out_vals, &tile.values()[run]);
                return;
            }
            let mut pos = 0;
            for i in rows.clone() {
                for &t in covering {
                    let (chunk, tile) = (&tiles[t].0, &tiles[t].1);
                    let (tc, tv) = tile.row(i - chunk.rows.start);
                    let end = pos + tc.len();
                    shifted_into(&mut out_cols[pos..end], tc, chunk.cols.start as u32);
                    copy_into(&mut out_vals[pos..end], tv);
                    pos = end;
                }
            }
        },
    );
    drop(copy);
    tracing::debug_span!("free the chunks").in_scope(|| drop(tiles));
    // SAFETY: the bands cover rows `0..nrows` once each, in order (`bands` checks it), and
    // `split_spare` gave each band the part of the spare capacity its rows own: one offset per
    // row, and as many entries as its tiles hold there (`len_of`, the same sums the offsets
    // were made from). Each band wrote all of its part above (a run of the one tile's arrays,
    // or every covering tile's row in turn), so every position up to these lengths is written.
    unsafe {
        offsets.set_len(nrows + 1);
        cols.set_len(nnz);
        vals.set_len(nnz);
    }
    let _check = tracing::debug_span!("check C").entered();
    Ok(Csr::try_new(nrows, ncols, offsets, cols, vals)?)
}

/// Entries of `tile` in `rows` (rows of C inside its chunk).
fn tile_entries<T: Scalar>((chunk, tile): &Tile<T>, rows: &Range<usize>) -> u64 {
    let off = tile.row_offsets();
    off[rows.end - chunk.rows.start] - off[rows.start - chunk.rows.start]
}

/// The spare capacity of `data` cut into one part per band, `len(band)` elements each, in order.
fn split_spare<'a, 'b, E>(
    data: &'a mut Vec<E>,
    bands: &'b [Band],
    len: impl Fn(&Band) -> usize,
) -> Vec<(&'b Band, &'a mut [MaybeUninit<E>])> {
    let mut rest = data.spare_capacity_mut();
    let mut parts = Vec::with_capacity(bands.len());
    for band in bands {
        let (part, tail) = std::mem::take(&mut rest).split_at_mut(len(band));
        parts.push((band, part));
        rest = tail;
    }
    parts
}

/// Copies `src` into `dst`, of the same length: C's fresh arrays, written with streaming
/// stores ([`crate::host::copy_streaming`]).
fn copy_into<E: Copy>(dst: &mut [MaybeUninit<E>], src: &[E]) {
    crate::host::copy_streaming(dst, src);
}

/// Writes the column indices `src` into `dst` (of the same length), moved by `shift`.
fn shifted_into(dst: &mut [MaybeUninit<u32>], src: &[u32], shift: u32) {
    assert_eq!(dst.len(), src.len(), "a tile's part of C has its length");
    for (d, &c) in dst.iter_mut().zip(src) {
        d.write(c + shift);
    }
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
        backend: crate::BackendKind::Host,
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
    fn chunks_of_rows_and_columns_in_any_mix() {
        let a = generate::uniform::<f64>(3000, 400, 6, 5);
        let b = generate::uniform::<f64>(400, 300, 5, 6);
        let c = reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        let first = tile(&a, &b, 0..1000, 0..300);
        let kept = first.1.clone();
        let tiles = vec![
            tile(&a, &b, 1000..3000, 150..300),
            tile(&a, &b, 1000..2999, 0..150),
            tile(&a, &b, 2999..3000, 0..150),
            first,
        ];
        assert_eq!(assemble_chunks(3000, 300, tiles).unwrap(), c);
        assert_eq!(kept, c.rows(0..1000).unwrap());
        // Chunks of rows of every column only, and one of all of C with empty chunks beside.
        let rows_only: Vec<Tile<f64>> = [0, 7, 700, 701, 2500, 3000]
            .windows(2)
            .map(|w| tile(&a, &b, w[0]..w[1], 0..300))
            .collect();
        assert_eq!(assemble_chunks(3000, 300, rows_only).unwrap(), c);
        let alone = vec![
            tile(&a, &b, 0..3000, 0..300),
            tile(&a, &b, 3000..3000, 0..300),
            tile(&a, &b, 0..3000, 300..300),
        ];
        assert_eq!(assemble_chunks(3000, 300, alone).unwrap(), c);
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

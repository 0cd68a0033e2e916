//! Deterministic, seeded generators for the benchmark matrix classes.
//!
//! Each class mimics the structure of a family of matrices from the papers' test sets (see
//! [`MatrixClass`]), so tests and benchmarks need no download. Every generator:
//!
//! - is a pure function of its arguments: the same seed gives the same matrix on every platform
//!   and for every number of rayon threads (each row, or each fixed-size chunk of R-MAT edges,
//!   draws from its own random stream derived from the seed and its index);
//! - returns a canonical [`Csr`] (sorted, distinct column indices);
//! - stores values of magnitude in `[0.1, 1)` with a random sign and never zero, built with
//!   [`Scalar::from_parts_lossy`] from a random real and imaginary part (real types drop the
//!   imaginary part; f16/bf16 round, so a magnitude may round up to 1); the exact types hold
//!   that magnitude times 8, rounded: ±1 to ±8 (1 to 8 unsigned, `true` for `bool`), small
//!   enough that products of classes stay clear of overflow;
//! - never fails: arguments that make no sense are clamped as each function documents, and a
//!   zero size gives an empty matrix. Dimensions are clamped to [`MAX_DIMENSION`] (indices are
//!   `u32`); memory for the requested entries is the caller's concern.
//!
//! ```
//! use hetsparse_core::generate::{self, MatrixClass};
//! let a = generate::uniform::<f64>(100, 50, 4, 7);
//! assert_eq!((a.shape(), a.nnz()), ((100, 50), 400));
//! assert_eq!(a, generate::uniform::<f64>(100, 50, 4, 7));
//! let (a, b) = generate::product_operands::<f32>(MatrixClass::LpRectangular, 1000, 1);
//! assert_eq!((a.shape(), b.shape()), ((50, 1000), (1000, 50)));
//! ```

use std::fmt;
use std::ops::{Range, RangeInclusive};
use std::str::FromStr;

use rayon::prelude::*;

use crate::error::Error;
use crate::format::{Csr, Dia, MAX_DIMENSION};
use crate::scalar::{Scalar, ScalarType};

/// A band matrix in DIA form with the diagonals `offsets` (increasing, each inside the
/// `nrows × ncols` shape, else the [`Dia::try_new`] error), every slot inside the matrix
/// holding a positive value in `[0.1, 1)` that depends only on the seed, the diagonal and the
/// row (so a row block of one matrix equals the same rows generated alone), padding zero. Made
/// on every core: band products for benchmarks run to tens of GB.
///
/// ```
/// let a = hetsparse_core::generate::band_dia::<f64>(5, 4, &[-1, 0, 2], 3)?;
/// assert_eq!((a.shape(), a.ndiags()), ((5, 4), 3));
/// assert_eq!(a.diagonal(2)[2], 0.0); // row 2, column 4: outside, padding
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn band_dia<T: Scalar>(
    nrows: usize,
    ncols: usize,
    offsets: &[i64],
    seed: u64,
) -> Result<Dia<T>, Error> {
    const PIECE: usize = 1 << 16;
    let _span = tracing::debug_span!("generate", class = "band (DIA)", rows = nrows).entered();
    let len = nrows
        .checked_mul(offsets.len())
        .ok_or_else(|| Error::InvalidArgument("band_dia: rows × diagonals overflows".into()))?;
    let mut data: Vec<T> = crate::host::try_with_capacity(len, "generated band")?;
    if nrows > 0 {
        data.spare_capacity_mut()[..len]
            .par_chunks_mut(nrows)
            .zip(offsets.par_iter())
            .for_each(|(diagonal, &off)| {
                diagonal
                    .par_chunks_mut(PIECE)
                    .enumerate()
                    .for_each(|(k, piece)| {
                        for (t, slot) in piece.iter_mut().enumerate() {
                            let i = k * PIECE + t;
                            let j = i as i64 + off;
                            slot.write(if j < 0 || j >= ncols as i64 {
                                T::zero()
                            } else {
                                let h = hash(seed ^ mix(off as u64), SALT_BAND_DIA, i as u64);
                                let unit = (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                                value_of(0.1 + 0.9 * unit, 0.0)
                            });
                        }
                    });
            });
    }
    // SAFETY: every slot of every diagonal was written above.
    unsafe { data.set_len(len) };
    Ok(Dia::try_new(nrows, ncols, offsets.to_vec(), data)?)
}

/// A value from a real and an imaginary part of magnitude in `[0.1, 1)` (see the module docs):
/// the floats hold what they can, the exact types a small integer that is never zero.
pub fn value_of<T: Scalar>(re: f64, im: f64) -> T {
    if T::TYPE.is_exact() {
        let k = (re * 8.0).round();
        let k = if matches!(T::TYPE, ScalarType::U32 | ScalarType::U64) {
            k.abs()
        } else {
            k
        };
        T::from_f64(k)
    } else {
        T::from_parts_lossy(re, im)
    }
}

/// The benchmark matrix classes: the papers' test sets, grouped by structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixClass {
    /// FEM-like 3D stencil with several unknowns per node (cant, consph, pwtk, shipsec1):
    /// [`stencil_3d`].
    Stencil3d,
    /// A band of full diagonals around the main one (Matam's DIA study): [`banded`].
    Banded,
    /// Power-law graph from R-MAT (webbase, LiveJournal, wikipedia): [`rmat`].
    PowerLaw,
    /// The same number of uniformly random columns in every row: [`uniform`].
    Uniform,
    /// Road-network-like planar graph of low degree (roadNet-CA): [`road_grid`].
    Road,
    /// Sparse background with a few nearly full rows and columns (scircuit, mc2depi):
    /// [`skewed`].
    Skewed,
    /// Rectangular LP constraint matrix with far more columns than rows, multiplied by its
    /// transpose (rail2428): [`lp_rectangular`].
    LpRectangular,
    /// Every entry stored: [`dense`].
    Dense,
}

impl MatrixClass {
    /// Every class, in a fixed order.
    pub const ALL: [MatrixClass; 8] = [
        MatrixClass::Stencil3d,
        MatrixClass::Banded,
        MatrixClass::PowerLaw,
        MatrixClass::Uniform,
        MatrixClass::Road,
        MatrixClass::Skewed,
        MatrixClass::LpRectangular,
        MatrixClass::Dense,
    ];

    /// Short lowercase name, as used on command lines and in benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            MatrixClass::Stencil3d => "stencil3d",
            MatrixClass::Banded => "banded",
            MatrixClass::PowerLaw => "powerlaw",
            MatrixClass::Uniform => "uniform",
            MatrixClass::Road => "road",
            MatrixClass::Skewed => "skewed",
            MatrixClass::LpRectangular => "lp",
            MatrixClass::Dense => "dense",
        }
    }
}

impl fmt::Display for MatrixClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MatrixClass {
    type Err = Error;

    /// Parses a [`MatrixClass::name`] (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Error> {
        MatrixClass::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = MatrixClass::ALL.iter().map(|c| c.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown matrix class `{s}`; expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// Operands `(A, B)` of a product `A · B` of about `size` rows of `class`, for tests and
/// benchmarks.
///
/// Square classes return `B = A` (the papers square their matrices); [`MatrixClass::LpRectangular`]
/// returns `(A, Aᵀ)`. The shapes chosen for `size`:
///
/// | class | A |
/// |---|---|
/// | `Stencil3d` | 27-point stencil, 3 unknowns per node, side `round(cbrt(size / 3))` (at least 1) |
/// | `Banded` | `size × size`, 11 diagonals |
/// | `PowerLaw` | R-MAT of scale `floor(log2(size))`, edge factor 8 |
/// | `Uniform` | `size × size`, 8 entries per row |
/// | `Road` | grid of `floor(sqrt(size))²` nodes |
/// | `Skewed` | `size × size`, 4 background entries per row, `min(size / 1000 + 1, 16)` nearly full rows and as many columns |
/// | `Lp` | `max(size / 20, 1) × size`, 4 to 10 entries per column |
/// | `Dense` | `min(size, 512)` square |
///
/// The skewed class caps its dense rows and columns at 16: each dense column adds a product to
/// every row of A·A per dense column, so `size / 1000` of them would make the product
/// quadratic in `size`. `size = 0` gives two `0 × 0` matrices; sizes above [`MAX_DIMENSION`]
/// are clamped to it.
pub fn product_operands<T: Scalar>(class: MatrixClass, size: usize, seed: u64) -> (Csr<T>, Csr<T>) {
    let size = size.min(MAX_DIMENSION);
    if size == 0 {
        return (empty(0, 0), empty(0, 0));
    }
    let square = |a: Csr<T>| (a.clone(), a);
    match class {
        MatrixClass::Stencil3d => {
            let side = ((size as f64 / 3.0).cbrt().round() as usize).max(1);
            square(stencil_3d(side, Stencil::TwentySeven, 3, seed))
        }
        MatrixClass::Banded => square(banded(size, 11, seed)),
        MatrixClass::PowerLaw => square(rmat(size.ilog2(), 8, seed)),
        MatrixClass::Uniform => square(uniform(size, size, 8, seed)),
        MatrixClass::Road => {
            let side = isqrt(size);
            square(road_grid(side, side, seed))
        }
        MatrixClass::Skewed => {
            let dense = (size / 1000 + 1).min(16);
            square(skewed(size, 4, dense, dense, seed))
        }
        MatrixClass::LpRectangular => {
            let a = lp_with_counts((size / 20).max(1), size, 4..=10, seed);
            let t = transpose_generated(&a);
            (a, t)
        }
        MatrixClass::Dense => square(dense(size.min(512), size.min(512), seed)),
    }
}

/// Which neighbours a 3D stencil couples: see [`stencil_3d`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stencil {
    /// The node and its 6 face neighbours.
    Seven,
    /// The full 3×3×3 neighbourhood.
    TwentySeven,
}

/// FEM-like matrix of a 3D grid of `side³` nodes with `dofs` unknowns per node: unknown `a` of
/// node `u` is coupled to every unknown of every stencil neighbour of `u` (itself included),
/// giving `dofs × dofs` blocks like the SuiteSparse FEM matrices (cant, pwtk).
///
/// `stencil` picks the neighbourhood: the full 3×3×3 one or the node and its 6 face
/// neighbours. Nodes
/// are numbered x fastest, then y, then z; unknowns of a node are consecutive. The pattern is
/// symmetric. `dofs = 0` is treated as 1; `side` is reduced so that `side³ · dofs` fits
/// [`MAX_DIMENSION`].
///
/// ```
/// use hetsparse_core::generate::{stencil_3d, Stencil};
/// let a = stencil_3d::<f64>(3, Stencil::Seven, 2, 0);
/// assert_eq!(a.shape(), (54, 54));
/// // The centre node has 7 neighbours (itself included), each a 2×2 block.
/// assert_eq!(a.row_nnz(2 * 13), 14);
/// ```
pub fn stencil_3d<T: Scalar>(side: usize, stencil: Stencil, dofs: usize, seed: u64) -> Csr<T> {
    let dofs = dofs.clamp(1, MAX_DIMENSION);
    let side = side.min(icbrt(MAX_DIMENSION / dofs));
    let wide = stencil == Stencil::TwentySeven;
    let n = side * side * side * dofs;
    let _span =
        tracing::debug_span!("generate", class = "stencil3d", side, wide, dofs, rows = n).entered();
    let mut offsets: Vec<(isize, isize, isize)> = Vec::with_capacity(27);
    for dz in -1isize..=1 {
        for dy in -1isize..=1 {
            for dx in -1isize..=1 {
                if wide || dx.abs() + dy.abs() + dz.abs() <= 1 {
                    offsets.push((dz, dy, dx));
                }
            }
        }
    }
    let coords = move |row: usize| {
        let node = row / dofs;
        (node % side, (node / side) % side, node / (side * side))
    };
    // Valid offsets along one axis: -1 unless at 0, 0, +1 unless at the far end.
    let axis = move |c: usize| 1 + usize::from(c > 0) + usize::from(c + 1 < side);
    let len = move |row: usize| {
        let (x, y, z) = coords(row);
        let (cx, cy, cz) = (axis(x), axis(y), axis(z));
        let nodes = if wide { cx * cy * cz } else { cx + cy + cz - 2 };
        nodes * dofs
    };
    let fill = move |row: usize, _: &mut Rng, out: &mut Vec<u32>| {
        let (x, y, z) = coords(row);
        let inside = |c: usize, d: isize| {
            let v = c as isize + d;
            (v >= 0 && v < side as isize).then_some(v as usize)
        };
        // (dz, dy, dx) in lexicographic order visits neighbours in increasing index order.
        for &(dz, dy, dx) in &offsets {
            if let (Some(nx), Some(ny), Some(nz)) = (inside(x, dx), inside(y, dy), inside(z, dz)) {
                let first = ((nz * side + ny) * side + nx) * dofs;
                out.extend((first..first + dofs).map(|j| j as u32));
            }
        }
    };
    build_known(n, n, seed, SALT_STENCIL, len, fill)
}

/// `n × n` band matrix with `diagonals` full diagonals centred on the main one: `(diagonals -
/// 1) / 2` below it and `diagonals / 2` above it (an even count has one more above).
///
/// A count above `2n - 1` is clamped to `2n - 1` (the full matrix); `0` gives no entries.
///
/// ```
/// let a = hetsparse_core::generate::banded::<f32>(10, 3, 1);
/// assert_eq!(a.nnz(), 28);
/// assert_eq!(a.row(0).0, &[0, 1]);
/// ```
pub fn banded<T: Scalar>(n: usize, diagonals: usize, seed: u64) -> Csr<T> {
    let n = n.min(MAX_DIMENSION);
    let _span = tracing::debug_span!("generate", class = "banded", rows = n, diagonals).entered();
    if diagonals == 0 || n == 0 {
        return empty(n, n);
    }
    let below = ((diagonals - 1) / 2).min(n - 1);
    let above = (diagonals / 2).min(n - 1);
    let span = move |row: usize| row.saturating_sub(below)..(row + above + 1).min(n);
    let len = move |row: usize| span(row).len();
    let fill =
        move |row: usize, _: &mut Rng, out: &mut Vec<u32>| out.extend(span(row).map(|j| j as u32));
    build_known(n, n, seed, SALT_BANDED, len, fill)
}

/// Graph500 R-MAT quadrant probabilities (a, b, c; d = 1 - a - b - c) in 16-bit fixed point,
/// cumulative.
const RMAT_A: u32 = 37_356; // 0.57
const RMAT_AB: u32 = 49_807; // 0.57 + 0.19
const RMAT_ABC: u32 = 62_259; // 0.57 + 0.19 + 0.19

/// Edges generated from one random stream: fixed, so results do not depend on thread count.
const RMAT_CHUNK: usize = 1 << 16;

/// Power-law directed graph from the R-MAT recursive generator with the Graph500 parameters
/// (a, b, c, d) = (0.57, 0.19, 0.19, 0.05): `2^scale` vertices and `edge_factor · 2^scale`
/// edges, as the adjacency matrix (row = source).
///
/// Duplicate edges are merged into one entry, so nnz is somewhat below the edge count; self
/// loops are kept when drawn. As in Graph500, vertex numbers are scrambled by a seeded
/// bijection, so high-degree vertices are spread over the matrix instead of sitting in the
/// first rows. The pattern is not symmetric. `scale` is clamped to 31 (dimensions are `u32`).
///
/// ```
/// let a = hetsparse_core::generate::rmat::<f64>(10, 8, 3);
/// assert_eq!(a.shape(), (1024, 1024));
/// assert!(a.nnz() <= 8 * 1024);
/// ```
pub fn rmat<T: Scalar>(scale: u32, edge_factor: u32, seed: u64) -> Csr<T> {
    let scale = scale.min(31);
    let n = 1usize << scale;
    let edges = (edge_factor as usize).saturating_mul(n);
    let span = tracing::debug_span!(
        "generate",
        class = "powerlaw",
        scale,
        edges,
        nnz = tracing::field::Empty
    );
    let _enter = span.enter();
    let mask = (n as u64) - 1;
    let keys: [(u64, u64); 3] = std::array::from_fn(|k| {
        let mut r = Rng::stream(seed, SALT_RMAT_SCRAMBLE, k as u64);
        (r.next_u64() | 1, r.next_u64())
    });
    let half = (scale / 2).max(1);
    let scramble = |mut x: u64| {
        for &(mul, add) in &keys {
            x = x.wrapping_mul(mul).wrapping_add(add) & mask;
            x ^= x >> half;
        }
        x
    };
    // Packed (row << 32 | column): one sort gives rows in order and columns sorted within them.
    let mut packed = vec![0u64; edges];
    packed
        .par_chunks_mut(RMAT_CHUNK)
        .enumerate()
        .for_each(|(chunk, out)| {
            let mut rng = Rng::stream(seed, SALT_RMAT, chunk as u64);
            for e in out.iter_mut() {
                let (mut r, mut c) = (0u64, 0u64);
                let mut word = 0u64;
                for level in 0..scale {
                    if level % 4 == 0 {
                        word = rng.next_u64();
                    }
                    let x = (word & 0xFFFF) as u32;
                    word >>= 16;
                    let (dr, dc) = if x < RMAT_A {
                        (0, 0)
                    } else if x < RMAT_AB {
                        (0, 1)
                    } else if x < RMAT_ABC {
                        (1, 0)
                    } else {
                        (1, 1)
                    };
                    r = (r << 1) | dr;
                    c = (c << 1) | dc;
                }
                *e = (scramble(r) << 32) | scramble(c);
            }
        });
    packed.par_sort_unstable();
    packed.dedup();
    span.record("nnz", packed.len());
    let mut row_offsets = vec![0u64; n + 1];
    for &e in &packed {
        row_offsets[(e >> 32) as usize + 1] += 1;
    }
    for i in 0..n {
        row_offsets[i + 1] += row_offsets[i];
    }
    let col_indices: Vec<u32> = packed.par_iter().map(|&e| e as u32).collect();
    drop(packed);
    finish(n, n, row_offsets, col_indices, seed, SALT_RMAT)
}

/// `nrows × ncols` matrix with exactly `nnz_per_row` distinct, uniformly random columns in every
/// row (clamped to `ncols`, which makes every row full).
///
/// ```
/// let a = hetsparse_core::generate::uniform::<f32>(5, 3, 10, 0);
/// assert_eq!(a.nnz(), 15);
/// ```
pub fn uniform<T: Scalar>(nrows: usize, ncols: usize, nnz_per_row: usize, seed: u64) -> Csr<T> {
    let (nrows, ncols) = (nrows.min(MAX_DIMENSION), ncols.min(MAX_DIMENSION));
    let k = nnz_per_row.min(ncols);
    let _span = tracing::debug_span!(
        "generate",
        class = "uniform",
        rows = nrows,
        cols = ncols,
        per_row = k
    )
    .entered();
    build_known(
        nrows,
        ncols,
        seed,
        SALT_UNIFORM,
        move |_| k,
        move |_, rng, out| sample_distinct(rng, ncols, k, out),
    )
}

/// Share of grid edges a road network drops, as a probability in 16-bit fixed point (15 %).
const ROAD_DROP: u64 = 9_830;
/// Share of nodes with a shortcut, in 16-bit fixed point (2 %).
const ROAD_SHORTCUT: u64 = 1_311;
/// Shortcuts reach nodes at most this far along each axis.
const ROAD_REACH: isize = 3;

/// Road-network-like graph on a `width × height` grid (node `x + y · width`): each of the
/// 4-neighbour grid edges is dropped with probability 15 %, and about 2 % of the nodes get a
/// shortcut to a node at most 3 steps away along each axis (never a grid neighbour), as the
/// symmetric adjacency matrix without self loops.
///
/// The result has the low, nearly uniform degree (about 3.5) and the locality of road networks
/// such as roadNet-CA. `height` is reduced so that `width · height` fits [`MAX_DIMENSION`].
///
/// ```
/// let a = hetsparse_core::generate::road_grid::<f64>(20, 10, 5);
/// assert_eq!(a.shape(), (200, 200));
/// // The pattern is symmetric (the values are not).
/// assert_eq!(a.col_indices(), a.transpose()?.col_indices());
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn road_grid<T: Scalar>(width: usize, height: usize, seed: u64) -> Csr<T> {
    let width = width.min(MAX_DIMENSION);
    let height = MAX_DIMENSION
        .checked_div(width)
        .map_or(0, |most| height.min(most));
    let n = width * height;
    let _span = tracing::debug_span!("generate", class = "road", width, height, rows = n).entered();
    let keep = move |edge: u64| (hash(seed, SALT_ROAD_EDGE, edge) & 0xFFFF) >= ROAD_DROP;
    // Shortcuts in both directions, sorted, so that each row finds its own by binary search.
    let mut shortcuts: Vec<(u32, u32)> = (0..n)
        .into_par_iter()
        .filter_map(|u| {
            let h = hash(seed, SALT_ROAD_SHORTCUT, u as u64);
            if (h & 0xFFFF) >= ROAD_SHORTCUT {
                return None;
            }
            let side = 2 * ROAD_REACH + 1;
            let pick = ((h >> 16) % (side * side) as u64) as isize;
            let (dx, dy) = (pick % side - ROAD_REACH, pick / side - ROAD_REACH);
            if dx.abs() + dy.abs() < 2 {
                return None;
            }
            let (x, y) = ((u % width) as isize + dx, (u / width) as isize + dy);
            let inside = x >= 0 && y >= 0 && x < width as isize && y < height as isize;
            inside.then(|| (u as u32, (y as usize * width + x as usize) as u32))
        })
        .flat_map_iter(|(u, v)| [(u, v), (v, u)])
        .collect();
    shortcuts.par_sort_unstable();
    shortcuts.dedup();
    let row = move |u: usize, _: &mut Rng, out: &mut Vec<u32>| {
        let start = out.len();
        let (x, y) = (u % width, u / width);
        let id = |node: usize, vertical: bool| 2 * node as u64 + u64::from(vertical);
        if y > 0 && keep(id(u - width, true)) {
            out.push((u - width) as u32);
        }
        if x > 0 && keep(id(u - 1, false)) {
            out.push((u - 1) as u32);
        }
        if x + 1 < width && keep(id(u, false)) {
            out.push((u + 1) as u32);
        }
        if y + 1 < height && keep(id(u, true)) {
            out.push((u + width) as u32);
        }
        let first = shortcuts.partition_point(|&(s, _)| (s as usize) < u);
        let own = shortcuts[first..]
            .iter()
            .take_while(|&&(s, _)| s as usize == u);
        out.extend(own.map(|&(_, v)| v));
        sort_dedup_tail(out, start);
    };
    build_rows(n, n, seed, SALT_ROAD, row)
}

/// Fraction of the entries a dense row or column of [`skewed`] holds.
pub const SKEWED_DENSE_FILL: f64 = 0.9;

/// Circuit-like `n × n` matrix with a skewed row and column length distribution: every row holds
/// `nnz_per_row` uniformly random columns (clamped to `n`), plus `dense_rows` rows and
/// `dense_cols` columns, at random positions, that are nearly full, like scircuit or mc2depi.
///
/// A dense row holds `round(0.9 n)` random columns ([`SKEWED_DENSE_FILL`], or `nnz_per_row`
/// if that is more) instead of the background ones; each row holds each dense column with
/// probability 0.9.
///
/// Dense rows and dense columns have distinct indices, so that squaring the matrix does not
/// produce a full result (a dense column times the equally numbered dense row would). When
/// `dense_rows + dense_cols > n`, `dense_rows` is clamped to `n` first and `dense_cols` to what
/// remains.
///
/// ```
/// let a = hetsparse_core::generate::skewed::<f64>(1000, 3, 2, 2, 9);
/// let longest = (0..1000).map(|i| a.row_nnz(i)).max().unwrap();
/// assert!(longest >= 900);
/// ```
pub fn skewed<T: Scalar>(
    n: usize,
    nnz_per_row: usize,
    dense_rows: usize,
    dense_cols: usize,
    seed: u64,
) -> Csr<T> {
    let n = n.min(MAX_DIMENSION);
    let dense_rows = dense_rows.min(n);
    let dense_cols = dense_cols.min(n - dense_rows);
    let k = nnz_per_row.min(n);
    let _span = tracing::debug_span!(
        "generate",
        class = "skewed",
        rows = n,
        per_row = k,
        dense_rows,
        dense_cols
    )
    .entered();
    let mut rng = Rng::stream(seed, SALT_SKEWED_PICK, 0);
    let mut special = Vec::with_capacity(dense_rows + dense_cols);
    sample_distinct(&mut rng, n, dense_rows + dense_cols, &mut special);
    // Fisher–Yates, so the dense rows are a random subset of the special indices.
    for i in (1..special.len()).rev() {
        special.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (mut rows, mut cols) = (
        special[..dense_rows].to_vec(),
        special[dense_rows..].to_vec(),
    );
    rows.sort_unstable();
    cols.sort_unstable();
    // The exact count a dense row holds: round(0.9 n).
    let full = ((n as f64) * SKEWED_DENSE_FILL).round() as usize;
    let fill_cut = (SKEWED_DENSE_FILL * 65_536.0) as u64;
    let row = move |i: usize, rng: &mut Rng, out: &mut Vec<u32>| {
        let start = out.len();
        if rows.binary_search(&(i as u32)).is_ok() {
            sample_distinct(rng, n, full.max(k), out);
        } else {
            sample_distinct(rng, n, k, out);
        }
        for &j in &cols {
            if (rng.next_u64() & 0xFFFF) < fill_cut {
                out.push(j);
            }
        }
        sort_dedup_tail(out, start);
    };
    build_rows(n, n, seed, SALT_SKEWED, row)
}

/// LP-like `nrows × ncols` constraint matrix: column `j` holds a count drawn uniformly from
/// `nnz_per_col` (clamped to `nrows`) of distinct, uniformly random rows. With `nrows ≪ ncols`
/// this is the shape of rail2428, whose product with its transpose the papers measure.
///
/// A reversed range (`10..=4`) is read as `4..=10`.
fn lp_with_counts<T: Scalar>(
    nrows: usize,
    ncols: usize,
    nnz_per_col: RangeInclusive<usize>,
    seed: u64,
) -> Csr<T> {
    let (nrows, ncols) = (nrows.min(MAX_DIMENSION), ncols.min(MAX_DIMENSION));
    let (lo, hi) = (*nnz_per_col.start(), *nnz_per_col.end());
    let (lo, hi) = (lo.min(hi).min(nrows), lo.max(hi).min(nrows));
    let _span = tracing::debug_span!("generate", class = "lp", rows = nrows, cols = ncols, lo, hi)
        .entered();
    // Generated as its transpose (one row per column), where the per-column counts are rows.
    let column = move |_: usize, rng: &mut Rng, out: &mut Vec<u32>| {
        let count = lo + rng.below((hi - lo) as u64 + 1) as usize;
        sample_distinct(rng, nrows, count, out);
    };
    let transposed: Csr<T> = build_rows(ncols, nrows, seed, SALT_LP, column);
    transpose_generated(&transposed)
}

/// The transpose of a generated matrix. Generators allocate infallibly for the sizes asked of
/// them (they are benchmark inputs, not untrusted data); this keeps that contract, with a
/// message rather than an abort when the host cannot hold the result.
fn transpose_generated<T: Scalar>(a: &Csr<T>) -> Csr<T> {
    a.transpose()
        .unwrap_or_else(|e| panic!("generated matrix: {e}"))
}

/// LP-like `nrows × ncols` constraint matrix with `nnz_per_col` (clamped to `nrows`) distinct,
/// uniformly random rows in every column: with `nrows ≪ ncols` the shape of rail2428, whose
/// product with its transpose the papers measure.
///
/// ```
/// let a = hetsparse_core::generate::lp_rectangular::<f64>(20, 500, 3, 2);
/// assert_eq!((a.shape(), a.nnz()), ((20, 500), 1500));
/// ```
pub fn lp_rectangular<T: Scalar>(
    nrows: usize,
    ncols: usize,
    nnz_per_col: usize,
    seed: u64,
) -> Csr<T> {
    lp_with_counts(nrows, ncols, nnz_per_col..=nnz_per_col, seed)
}

/// `nrows × ncols` matrix with every entry stored (and none zero).
///
/// ```
/// let a = hetsparse_core::generate::dense::<f64>(3, 4, 0);
/// assert_eq!(a.nnz(), 12);
/// ```
pub fn dense<T: Scalar>(nrows: usize, ncols: usize, seed: u64) -> Csr<T> {
    let (nrows, ncols) = (nrows.min(MAX_DIMENSION), ncols.min(MAX_DIMENSION));
    let _span =
        tracing::debug_span!("generate", class = "dense", rows = nrows, cols = ncols).entered();
    build_known(
        nrows,
        ncols,
        seed,
        SALT_DENSE,
        move |_| ncols,
        move |_, _, out| out.extend(0..ncols as u32),
    )
}

// Stream salts: each generator (and each use within one) draws from its own streams.
const SALT_STENCIL: u64 = 1;
const SALT_BANDED: u64 = 2;
const SALT_RMAT: u64 = 3;
const SALT_RMAT_SCRAMBLE: u64 = 4;
const SALT_UNIFORM: u64 = 5;
const SALT_ROAD: u64 = 6;
const SALT_ROAD_EDGE: u64 = 7;
const SALT_ROAD_SHORTCUT: u64 = 8;
const SALT_SKEWED: u64 = 9;
const SALT_SKEWED_PICK: u64 = 10;
const SALT_LP: u64 = 11;
const SALT_DENSE: u64 = 12;
const SALT_BAND_DIA: u64 = 13;
/// Values use streams apart from structure, so that they do not depend on how many random
/// numbers the structure of a row consumed.
const SALT_VALUES: u64 = 0x5641_4C55_4553; // "VALUES"

/// Rows generated by one rayon task.
const ROWS_PER_TASK: usize = 512;

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of `(seed, salt, index)`: decisions that two rows must agree on (a road edge seen
/// from both ends) are hashes, not draws from a row's stream.
fn hash(seed: u64, salt: u64, index: u64) -> u64 {
    let h = mix(seed.wrapping_add(0x9E37_79B9_7F4A_7C15));
    let h = mix(h ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
    mix(h ^ index.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7))
}

/// SplitMix64: small, fast, and the same on every platform. Tests use it to make their own
/// random operands.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A stream determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(hash(seed, 0, 0))
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The stream of `index` (a row, a chunk) within generator `salt`.
    fn stream(seed: u64, salt: u64, index: u64) -> Self {
        Rng(hash(seed, salt, index))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias of at most n / 2^64 is irrelevant).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// `±[0.1, 1)`, never zero.
    fn signed_magnitude(&mut self) -> f64 {
        let r = self.next_u64();
        let unit = (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let magnitude = 0.1 + 0.9 * unit;
        if r & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }
}

fn isqrt(n: usize) -> usize {
    let mut r = (n as f64).sqrt() as usize;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

fn icbrt(n: usize) -> usize {
    let mut r = (n as f64).cbrt() as usize;
    while r > 0 && r.saturating_mul(r).saturating_mul(r) > n {
        r -= 1;
    }
    while (r + 1).saturating_mul(r + 1).saturating_mul(r + 1) <= n {
        r += 1;
    }
    r
}

/// Appends `k` (clamped to `n`) distinct uniformly random indices of `0..n`, sorted.
fn sample_distinct(rng: &mut Rng, n: usize, k: usize, out: &mut Vec<u32>) {
    let k = k.min(n);
    if k == n {
        out.extend(0..n as u32);
    } else if k > n / 2 {
        // Drawing the few excluded indices is cheaper than rejecting many repeats.
        let mut excluded = Vec::with_capacity(n - k);
        sample_few(rng, n, n - k, &mut excluded);
        let mut skip = excluded.into_iter().peekable();
        for j in 0..n as u32 {
            if skip.peek() == Some(&j) {
                skip.next();
            } else {
                out.push(j);
            }
        }
    } else {
        sample_few(rng, n, k, out);
    }
}

/// [`sample_distinct`] for `k ≤ n / 2`: draw, sort, drop repeats, draw again what is missing.
fn sample_few(rng: &mut Rng, n: usize, k: usize, out: &mut Vec<u32>) {
    let start = out.len();
    while out.len() - start < k {
        let missing = k - (out.len() - start);
        out.extend((0..missing).map(|_| rng.below(n as u64) as u32));
        sort_dedup_tail(out, start);
    }
}

/// Sorts `v[start..]` and removes repeats from it.
fn sort_dedup_tail(v: &mut Vec<u32>, start: usize) {
    v[start..].sort_unstable();
    let mut write = start;
    for read in start..v.len() {
        if write == start || v[read] != v[write - 1] {
            v[write] = v[read];
            write += 1;
        }
    }
    v.truncate(write);
}

fn empty<T: Scalar>(nrows: usize, ncols: usize) -> Csr<T> {
    let nrows = nrows.min(MAX_DIMENSION);
    let ncols = ncols.min(MAX_DIMENSION);
    // SAFETY: no entries, offsets all zero, and the shape fits the index types.
    unsafe { Csr::from_parts_unchecked(nrows, ncols, vec![0; nrows + 1], Vec::new(), Vec::new()) }
}

/// Splits `data` (laid out by `offsets`) into the slices of consecutive row blocks.
fn split_rows<'a, X>(
    offsets: &[u64],
    mut data: &'a mut [X],
    block: usize,
) -> Vec<(Range<usize>, &'a mut [X])> {
    let nrows = offsets.len() - 1;
    let mut parts = Vec::with_capacity(nrows.div_ceil(block));
    let mut start = 0;
    while start < nrows {
        let end = (start + block).min(nrows);
        let len = (offsets[end] - offsets[start]) as usize;
        let (head, tail) = std::mem::take(&mut data).split_at_mut(len);
        parts.push((start..end, head));
        data = tail;
        start = end;
    }
    parts
}

/// Builds a matrix row by row: `row(i, rng, out)` appends row `i`'s sorted, distinct column
/// indices, drawing from the row's own random stream. Here `len` knows each row's length in
/// advance: the output is allocated once and
/// filled in parallel.
fn build_known<T: Scalar>(
    nrows: usize,
    ncols: usize,
    seed: u64,
    salt: u64,
    len: impl Fn(usize) -> usize + Sync,
    row: impl Fn(usize, &mut Rng, &mut Vec<u32>) + Sync,
) -> Csr<T> {
    let lengths: Vec<u64> = (0..nrows).into_par_iter().map(|i| len(i) as u64).collect();
    let mut row_offsets = Vec::with_capacity(nrows + 1);
    row_offsets.push(0u64);
    let mut total = 0u64;
    for l in lengths {
        total += l;
        row_offsets.push(total);
    }
    let mut col_indices = vec![0u32; total as usize];
    split_rows(&row_offsets, &mut col_indices, ROWS_PER_TASK)
        .into_par_iter()
        .for_each(|(rows, out)| {
            let mut scratch = Vec::new();
            let mut at = 0;
            for i in rows {
                scratch.clear();
                row(i, &mut Rng::stream(seed, salt, i as u64), &mut scratch);
                debug_assert_eq!(scratch.len(), len(i), "row {i} has the wrong length");
                out[at..at + scratch.len()].copy_from_slice(&scratch);
                at += scratch.len();
            }
        });
    finish(nrows, ncols, row_offsets, col_indices, seed, salt)
}

/// Builds a matrix whose row lengths are known only once generated: blocks of rows are generated
/// in parallel, then concatenated.
fn build_rows<T: Scalar>(
    nrows: usize,
    ncols: usize,
    seed: u64,
    salt: u64,
    row: impl Fn(usize, &mut Rng, &mut Vec<u32>) + Sync,
) -> Csr<T> {
    let blocks: Vec<(Vec<u64>, Vec<u32>)> = (0..nrows.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|b| {
            let rows = b * ROWS_PER_TASK..((b + 1) * ROWS_PER_TASK).min(nrows);
            let mut lengths = Vec::with_capacity(rows.len());
            let mut cols = Vec::new();
            for i in rows {
                let before = cols.len();
                row(i, &mut Rng::stream(seed, salt, i as u64), &mut cols);
                lengths.push((cols.len() - before) as u64);
            }
            (lengths, cols)
        })
        .collect();
    let mut row_offsets = Vec::with_capacity(nrows + 1);
    row_offsets.push(0u64);
    let mut total = 0u64;
    for (lengths, _) in &blocks {
        for &l in lengths {
            total += l;
            row_offsets.push(total);
        }
    }
    let mut col_indices = vec![0u32; total as usize];
    split_rows(&row_offsets, &mut col_indices, ROWS_PER_TASK)
        .into_par_iter()
        .zip(blocks)
        .for_each(|((_, out), (_, cols))| out.copy_from_slice(&cols));
    finish(nrows, ncols, row_offsets, col_indices, seed, salt)
}

/// Draws the values (each row from its own stream) and assembles the matrix.
fn finish<T: Scalar>(
    nrows: usize,
    ncols: usize,
    row_offsets: Vec<u64>,
    col_indices: Vec<u32>,
    seed: u64,
    salt: u64,
) -> Csr<T> {
    let mut values = vec![T::zero(); col_indices.len()];
    split_rows(&row_offsets, &mut values, ROWS_PER_TASK)
        .into_par_iter()
        .for_each(|(rows, out)| {
            let mut at = 0;
            for i in rows {
                let len = (row_offsets[i + 1] - row_offsets[i]) as usize;
                let mut rng = Rng::stream(seed, salt ^ SALT_VALUES, i as u64);
                for v in &mut out[at..at + len] {
                    let re = rng.signed_magnitude();
                    let im = rng.signed_magnitude();
                    *v = value_of(re, im);
                }
                at += len;
            }
        });
    // SAFETY: every generator emits sorted, distinct, in-bounds columns per row and offsets from
    // the row lengths; the shape was clamped to MAX_DIMENSION. Debug builds re-check, and the
    // tests validate every class with `Csr::try_new`.
    unsafe { Csr::from_parts_unchecked(nrows, ncols, row_offsets, col_indices, values) }
}

/// Zachary's karate club (34 members, 78 friendships), as W. W. Zachary published it (1977)
/// and networkx's `karate_club_graph` numbers it from 0: each member's friends of higher
/// number.
const KARATE: [(u32, &[u32]); 26] = [
    (0, &[1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 17, 19, 21, 31]),
    (1, &[2, 3, 7, 13, 17, 19, 21, 30]),
    (2, &[3, 7, 8, 9, 13, 27, 28, 32]),
    (3, &[7, 12, 13]),
    (4, &[6, 10]),
    (5, &[6, 10, 16]),
    (6, &[16]),
    (8, &[30, 32, 33]),
    (9, &[33]),
    (13, &[33]),
    (14, &[32, 33]),
    (15, &[32, 33]),
    (18, &[32, 33]),
    (19, &[33]),
    (20, &[32, 33]),
    (22, &[32, 33]),
    (23, &[25, 27, 29, 32, 33]),
    (24, &[25, 27, 31]),
    (25, &[31]),
    (26, &[29, 33]),
    (27, &[33]),
    (28, &[31, 33]),
    (29, &[32, 33]),
    (30, &[32, 33]),
    (31, &[32, 33]),
    (32, &[33]),
];

/// The 78 friendships of Zachary's karate club (34 members, numbered from 0 as networkx's
/// `karate_club_graph` numbers them), each once as `(lower, higher)`: a graph with a known
/// answer (45 triangles) for graph-algorithm tests on every backend.
///
/// ```
/// let edges = hetsparse_core::generate::karate_club();
/// assert_eq!(edges.len(), 78);
/// assert!(edges.iter().all(|&(u, v)| u < v && v < 34));
/// ```
pub fn karate_club() -> Vec<(u32, u32)> {
    KARATE
        .iter()
        .flat_map(|&(u, friends)| friends.iter().map(move |&v| (u, v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;

    fn revalidate<T: Scalar>(a: &Csr<T>) {
        let (r, c, o, i, v) = a.clone().into_parts();
        assert!(Csr::try_new(r, c, o, i, v).is_ok(), "not canonical");
    }

    fn check_values<T: Scalar>(a: &Csr<T>) {
        for v in a.values() {
            let (re, im) = v.to_parts();
            assert!((0.099..=1.0).contains(&re.abs()), "value {re}");
            if T::TYPE.is_complex() {
                assert!((0.099..=1.0).contains(&im.abs()), "imaginary part {im}");
            }
        }
    }

    fn symmetric_pattern<T: Scalar>(a: &Csr<T>) -> bool {
        let t = a.transpose().unwrap();
        a.row_offsets() == t.row_offsets() && a.col_indices() == t.col_indices()
    }

    fn row_lengths<T: Scalar>(a: &Csr<T>) -> Vec<u64> {
        (0..a.nrows()).map(|i| a.row_nnz(i)).collect()
    }

    #[test]
    fn rng_is_splitmix64() {
        // Reference outputs of SplitMix64 from state 0 (Vigna's splitmix64.c).
        let mut r = Rng(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn every_class_is_canonical_deterministic_and_seed_dependent() {
        for class in MatrixClass::ALL {
            for size in [1usize, 7, 300, 2000] {
                let (a, b) = product_operands::<f64>(class, size, 11);
                revalidate(&a);
                revalidate(&b);
                check_values(&a);
                assert_eq!(a.ncols(), b.nrows(), "{class} {size}");
                // A 1×1 road grid has no edges; everything else has entries.
                assert!(a.nnz() > 0 || (class, size) == (MatrixClass::Road, 1));
                let (a2, b2) = product_operands::<f64>(class, size, 11);
                assert_eq!((&a, &b), (&a2, &b2), "{class} {size} is not deterministic");
                let (a3, _) = product_operands::<f64>(class, size, 12);
                if a.nnz() > 0 {
                    assert_ne!(a, a3, "{class} {size} ignores the seed");
                }
                if class == MatrixClass::LpRectangular {
                    assert_eq!(b, a.transpose().unwrap());
                } else {
                    assert_eq!(a, b);
                }
            }
            let (a, b) = product_operands::<f32>(class, 0, 1);
            assert_eq!((a.shape(), b.shape()), ((0, 0), (0, 0)));
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for class in MatrixClass::ALL {
            let a = one.install(|| product_operands::<f32>(class, 20_000, 5).0);
            let b = three.install(|| product_operands::<f32>(class, 20_000, 5).0);
            assert_eq!(a, b, "{class}");
        }
        // Several R-MAT chunks of edges.
        let a = one.install(|| rmat::<f64>(14, 16, 5));
        let b = three.install(|| rmat::<f64>(14, 16, 5));
        assert_eq!(a, b);
    }

    #[test]
    fn every_scalar_type_gets_nonzero_values() {
        let a = uniform::<half::f16>(20, 20, 5, 1);
        check_values(&a);
        let a = uniform::<half::bf16>(20, 20, 5, 1);
        check_values(&a);
        let a = uniform::<Complex<f32>>(20, 20, 5, 1);
        check_values(&a);
        let a = uniform::<Complex<f64>>(20, 20, 5, 1);
        check_values(&a);
        // Signs vary.
        assert!(a.values().iter().any(|v| v.re < 0.0) && a.values().iter().any(|v| v.re > 0.0));
        assert!(a.values().iter().any(|v| v.im < 0.0) && a.values().iter().any(|v| v.im > 0.0));
        // The real types see the same real parts as the complex ones.
        let r = uniform::<f64>(20, 20, 5, 1);
        assert!(r.values().iter().zip(a.values()).all(|(x, z)| *x == z.re));
    }

    #[test]
    fn stencil_counts_blocks_and_is_symmetric() {
        for (side, dofs) in [(1usize, 1usize), (2, 3), (4, 3), (5, 1)] {
            let s = side as u64;
            let d = dofs as u64;
            let seven = stencil_3d::<f64>(side, Stencil::Seven, dofs, 1);
            assert_eq!(seven.shape(), (side.pow(3) * dofs, side.pow(3) * dofs));
            // Each node with itself plus both directions of each of the 3·s²·(s−1) grid edges.
            assert_eq!(seven.nnz(), d * d * (s * s * s + 6 * s * s * (s - 1)));
            let wide = stencil_3d::<f64>(side, Stencil::TwentySeven, dofs, 1);
            // Pairs of nodes within distance 1 along each axis: (3s − 2) per axis.
            assert_eq!(wide.nnz(), d * d * (3 * s - 2).pow(3));
            for a in [&seven, &wide] {
                revalidate(a);
                assert!(symmetric_pattern(a));
                assert!((0..a.nrows()).all(|i| a.get(i, i).is_some()));
            }
        }
        // Interior row of the 27-point stencil with 3 unknowns: 27 blocks of 3.
        let a = stencil_3d::<f32>(3, Stencil::TwentySeven, 3, 0);
        assert_eq!(a.row_nnz(13 * 3 + 1), 81);
        // Degenerate arguments are clamped.
        assert_eq!(
            stencil_3d::<f32>(3, Stencil::TwentySeven, 0, 0),
            stencil_3d::<f32>(3, Stencil::TwentySeven, 1, 0)
        );
        assert_eq!(
            stencil_3d::<f32>(0, Stencil::TwentySeven, 3, 0).shape(),
            (0, 0)
        );
    }

    #[test]
    fn banded_has_its_diagonals() {
        for (n, k) in [
            (10usize, 3usize),
            (10, 4),
            (50, 11),
            (5, 9),
            (5, 100),
            (1, 1),
        ] {
            let a = banded::<f64>(n, k, 2);
            revalidate(&a);
            let below = ((k - 1) / 2).min(n - 1);
            let above = (k / 2).min(n - 1);
            for i in 0..n {
                let (cols, _) = a.row(i);
                let want: Vec<u32> = (i.saturating_sub(below)..(i + above + 1).min(n))
                    .map(|j| j as u32)
                    .collect();
                assert_eq!(cols, &want[..], "n {n} k {k} row {i}");
            }
        }
        assert_eq!(banded::<f64>(5, 100, 0).nnz(), 25);
        assert_eq!(banded::<f64>(5, 0, 0).nnz(), 0);
        assert_eq!(banded::<f64>(0, 3, 0).shape(), (0, 0));
    }

    #[test]
    fn rmat_degrees_follow_a_power_law() {
        let scale = 14;
        let a = rmat::<f64>(scale, 8, 3);
        revalidate(&a);
        let n = 1u64 << scale;
        assert_eq!(a.shape(), (n as usize, n as usize));
        // Duplicates merged: fewer than the edges, but most of them survive.
        assert!(a.nnz() <= 8 * n && a.nnz() > 6 * n, "nnz {}", a.nnz());
        let lengths = row_lengths(&a);
        let max = *lengths.iter().max().unwrap();
        let mean = a.nnz() as f64 / n as f64;
        assert!(max as f64 > 20.0 * mean, "max degree {max}, mean {mean}");
        // Many vertices have no out-edges at all, unlike a uniform graph of the same density.
        let empty = lengths.iter().filter(|&&l| l == 0).count();
        assert!(empty as u64 > n / 10, "{empty} empty rows");
        // Scrambling spreads the hubs: the longest row is not the first one.
        let in_first_rows: u64 = lengths[..lengths.len() / 8].iter().sum();
        assert!(in_first_rows < a.nnz() / 2);
        assert_eq!(rmat::<f64>(0, 3, 1).shape(), (1, 1));
        assert_eq!(rmat::<f64>(0, 3, 1).nnz(), 1);
        assert_eq!(rmat::<f64>(4, 0, 1).nnz(), 0);
    }

    #[test]
    fn uniform_rows_have_exactly_the_requested_count() {
        for (nrows, ncols, k) in [
            (100usize, 1000usize, 8usize),
            (50, 10, 7),
            (30, 10, 10),
            (5, 4, 9),
        ] {
            let a = uniform::<f64>(nrows, ncols, k, 4);
            revalidate(&a);
            assert_eq!(a.shape(), (nrows, ncols));
            assert!(row_lengths(&a).iter().all(|&l| l == k.min(ncols) as u64));
        }
        // Columns are spread over the whole range.
        let a = uniform::<f64>(2000, 100, 3, 4);
        let mut hit = [false; 100];
        a.col_indices().iter().for_each(|&j| hit[j as usize] = true);
        assert!(hit.iter().all(|&h| h));
        assert_eq!(uniform::<f64>(3, 0, 5, 0).nnz(), 0);
        assert_eq!(uniform::<f64>(0, 9, 5, 0).shape(), (0, 9));
    }

    #[test]
    fn road_is_a_symmetric_low_degree_grid() {
        let (w, h) = (60usize, 50usize);
        let a = road_grid::<f64>(w, h, 8);
        revalidate(&a);
        assert!(symmetric_pattern(&a));
        assert!((0..a.nrows()).all(|i| a.get(i, i).is_none()), "self loop");
        let mean = a.nnz() as f64 / (w * h) as f64;
        assert!((2.8..3.9).contains(&mean), "mean degree {mean}");
        let full_grid = 2 * (2 * w * h - w - h) as u64;
        let grid_edges = (0..a.nrows())
            .map(|u| {
                a.row(u)
                    .0
                    .iter()
                    .filter(|&&v| {
                        let d = u.abs_diff(v as usize);
                        d == w || (d == 1 && u / w == v as usize / w)
                    })
                    .count() as u64
            })
            .sum::<u64>();
        let kept = grid_edges as f64 / full_grid as f64;
        assert!((0.8..0.9).contains(&kept), "kept {kept} of the grid edges");
        let shortcuts = a.nnz() - grid_edges;
        assert!(
            shortcuts > 0 && shortcuts < a.nnz() / 20,
            "{shortcuts} shortcuts"
        );
        // Every neighbour is local.
        for u in 0..a.nrows() {
            for &v in a.row(u).0 {
                let (dx, dy) = (
                    (u % w).abs_diff(v as usize % w),
                    (u / w).abs_diff(v as usize / w),
                );
                assert!(dx <= 3 && dy <= 3);
            }
        }
        assert_eq!(road_grid::<f64>(0, 5, 0).shape(), (0, 0));
        assert_eq!(road_grid::<f64>(1, 1, 0).nnz(), 0);
        assert!(symmetric_pattern(&road_grid::<f64>(1, 40, 2)));
    }

    #[test]
    fn skewed_has_dense_rows_and_columns() {
        let n = 2000usize;
        let a = skewed::<f64>(n, 4, 3, 5, 21);
        revalidate(&a);
        let full = (0.9 * n as f64).round() as u64;
        let lengths = row_lengths(&a);
        let dense_rows = lengths.iter().filter(|&&l| l >= full).count();
        assert_eq!(dense_rows, 3);
        let col_counts = row_lengths(&a.transpose().unwrap());
        let dense_cols: Vec<usize> = (0..n)
            .filter(|&j| col_counts[j] > 8 * n as u64 / 10)
            .collect();
        assert_eq!(dense_cols.len(), 5);
        // Background rows: their 4 entries plus some of the 5 dense columns.
        let sparse: Vec<u64> = lengths.iter().copied().filter(|&l| l < full).collect();
        assert!(sparse.iter().all(|&l| (4..=9).contains(&l)));
        // Dense rows and columns are distinct indices.
        for &j in &dense_cols {
            assert!(lengths[j] < full);
        }
        // Clamping.
        let a = skewed::<f64>(10, 20, 8, 8, 1);
        revalidate(&a);
        assert_eq!(row_lengths(&a).iter().filter(|&&l| l == 10).count(), 10);
        assert_eq!(skewed::<f64>(0, 4, 1, 1, 0).shape(), (0, 0));
    }

    #[test]
    fn lp_columns_hold_the_requested_counts() {
        let a = lp_with_counts::<f64>(40, 3000, 4..=10, 6);
        revalidate(&a);
        assert_eq!(a.shape(), (40, 3000));
        let counts = row_lengths(&a.transpose().unwrap());
        assert!(counts.iter().all(|c| (4..=10).contains(c)));
        assert!(counts.contains(&4) && counts.contains(&10));
        let (hi, lo) = (10, 4);
        assert_eq!(
            lp_with_counts::<f64>(40, 300, hi..=lo, 6),
            lp_with_counts::<f64>(40, 300, lo..=hi, 6)
        );
        // More per column than there are rows: every column full.
        assert_eq!(lp_with_counts::<f64>(3, 10, 5..=8, 0).nnz(), 30);
        assert_eq!(lp_with_counts::<f64>(0, 10, 5..=8, 0).shape(), (0, 10));
    }

    #[test]
    fn dense_stores_everything() {
        let a = dense::<f32>(7, 5, 0);
        revalidate(&a);
        assert_eq!(a.nnz(), 35);
        assert_eq!(dense::<f32>(0, 5, 0).shape(), (0, 5));
        assert_eq!(dense::<f32>(5, 0, 0).nnz(), 0);
    }

    #[test]
    fn classes_round_trip_through_their_names() {
        for class in MatrixClass::ALL {
            assert_eq!(class.name().parse::<MatrixClass>().unwrap(), class);
            assert_eq!(class.to_string(), class.name());
        }
        assert_eq!("ROAD".parse::<MatrixClass>().unwrap(), MatrixClass::Road);
        let e = "cube".parse::<MatrixClass>().unwrap_err();
        assert!(e.to_string().contains("stencil3d"));
    }

    #[test]
    fn sampling_is_exact_in_both_regimes() {
        let mut rng = Rng::stream(1, 2, 3);
        for (n, k) in [
            (10usize, 0usize),
            (10, 3),
            (10, 5),
            (10, 6),
            (10, 9),
            (10, 10),
            (10, 20),
            (1, 1),
        ] {
            let mut out = vec![99];
            sample_distinct(&mut rng, n, k, &mut out);
            assert_eq!(out[0], 99);
            let s = &out[1..];
            assert_eq!(s.len(), k.min(n));
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            assert!(s.iter().all(|&j| (j as usize) < n));
        }
    }
}

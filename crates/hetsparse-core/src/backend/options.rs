//! Options of each operation: one value per operation, so that new settings can be added
//! without changing the trait again.
//!
//! A SpGEMM's options carry, beside the algorithm, what GraphBLAS-style graph algorithms
//! multiply with: a [`SemiringKind`], a [`Mask`] on C, and an [`AccumulateOp`] into C. The
//! defaults are plain arithmetic, no mask and no accumulator: `C = A · B` as every backend
//! computes it. Each backend lists in its [`Capabilities`](super::Capabilities) which of them it
//! runs ([`SpgemmFeatures`]); options it does not list are [`Error::Unsupported`], never
//! ignored.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::{BackendKind, MemorySpace, Operation, SpgemmAlgorithm};
use crate::error::{Error, Result};
use crate::format::{Csr, HostArray};
use crate::scalar::{Scalar, ScalarType};

/// The semiring a SpGEMM multiplies over: its "add" combines the products landing on one
/// entry of C, its "multiply" makes them. Kernels are written over the
/// [`Semiring`](crate::Semiring) trait; this names one for the options, with
/// SuiteSparse:GraphBLAS's meaning ([`crate::semiring`] has the table). It displays and parses
/// as python-graphblas spells it (`"min_plus"`; `"plus_one"` is `plus_pair`).
///
/// ```
/// use hetsparse_core::{ScalarType, SemiringKind};
/// let kind: SemiringKind = "min_plus".parse()?;
/// assert_eq!((kind, kind.to_string()), (SemiringKind::MinPlus, "min_plus".to_string()));
/// assert!(!kind.is_defined_for(ScalarType::C64));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SemiringKind {
    /// `plus_times`: `+` and `×`, ordinary arithmetic, the default.
    #[default]
    PlusTimes,
    /// `plus_pair` (`plus_one`): `+` of a 1 per product: counting common neighbours
    /// (triangles), whatever the values.
    PlusPair,
    /// `any_pair`: 1 wherever a product lands: reachability, structure only.
    AnyPair,
    /// `min_plus`: `min` and `+`, identity `+∞`: shortest paths.
    MinPlus,
    /// `max_plus`: `max` and `+`, identity `−∞`: longest or critical paths.
    MaxPlus,
    /// `min_first`: `min` of A's values over the products landing on an entry.
    MinFirst,
    /// `min_second`: `min` of B's values over the products landing on an entry.
    MinSecond,
    /// `plus_first`: `+` of A's values over the products landing on an entry.
    PlusFirst,
    /// `plus_second`: `+` of B's values over the products landing on an entry.
    PlusSecond,
    /// `any_secondi`: one inner index `k` (with `A(i,k)` and `B(k,j)` stored) per entry:
    /// parents in a breadth-first search.
    AnySecondI,
    /// `lor_land`: `or` and `and` over "stored and non-zero", as 1 or 0: reachability.
    LorLand,
    /// `max_times`: `max` and `×`, identity `−∞`: most reliable paths (values in `[0, 1]`).
    MaxTimes,
    /// `max_min`: `max` and `min`, identity `−∞`: widest (bottleneck) paths.
    MaxMin,
}

impl SemiringKind {
    /// Every semiring, the default first.
    pub const ALL: [SemiringKind; 13] = [
        SemiringKind::PlusTimes,
        SemiringKind::PlusPair,
        SemiringKind::AnyPair,
        SemiringKind::MinPlus,
        SemiringKind::MaxPlus,
        SemiringKind::MinFirst,
        SemiringKind::MinSecond,
        SemiringKind::PlusFirst,
        SemiringKind::PlusSecond,
        SemiringKind::AnySecondI,
        SemiringKind::LorLand,
        SemiringKind::MaxTimes,
        SemiringKind::MaxMin,
    ];

    /// Its name as python-graphblas spells it.
    pub fn name(self) -> &'static str {
        match self {
            SemiringKind::PlusTimes => "plus_times",
            SemiringKind::PlusPair => "plus_pair",
            SemiringKind::AnyPair => "any_pair",
            SemiringKind::MinPlus => "min_plus",
            SemiringKind::MaxPlus => "max_plus",
            SemiringKind::MinFirst => "min_first",
            SemiringKind::MinSecond => "min_second",
            SemiringKind::PlusFirst => "plus_first",
            SemiringKind::PlusSecond => "plus_second",
            SemiringKind::AnySecondI => "any_secondi",
            SemiringKind::LorLand => "lor_land",
            SemiringKind::MaxTimes => "max_times",
            SemiringKind::MaxMin => "max_min",
        }
    }
}

impl fmt::Display for SemiringKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SemiringKind {
    type Err = Error;
    /// A python-graphblas name (`"plus_one"` for `plus_pair` too); [`Error::InvalidArgument`]
    /// for any other.
    fn from_str(s: &str) -> Result<Self> {
        if s == "plus_one" {
            return Ok(SemiringKind::PlusPair);
        }
        SemiringKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("no semiring is named {s:?}")))
    }
}

/// What an entry of the mask matrix says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MaskKind {
    /// Every stored entry of the mask admits C's entry there, whatever its value.
    Structural,
    /// Only stored entries whose value is not zero admit C's entry.
    Valued,
}

/// Which entries of C a SpGEMM computes: those the mask admits (or, complemented, those it
/// does not). The mask holds the admitting positions of a matrix of C's shape, taken once when
/// it is made (a valued mask keeps its non-zero entries), so it is independent of the scalar
/// type and cheap to clone.
///
/// A vector product's mask (`1 × len`) can also be made from a bitmap of the admitted
/// positions ([`Mask::from_bitmap`]): a breadth-first search keeps its visited set so and
/// masks each level with it at the cost of a copy of the bitmap, where listing the visited
/// positions would cost a pass over all of them every level.
///
/// ```
/// use hetsparse_core::{Csr, Mask, MaskKind};
/// let m = Csr::try_new(2, 2, vec![0, 1, 2], vec![0, 1], vec![1.0, 0.0])?;
/// assert_eq!(Mask::structural(&m).entries(), 2);
/// let valued = Mask::valued(&m).complemented();
/// assert_eq!((valued.kind(), valued.entries(), valued.is_complemented()), (MaskKind::Valued, 1, true));
/// let visited = Mask::from_bitmap(70, vec![0b1010, 1 << 5], MaskKind::Structural)?;
/// assert_eq!((visited.entries(), visited.row(0)), (3, &[1, 3, 69][..]));
/// assert!(visited.complemented().admits(0, 2));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mask {
    pattern: Arc<MaskPattern>,
    kind: MaskKind,
    complement: bool,
    replace: bool,
}

/// The admitting positions of a mask: CSR structure without values, or for a vector mask
/// made from a bitmap or from bytes, those (listed the first time a caller asks for the
/// list).
struct MaskPattern {
    nrows: usize,
    ncols: usize,
    /// Admitting positions; counted on first use for a mask of bytes.
    entries: std::sync::OnceLock<u64>,
    /// Bit `j % 64` of word `j / 64` admits position `j` of row 0 (a `1 × ncols` mask only).
    bits: Option<Vec<u64>>,
    /// A non-zero byte `j` admits position `j` of row 0 (a `1 × ncols` mask only).
    bytes: Option<HostArray<u8>>,
    listed: std::sync::OnceLock<ListedPositions>,
    /// A hash of the listed positions, made the first time the mask is hashed: a product's
    /// identity mixes in its mask's (`PatternId::of_masked_product`) on every call, and
    /// hashing a graph's mask whole each time took longer than the product on a GPU.
    fingerprint: std::sync::OnceLock<u64>,
    /// Copies of the positions that backends made in their memory, one per memory space
    /// ([`Mask::kept_in`]).
    kept: Mutex<Vec<(MemorySpace, Arc<dyn Any + Send + Sync>)>>,
}

impl fmt::Debug for MaskPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept: Vec<MemorySpace> = self
            .kept
            .lock()
            .map(|k| k.iter().map(|(space, _)| space.clone()).collect())
            .unwrap_or_default();
        f.debug_struct("MaskPattern")
            .field("nrows", &self.nrows)
            .field("ncols", &self.ncols)
            .field("entries", &self.entries.get())
            .field("bitmap", &self.bits.is_some())
            .field("bytes", &self.bytes.is_some())
            .field("listed", &self.listed.get().is_some())
            .field("kept_in", &kept)
            .finish()
    }
}

/// Admitting positions as CSR row offsets and sorted columns.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ListedPositions {
    row_offsets: Vec<u64>,
    col_indices: Vec<u32>,
}

impl MaskPattern {
    fn entries(&self) -> u64 {
        *self.entries.get_or_init(|| {
            // Only a pattern of bytes is made without its count.
            let bytes = self.bytes.as_deref().unwrap_or(&[]);
            bytes.iter().filter(|&&b| b != 0).count() as u64
        })
    }

    fn listed(&self) -> &ListedPositions {
        self.listed.get_or_init(|| {
            // Only a bitmap or bytes pattern is made without its list.
            if let Some(bytes) = &self.bytes {
                let col_indices: Vec<u32> = (0..bytes.len() as u32)
                    .filter(|&j| bytes[j as usize] != 0)
                    .collect();
                return ListedPositions {
                    row_offsets: vec![0, col_indices.len() as u64],
                    col_indices,
                };
            }
            let bits = self.bits.as_deref().unwrap_or(&[]);
            let mut col_indices = Vec::with_capacity(self.entries() as usize);
            for (w, &word) in bits.iter().enumerate() {
                let mut rest = word;
                while rest != 0 {
                    col_indices.push((w * 64) as u32 + rest.trailing_zeros());
                    rest &= rest - 1;
                }
            }
            ListedPositions {
                row_offsets: vec![0, col_indices.len() as u64],
                col_indices,
            }
        })
    }
}

/// Two patterns are equal when they admit the same positions, however each holds them.
impl PartialEq for MaskPattern {
    fn eq(&self, other: &Self) -> bool {
        (self.nrows, self.ncols, self.entries()) == (other.nrows, other.ncols, other.entries())
            && match (&self.bits, &other.bits) {
                (Some(a), Some(b)) => a == b,
                _ => self.listed() == other.listed(),
            }
    }
}

impl Eq for MaskPattern {}

/// Equal patterns list the same positions, so they have the same fingerprint.
impl std::hash::Hash for MaskPattern {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let fingerprint = *self.fingerprint.get_or_init(|| {
            let listed = self.listed();
            super::resident::structure_hash(
                (self.nrows, self.ncols),
                &listed.row_offsets,
                &listed.col_indices,
            )
        });
        (self.nrows, self.ncols, self.entries(), fingerprint).hash(state);
    }
}

impl Mask {
    /// Every stored entry of `m` admits C's entry at its position.
    pub fn structural<U: Scalar>(m: &Csr<U>) -> Mask {
        // Every entry kept: the structure's arrays copied whole.
        Mask::listed(
            m.nrows(),
            m.ncols(),
            m.row_offsets().to_vec(),
            m.col_indices().to_vec(),
        )
    }

    /// Stored entries of `m` whose value is not zero admit C's entry at their position.
    pub fn valued<U: Scalar>(m: &Csr<U>) -> Mask {
        Mask::from_pattern(m, MaskKind::Valued, |v: &U| *v != U::zero())
    }

    /// A `1 × len` mask (for a vector product) admitting position `j` where bit `j % 64` of
    /// `bits[j / 64]` is set; `kind` says what the bits were taken from (structure or values).
    /// [`Error::InvalidArgument`] unless `bits` holds `len.div_ceil(64)` words with no bit set
    /// at or past `len`, or if `len` exceeds the column indices' `u32` range.
    pub fn from_bitmap(len: usize, bits: Vec<u64>, kind: MaskKind) -> Result<Mask> {
        if len > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "a bitmap mask of {len} positions: at most {} fit column indices",
                u32::MAX
            )));
        }
        if bits.len() != len.div_ceil(64) {
            return Err(Error::InvalidArgument(format!(
                "a bitmap mask of {len} positions needs {} words, it has {}",
                len.div_ceil(64),
                bits.len()
            )));
        }
        if len % 64 != 0 && bits.last().is_some_and(|&w| w >> (len % 64) != 0) {
            return Err(Error::InvalidArgument(format!(
                "a bitmap mask of {len} positions has bits set at or past position {len}"
            )));
        }
        let entries: u64 = bits.iter().map(|w| u64::from(w.count_ones())).sum();
        Ok(Mask {
            pattern: Arc::new(MaskPattern {
                nrows: 1,
                ncols: len,
                entries: entries.into(),
                bits: Some(bits),
                bytes: None,
                listed: std::sync::OnceLock::new(),
                fingerprint: std::sync::OnceLock::new(),
                kept: Mutex::new(Vec::new()),
            }),
            kind,
            complement: false,
            replace: false,
        })
    }

    /// A `1 × len` mask (for a vector product) admitting position `j` where `bytes[j]` is not
    /// zero: a dense boolean array (NumPy's, read in place), never packed, listed or counted
    /// unless a backend asks for that — a product that looks up a few positions reads a few
    /// bytes. `kind` says what the bytes were taken from. [`Error::InvalidArgument`] unless
    /// `bytes` holds `len` values and `len` fits the column indices' `u32` range.
    pub fn from_bytes(len: usize, bytes: HostArray<u8>, kind: MaskKind) -> Result<Mask> {
        if len > u32::MAX as usize || bytes.len() != len {
            return Err(Error::InvalidArgument(format!(
                "a mask of {len} positions from {} bytes: one byte a position, at most {} of them",
                bytes.len(),
                u32::MAX
            )));
        }
        Ok(Mask {
            pattern: Arc::new(MaskPattern {
                nrows: 1,
                ncols: len,
                entries: std::sync::OnceLock::new(),
                bits: None,
                bytes: Some(bytes),
                listed: std::sync::OnceLock::new(),
                fingerprint: std::sync::OnceLock::new(),
                kept: Mutex::new(Vec::new()),
            }),
            kind,
            complement: false,
            replace: false,
        })
    }

    fn listed(nrows: usize, ncols: usize, row_offsets: Vec<u64>, col_indices: Vec<u32>) -> Self {
        Mask {
            pattern: Arc::new(MaskPattern {
                nrows,
                ncols,
                entries: (col_indices.len() as u64).into(),
                bits: None,
                bytes: None,
                listed: ListedPositions {
                    row_offsets,
                    col_indices,
                }
                .into(),
                fingerprint: std::sync::OnceLock::new(),
                kept: Mutex::new(Vec::new()),
            }),
            kind: MaskKind::Structural,
            complement: false,
            replace: false,
        }
    }

    fn from_pattern<U: Scalar>(m: &Csr<U>, kind: MaskKind, admits: impl Fn(&U) -> bool) -> Mask {
        let mut row_offsets = Vec::with_capacity(m.nrows() + 1);
        let mut col_indices = Vec::new();
        row_offsets.push(0);
        for i in 0..m.nrows() {
            let (cols, vals) = m.row(i);
            col_indices.extend(
                cols.iter()
                    .zip(vals)
                    .filter(|(_, v)| admits(v))
                    .map(|(c, _)| *c),
            );
            row_offsets.push(col_indices.len() as u64);
        }
        Mask {
            kind,
            ..Mask::listed(m.nrows(), m.ncols(), row_offsets, col_indices)
        }
    }

    /// The part of this mask over rows `rows` and columns `cols` of C, for a chunk of the
    /// product (same kind, complement and replace); [`Error::InvalidArgument`] for ranges
    /// outside its shape.
    pub fn window(
        &self,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) -> Result<Mask> {
        let (nrows, ncols) = self.shape();
        if rows.start > rows.end || rows.end > nrows || cols.start > cols.end || cols.end > ncols {
            return Err(Error::InvalidArgument(format!(
                "a window of rows {rows:?} and columns {cols:?} of a {nrows}×{ncols} mask"
            )));
        }
        let (lo, hi) = (cols.start as u32, cols.end as u32);
        let mut row_offsets = Vec::with_capacity(rows.len() + 1);
        let mut col_indices = Vec::new();
        row_offsets.push(0);
        for i in rows.clone() {
            let r = self.row(i);
            let r = &r[r.partition_point(|&j| j < lo)..];
            let r = &r[..r.partition_point(|&j| j < hi)];
            col_indices.extend(r.iter().map(|&j| j - lo));
            row_offsets.push(col_indices.len() as u64);
        }
        Ok(Mask {
            pattern: Mask::listed(rows.len(), cols.len(), row_offsets, col_indices).pattern,
            ..self.clone()
        })
    }

    /// A vector's `1 × len` mask as the `len × 1` mask of the same positions (kind,
    /// complement and replace kept): the mask of `A · u` computed as A times `u` as a column
    /// ([`crate::SparseVector::to_column`]). [`Error::InvalidArgument`] for a mask of more
    /// than one row.
    pub fn to_column(&self) -> Result<Mask> {
        let (nrows, len) = self.shape();
        if nrows != 1 {
            return Err(Error::InvalidArgument(format!(
                "a {nrows}×{len} mask as a column: only a vector's one-row mask is"
            )));
        }
        let admitted = self.row(0);
        let row_offsets = crate::vector::column_offsets(admitted, len);
        Ok(Mask {
            kind: self.kind,
            complement: self.complement,
            replace: self.replace,
            ..Mask::listed(len, 1, row_offsets, vec![0; admitted.len()])
        })
    }

    /// This mask, admitting the positions it did not and refusing those it did.
    pub fn complemented(mut self) -> Mask {
        self.complement = !self.complement;
        self
    }

    /// This mask, with C's entries it refuses removed from an accumulated C rather than kept
    /// (GraphBLAS's "replace"; it matters only with an [`AccumulateOp`]).
    pub fn replacing(mut self) -> Mask {
        self.replace = true;
        self
    }

    /// Structural or valued.
    pub fn kind(&self) -> MaskKind {
        self.kind
    }

    /// Whether it admits the positions its matrix does not hold.
    pub fn is_complemented(&self) -> bool {
        self.complement
    }

    /// Whether refused entries of an accumulated C are removed.
    pub fn is_replacing(&self) -> bool {
        self.replace
    }

    /// The shape of the matrix it was made from (C's shape, for the product it masks).
    pub fn shape(&self) -> (usize, usize) {
        (self.pattern.nrows, self.pattern.ncols)
    }

    /// How many positions its matrix admits (before any complement).
    pub fn entries(&self) -> u64 {
        self.pattern.entries()
    }

    /// Whether the mask (with its complement) admits C's entry `(i, j)`; `i` must be below
    /// the mask's rows and `j` below its columns.
    #[inline]
    pub fn admits(&self, i: usize, j: u32) -> bool {
        let held = match (&self.pattern.bits, &self.pattern.bytes) {
            (Some(bits), _) => bits[j as usize / 64] >> (j % 64) & 1 == 1,
            (_, Some(bytes)) => bytes[j as usize] != 0,
            _ => self.row(i).binary_search(&j).is_ok(),
        };
        held != self.complement
    }

    /// The bitmap a vector mask was made from ([`Mask::from_bitmap`]; before any complement),
    /// `None` for a mask made from a matrix: a backend that can read it skips the list.
    pub fn bitmap(&self) -> Option<&[u64]> {
        self.pattern.bits.as_deref()
    }

    /// The bytes a vector mask was made from ([`Mask::from_bytes`]; before any complement),
    /// `None` for any other mask.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.pattern.bytes.as_deref()
    }

    /// The admitting positions (before any complement) as CSR row offsets, one more than its
    /// rows: what a device copies to apply the mask.
    pub fn row_offsets(&self) -> &[u64] {
        &self.pattern.listed().row_offsets
    }

    /// The admitting positions' columns (before any complement), row by row, sorted within
    /// each row (see [`Mask::row_offsets`]).
    pub fn col_indices(&self) -> &[u32] {
        &self.pattern.listed().col_indices
    }

    /// The admitted columns of row `i` (before any complement), sorted as its matrix's were.
    /// `i` must be below the mask's rows.
    #[inline]
    pub fn row(&self, i: usize) -> &[u32] {
        let p = self.pattern.listed();
        &p.col_indices[p.row_offsets[i] as usize..p.row_offsets[i + 1] as usize]
    }

    /// The copy of this mask's positions that a backend keeps in `space` (a device's memory),
    /// made by `make` the first time a product there reads the mask: a mask used again — a
    /// loop masking every product by one matrix, as triangle counting's and k-truss's
    /// `C⟨L⟩` do — is copied to a device once, not on every call. The copy is shared by the
    /// mask's clones (also those complemented or replacing: it holds positions, not modes)
    /// and freed with the last of them; a mask cut from this one ([`Mask::window`]) has
    /// positions of its own and copies of its own.
    ///
    /// `D` is the backend's own type for the copy, so that backends of different kinds on one
    /// device do not read each other's; a copy of another type in `space` is replaced.
    /// `make`'s error is returned and nothing is kept. Callers making copies at once wait
    /// for the first (one copy is made).
    ///
    /// The copy holds device memory outside any product's budget for as long as the mask
    /// lives: drop a mask you no longer use.
    ///
    /// ```
    /// use hetsparse_core::{BackendKind, Csr, Mask, MemorySpace};
    /// let m = Csr::try_new(2, 2, vec![0, 1, 2], vec![0, 1], vec![1.0, 1.0])?;
    /// let mask = Mask::structural(&m);
    /// let space = MemorySpace::Device { backend: BackendKind::Cuda, id: 0 };
    /// let made = mask.kept_in(space.clone(), |m| Ok(m.col_indices().to_vec()))?;
    /// // A clone, complemented, finds the same copy: `make` is not called again.
    /// let again = mask.clone().complemented().kept_in(space, |_| unreachable!())?;
    /// assert!(std::sync::Arc::ptr_eq(&made, &again));
    /// # Ok::<(), hetsparse_core::Error>(())
    /// ```
    pub fn kept_in<D: Any + Send + Sync>(
        &self,
        space: MemorySpace,
        make: impl FnOnce(&Mask) -> Result<D>,
    ) -> Result<Arc<D>> {
        // A poisoned lock only means a `make` panicked: what is kept is whole either way.
        let mut kept = self
            .pattern
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = kept.iter().position(|(s, _)| *s == space) {
            if let Ok(copy) = Arc::clone(&kept[at].1).downcast::<D>() {
                return Ok(copy);
            }
            kept.swap_remove(at);
        }
        let copy = Arc::new(make(self)?);
        kept.push((space, Arc::clone(&copy) as Arc<dyn Any + Send + Sync>));
        Ok(copy)
    }

    /// The memory spaces holding a copy of this mask's positions ([`Mask::kept_in`]).
    pub fn kept_spaces(&self) -> Vec<MemorySpace> {
        self.pattern
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(space, _)| space.clone())
            .collect()
    }
}

/// How a product is combined with the C it is accumulated into (`C ⊙= A · B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AccumulateOp {
    /// `c + p`.
    Plus,
    /// `c × p`.
    Times,
    /// `min(c, p)`.
    Min,
    /// `max(c, p)`.
    Max,
    /// `p`: the product's entry replaces C's.
    Second,
}

impl fmt::Display for AccumulateOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccumulateOp::Plus => "plus",
            AccumulateOp::Times => "times",
            AccumulateOp::Min => "min",
            AccumulateOp::Max => "max",
            AccumulateOp::Second => "second",
        })
    }
}

/// How to run a SpGEMM.
///
/// ```
/// use hetsparse_core::{Csr, Mask, SemiringKind, SpgemmAlgorithm, SpgemmOptions};
/// let options = SpgemmOptions::new().with_algorithm(SpgemmAlgorithm::RowRow);
/// assert_eq!(options.algorithm, SpgemmAlgorithm::RowRow);
/// assert_eq!(SpgemmOptions::from(SpgemmAlgorithm::Esc).algorithm, SpgemmAlgorithm::Esc);
/// // Shortest paths of two hops, only where no edge is yet.
/// let graph = Csr::<f64>::identity(4)?;
/// let options = SpgemmOptions::new()
///     .with_semiring(SemiringKind::MinPlus)
///     .with_mask(Mask::structural(&graph).complemented());
/// assert!(!options.is_plain());
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpgemmOptions {
    /// The algorithm; [`SpgemmAlgorithm::Auto`] lets the backend choose.
    pub algorithm: SpgemmAlgorithm,
    /// The semiring; [`SemiringKind::PlusTimes`] by default.
    pub semiring: SemiringKind,
    /// Which entries of C to compute; all of them by default.
    pub mask: Option<Mask>,
    /// How the product combines with an existing C; none by default (C is the product).
    pub accumulator: Option<AccumulateOp>,
}

impl Default for SpgemmOptions {
    fn default() -> Self {
        SpgemmOptions {
            algorithm: SpgemmAlgorithm::Auto,
            semiring: SemiringKind::PlusTimes,
            mask: None,
            accumulator: None,
        }
    }
}

impl SpgemmOptions {
    /// The defaults: the backend's choice of algorithm, plus-times, no mask, no accumulator.
    pub fn new() -> Self {
        Self::default()
    }
    /// These options with `algorithm`.
    pub fn with_algorithm(mut self, algorithm: SpgemmAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }
    /// These options with `semiring`.
    pub fn with_semiring(mut self, semiring: SemiringKind) -> Self {
        self.semiring = semiring;
        self
    }
    /// These options with `mask` on C.
    pub fn with_mask(mut self, mask: Mask) -> Self {
        self.mask = Some(mask);
        self
    }
    /// These options with `accumulator`.
    pub fn with_accumulator(mut self, accumulator: AccumulateOp) -> Self {
        self.accumulator = Some(accumulator);
        self
    }
    /// Whether these are plain `C = A · B`: plus-times, no mask, no accumulator (any
    /// algorithm). Every backend runs those.
    pub fn is_plain(&self) -> bool {
        self.semiring == SemiringKind::PlusTimes
            && self.mask.is_none()
            && self.accumulator.is_none()
    }
    /// The first of these options `features` lacks, in words (for [`Error::Unsupported`]).
    pub fn unsupported_by(&self, features: &SpgemmFeatures) -> Option<String> {
        if !features.semirings.contains(&self.semiring) {
            return Some(format!("the {} semiring", self.semiring));
        }
        if let Some(mask) = &self.mask {
            if !features.masks.contains(&mask.kind) {
                return Some(format!("a {:?} mask", mask.kind).to_lowercase());
            }
            if mask.complement && !features.complemented_masks {
                return Some("a complemented mask".into());
            }
            if mask.replace && !features.replacing_masks {
                return Some("a replacing mask".into());
            }
        }
        if let Some(acc) = self.accumulator {
            if !features.accumulators.contains(&acc) {
                return Some(format!("the {acc} accumulator"));
            }
        }
        None
    }
    /// [`Error::Unsupported`] (by `backend`, over `scalar`) unless these options are
    /// plus-times without a mask: what a backend whose plans recompute the unmasked plus-times
    /// product says to a plan of anything else, rather than computing it as plus-times.
    pub fn check_plain_plan(&self, backend: BackendKind, scalar: ScalarType) -> Result<()> {
        if self.semiring == SemiringKind::PlusTimes && self.mask.is_none() {
            return Ok(());
        }
        Err(Error::Unsupported {
            backend,
            op: Operation::Spgemm(self.algorithm),
            scalar,
            detail: Some("a plan of a product with a semiring or a mask".into()),
        })
    }
    /// [`Error::InvalidArgument`] unless the mask, if any, has C's shape `shape`.
    pub fn check_mask_shape(&self, shape: (usize, usize)) -> Result<()> {
        match &self.mask {
            Some(mask) if mask.shape() != shape => Err(Error::InvalidArgument(format!(
                "SpGEMM: a {}×{} mask for a {}×{} product",
                mask.shape().0,
                mask.shape().1,
                shape.0,
                shape.1
            ))),
            _ => Ok(()),
        }
    }
}

impl From<SpgemmAlgorithm> for SpgemmOptions {
    fn from(algorithm: SpgemmAlgorithm) -> Self {
        SpgemmOptions::new().with_algorithm(algorithm)
    }
}

/// Which SpGEMM options a backend runs for one scalar type, beside the algorithms its
/// [`Capabilities`](super::Capabilities) list: the default is plain plus-times alone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpgemmFeatures {
    /// The semirings it multiplies over.
    pub semirings: BTreeSet<SemiringKind>,
    /// The kinds of mask it applies.
    pub masks: BTreeSet<MaskKind>,
    /// Whether it applies complemented masks.
    pub complemented_masks: bool,
    /// Whether it applies replacing masks.
    pub replacing_masks: bool,
    /// The accumulators it combines with.
    pub accumulators: BTreeSet<AccumulateOp>,
}

impl Default for SpgemmFeatures {
    fn default() -> Self {
        SpgemmFeatures {
            semirings: BTreeSet::from([SemiringKind::PlusTimes]),
            masks: BTreeSet::new(),
            complemented_masks: false,
            replacing_masks: false,
            accumulators: BTreeSet::new(),
        }
    }
}

impl SpgemmFeatures {
    /// Plus-times alone: what every backend runs.
    pub fn plain() -> Self {
        Self::default()
    }

    /// Every semiring defined over `scalar` ([`SemiringKind::is_defined_for`]) and masks of
    /// every kind, complemented and replacing (with no C to merge into, a product's replace
    /// and merge are the same); no accumulator: the product is a new C, which
    /// [`crate::write_back`] merges.
    pub fn every_semiring_and_mask(scalar: ScalarType) -> Self {
        SpgemmFeatures {
            semirings: SemiringKind::defined_for(scalar).collect(),
            masks: [MaskKind::Structural, MaskKind::Valued].into(),
            complemented_masks: true,
            replacing_masks: true,
            accumulators: BTreeSet::new(),
        }
    }
}

/// How to run a SpMV. Nothing to choose yet: the backend picks its kernel per format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpmvOptions {}

impl SpmvOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
}

/// How to run a SpMM. Nothing to choose yet: the backend picks its kernel per format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpmmOptions {}

impl SpmmOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Which semiring matrix–vector product (GraphBLAS's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VectorProductKind {
    /// `w⟨m⟩ = A ⊕.⊗ u`: `w(i) = ⊕ₖ A(i,k) ⊗ u(k)`, `u` of A's columns, `w` of its rows.
    Mxv,
    /// `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A`: `w(j) = ⊕ₖ u(k) ⊗ A(k,j)`, `u` of A's rows, `w` of its columns
    /// (a breadth-first step: the frontier `u` pushed along A's edges).
    Vxm,
}

impl VectorProductKind {
    /// `mxv` or `vxm`.
    pub fn name(self) -> &'static str {
        match self {
            VectorProductKind::Mxv => "mxv",
            VectorProductKind::Vxm => "vxm",
        }
    }

    /// The lengths `(u, w)` of the input and result vectors for an `nrows × ncols` A.
    pub fn lengths(self, (nrows, ncols): (usize, usize)) -> (usize, usize) {
        match self {
            VectorProductKind::Mxv => (ncols, nrows),
            VectorProductKind::Vxm => (nrows, ncols),
        }
    }
}

impl fmt::Display for VectorProductKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to run a semiring matrix–vector product (mxv, vxm): the semiring, a mask on the result
/// `w` (made from a vector, [`crate::SparseVector::structural_mask`], or any `1 × len`
/// [`Mask`]), and the accumulator that merges the product into an existing `w`
/// ([`crate::vector::write_back_vector`]; backends compute the product and never look at it).
///
/// ```
/// use hetsparse_core::{SemiringKind, SparseVector, VectorProductOptions};
/// // A breadth-first step: only vertices not yet visited, keeping none of the old frontier.
/// let visited = SparseVector::try_new(4, vec![0], vec![1.0])?;
/// let options = VectorProductOptions::new()
///     .with_semiring(SemiringKind::AnySecondI)
///     .with_mask(visited.structural_mask().complemented().replacing());
/// assert!(options.check_mask_length(4).is_ok());
/// assert!(options.check_mask_length(5).is_err());
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct VectorProductOptions {
    /// The semiring; [`SemiringKind::PlusTimes`] by default.
    pub semiring: SemiringKind,
    /// Which positions of `w` to compute (a `1 × len` mask); all of them by default.
    pub mask: Option<Mask>,
    /// How the product combines with an existing `w`; none by default (`w` is the product).
    pub accumulator: Option<AccumulateOp>,
}

impl Default for VectorProductOptions {
    fn default() -> Self {
        VectorProductOptions {
            semiring: SemiringKind::PlusTimes,
            mask: None,
            accumulator: None,
        }
    }
}

impl VectorProductOptions {
    /// The defaults: plus-times, no mask, no accumulator.
    pub fn new() -> Self {
        Self::default()
    }
    /// These options with `semiring`.
    pub fn with_semiring(mut self, semiring: SemiringKind) -> Self {
        self.semiring = semiring;
        self
    }
    /// These options with `mask` on `w`.
    pub fn with_mask(mut self, mask: Mask) -> Self {
        self.mask = Some(mask);
        self
    }
    /// These options with `accumulator`.
    pub fn with_accumulator(mut self, accumulator: AccumulateOp) -> Self {
        self.accumulator = Some(accumulator);
        self
    }
    /// The same semiring, mask and accumulator as SpGEMM options: a vector product is the
    /// SpGEMM of a one-row (vxm) or one-column (mxv) matrix, and claims are SpGEMM's
    /// ([`SpgemmFeatures`]).
    pub fn as_spgemm(&self) -> SpgemmOptions {
        SpgemmOptions {
            algorithm: SpgemmAlgorithm::Auto,
            semiring: self.semiring,
            mask: self.mask.clone(),
            accumulator: self.accumulator,
        }
    }
    /// [`Error::InvalidArgument`] unless the mask, if any, is `1 × len` for a result of `len`
    /// positions.
    pub fn check_mask_length(&self, len: usize) -> Result<()> {
        match &self.mask {
            Some(mask) if mask.shape() != (1, len) => Err(Error::InvalidArgument(format!(
                "a {}×{} mask for a vector of {len} positions (it must be 1×{len})",
                mask.shape().0,
                mask.shape().1,
            ))),
            _ => Ok(()),
        }
    }
}

//! Matrices held in a backend's memory, behind opaque handles, and the operands that may be
//! either on the host or resident.
//!
//! A backend's [`upload`](super::Backend::upload) takes a host matrix into its memory and
//! returns a [`ResidentCsr`] (or [`ResidentDense`]); operations accept host or resident operands
//! ([`CsrOperand`], [`SparseOperand`], [`DenseOperand`], [`VectorOperand`], all `From` the
//! matrices and handles) and can leave their result resident; only
//! [`download`](super::Backend::download) brings it back. A handle names its [`MemorySpace`]:
//! backends on the same memory accept each other's handles, any other backend answers
//! [`Error::WrongDevice`](crate::Error::WrongDevice).

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use rayon::prelude::*;

use crate::format::{Csr, Dense, Layout, SparseRef};
use crate::scalar::Scalar;

/// The memory a resident matrix lives in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemorySpace {
    /// The host's memory, shared by every backend that computes there (reference, CPU).
    Host,
    /// One device's memory as one kind of backend holds it: backends of that kind on that
    /// device share handles.
    Device {
        /// The kind of backend.
        backend: crate::BackendKind,
        /// Which device, in the backend's own numbering.
        id: u64,
    },
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemorySpace::Host => f.write_str("host memory"),
            MemorySpace::Device { backend, id } => write!(f, "{backend} device {id}"),
        }
    }
}

/// The identity of a sparsity pattern: plans check their operands against it.
///
/// Uploaded matrices get a hash of their shape, offsets and column indices; a product's result
/// gets [`PatternId::of_product`] of its operands' identities, so a chain with new values keeps
/// its identities from one step to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PatternId(u64);

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(MIX)
}

fn hash_words(words: impl Iterator<Item = u64>, seed: u64) -> u64 {
    words.fold(seed, mix)
}

/// A hash of a CSR structure of `shape`: its offsets and column indices, hashed in parallel
/// pieces (a matrix's identity, and a mask's: [`PatternId::of`]).
pub(crate) fn structure_hash((nrows, ncols): (usize, usize), offsets: &[u64], cols: &[u32]) -> u64 {
    const PIECE: usize = 1 << 16;
    let offsets_hash: u64 = offsets
        .par_chunks(PIECE)
        .map(|p| hash_words(p.iter().copied(), 1))
        .collect::<Vec<u64>>()
        .into_iter()
        .fold(mix(nrows as u64, ncols as u64), mix);
    let cols_hash: u64 = cols
        .par_chunks(PIECE)
        .map(|p| hash_words(p.iter().map(|&c| u64::from(c)), 2))
        .collect::<Vec<u64>>()
        .into_iter()
        .fold(offsets_hash, mix);
    mix(cols_hash, cols.len() as u64)
}

impl PatternId {
    /// The pattern of a host matrix (a parallel pass over its offsets and column indices).
    pub fn of<T: Scalar>(m: &Csr<T>) -> PatternId {
        PatternId(structure_hash(
            (m.nrows(), m.ncols()),
            m.row_offsets(),
            m.col_indices(),
        ))
    }
    /// The pattern of `A·B` given those of `A` and `B`.
    pub fn of_product(a: PatternId, b: PatternId) -> PatternId {
        PatternId(mix(mix(0x5eed, a.0), b.0))
    }
    /// The pattern of `C⟨mask⟩ = A·B` given those of `A` and `B`: the product's, mixed with
    /// the mask's positions and complement (the semiring never changes a pattern). Masks of
    /// the same positions but another kind or replace flag give another identity, which only
    /// ever makes a plan refuse an operand it could have taken.
    pub fn of_masked_product(a: PatternId, b: PatternId, mask: &crate::Mask) -> PatternId {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same mask gives the same identity in one process.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        mask.hash(&mut h);
        PatternId(mix(mix(0x3a5c, Self::of_product(a, b).0), h.finish()))
    }
    /// The raw value, for logs.
    pub fn value(self) -> u64 {
        self.0
    }
}

type Storage = Arc<dyn Any + Send + Sync>;

/// The storage of a CSR matrix held in host memory. Private, so that no handle made with
/// [`ResidentCsr::from_storage`] passes for one: only the constructors that know the matrix's
/// pattern make it.
struct HostCsr<T>(Csr<T>);

/// A sparse matrix (CSR) held in a backend's memory.
///
/// Opaque to users: its shape, entry count, memory space and pattern identity are public, its
/// storage belongs to the backend that made it. Cloning shares the storage (the matrix is
/// immutable). Dropping the last clone frees the memory, ordered after any work that uses it.
pub struct ResidentCsr<T> {
    space: MemorySpace,
    nrows: usize,
    ncols: usize,
    nnz: u64,
    pattern: PatternId,
    storage: Storage,
    _scalar: PhantomData<fn() -> T>,
}

impl<T> Clone for ResidentCsr<T> {
    fn clone(&self) -> Self {
        ResidentCsr {
            space: self.space.clone(),
            nrows: self.nrows,
            ncols: self.ncols,
            nnz: self.nnz,
            pattern: self.pattern,
            storage: Arc::clone(&self.storage),
            _scalar: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ResidentCsr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResidentCsr")
            .field("space", &self.space)
            .field("shape", &(self.nrows, self.ncols))
            .field("nnz", &self.nnz)
            .field("pattern", &self.pattern)
            .finish_non_exhaustive()
    }
}

impl<T: Scalar> ResidentCsr<T> {
    /// For backends: a handle over `storage`, the backend's own representation of a
    /// `shape.0 × shape.1` matrix with `nnz` entries and pattern `pattern` in `space`. A
    /// backend accepts only storage of its own (private) types, so a handle made here with
    /// another's pattern is refused by the backends, never computed with.
    pub fn from_storage<S: Any + Send + Sync>(
        space: MemorySpace,
        shape: (usize, usize),
        nnz: u64,
        pattern: PatternId,
        storage: S,
    ) -> Self {
        ResidentCsr {
            space,
            nrows: shape.0,
            ncols: shape.1,
            nnz,
            pattern,
            storage: Arc::new(storage),
            _scalar: PhantomData,
        }
    }
    /// For backends that compute in host memory: `m` itself as the storage, not copied, with
    /// its pattern identity computed from it ([`PatternId::of`], a parallel pass over its
    /// structure), so a plan never meets a handle whose identity lies about its structure.
    pub fn from_host(space: MemorySpace, m: Csr<T>) -> Self {
        let pattern = PatternId::of(&m);
        // SAFETY: the pattern was just computed from `m`.
        unsafe { Self::from_host_with_pattern(space, m, pattern) }
    }
    /// [`from_host`](Self::from_host) with a pattern identity the caller already knows,
    /// skipping the pass over `m`: the result of a plan's execution, or a matrix with the
    /// structure of an existing handle and new values.
    ///
    /// # Safety
    /// `pattern` must be `m`'s: [`PatternId::of`] of it, or [`PatternId::of_product`] of the
    /// operands whose product `m`'s structure is. Plans check operands by their identity
    /// alone and their executions then index the operands by the planned structure, so a
    /// handle whose identity belongs to another structure makes them read and write out of
    /// place.
    pub unsafe fn from_host_with_pattern(
        space: MemorySpace,
        m: Csr<T>,
        pattern: PatternId,
    ) -> Self {
        let (shape, nnz) = (m.shape(), m.nnz());
        Self::from_storage(space, shape, nnz, pattern, HostCsr(m))
    }
    /// The memory it lives in.
    pub fn space(&self) -> &MemorySpace {
        &self.space
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
    /// Rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Stored entries.
    pub fn nnz(&self) -> u64 {
        self.nnz
    }
    /// The identity of its sparsity pattern.
    pub fn pattern(&self) -> PatternId {
        self.pattern
    }
    /// For backends: the storage, if it is of type `S`.
    pub fn storage<S: Any>(&self) -> Option<&S> {
        self.storage.downcast_ref::<S>()
    }
    /// The matrix itself when it is held in host memory (no copy).
    pub fn host(&self) -> Option<&Csr<T>> {
        self.storage::<HostCsr<T>>().map(|h| &h.0)
    }
    /// The matrix, moved out when it is held in host memory and this is the only handle;
    /// otherwise the handle back.
    pub fn into_host(self) -> Result<Csr<T>, Self> {
        if self.host().is_none() {
            return Err(self);
        }
        let ResidentCsr {
            space,
            nrows,
            ncols,
            nnz,
            pattern,
            storage,
            _scalar,
        } = self;
        let typed = storage
            .downcast::<HostCsr<T>>()
            .unwrap_or_else(|_| unreachable!("checked to be host storage above"));
        Arc::try_unwrap(typed)
            .map(|h| h.0)
            .map_err(|shared| ResidentCsr {
                space,
                nrows,
                ncols,
                nnz,
                pattern,
                storage: shared,
                _scalar,
            })
    }
}

/// A dense matrix (or a vector, one column) held in a backend's memory.
pub struct ResidentDense<T> {
    space: MemorySpace,
    nrows: usize,
    ncols: usize,
    layout: Layout,
    storage: Storage,
    _scalar: PhantomData<fn() -> T>,
}

impl<T> Clone for ResidentDense<T> {
    fn clone(&self) -> Self {
        ResidentDense {
            space: self.space.clone(),
            nrows: self.nrows,
            ncols: self.ncols,
            layout: self.layout,
            storage: Arc::clone(&self.storage),
            _scalar: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ResidentDense<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResidentDense")
            .field("space", &self.space)
            .field("shape", &(self.nrows, self.ncols))
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl<T: Scalar> ResidentDense<T> {
    /// For backends: a handle over `storage`, the backend's own representation of a dense
    /// `shape.0 × shape.1` matrix in `layout` in `space`.
    pub fn from_storage<S: Any + Send + Sync>(
        space: MemorySpace,
        shape: (usize, usize),
        layout: Layout,
        storage: S,
    ) -> Self {
        ResidentDense {
            space,
            nrows: shape.0,
            ncols: shape.1,
            layout,
            storage: Arc::new(storage),
            _scalar: PhantomData,
        }
    }
    /// For backends that compute in host memory: `d` itself as the storage.
    pub fn from_host(space: MemorySpace, d: Dense<T>) -> Self {
        let (shape, layout) = (d.shape(), d.layout());
        Self::from_storage(space, shape, layout, d)
    }
    /// The memory it lives in.
    pub fn space(&self) -> &MemorySpace {
        &self.space
    }
    /// `(rows, columns)`; a vector has one column.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
    /// Rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Row- or column-major.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// For backends: the storage, if it is of type `S`.
    pub fn storage<S: Any>(&self) -> Option<&S> {
        self.storage.downcast_ref::<S>()
    }
    /// The matrix itself when it is held in host memory (no copy).
    pub fn host(&self) -> Option<&Dense<T>> {
        self.storage::<Dense<T>>()
    }
}

/// A SpGEMM operand: a host CSR matrix or a resident one.
#[derive(Debug)]
pub enum CsrOperand<'a, T> {
    /// In host memory.
    Host(&'a Csr<T>),
    /// In a backend's memory.
    Resident(&'a ResidentCsr<T>),
}

/// The sparse operand of SpMV and SpMM: a host matrix of any format or a resident CSR one.
#[derive(Debug)]
pub enum SparseOperand<'a, T> {
    /// In host memory, any format.
    Host(SparseRef<'a, T>),
    /// In a backend's memory.
    Resident(&'a ResidentCsr<T>),
}

/// The dense operand of SpMM.
#[derive(Debug)]
pub enum DenseOperand<'a, T> {
    /// In host memory.
    Host(&'a Dense<T>),
    /// In a backend's memory.
    Resident(&'a ResidentDense<T>),
}

/// The vector of SpMV: a host slice or a resident one-column dense matrix.
#[derive(Debug)]
pub enum VectorOperand<'a, T> {
    /// In host memory.
    Host(&'a [T]),
    /// In a backend's memory (one column).
    Resident(&'a ResidentDense<T>),
}

macro_rules! copy_operand {
    ($($ty:ident),*) => {$(
        impl<T: Copy> Clone for $ty<'_, T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T: Copy> Copy for $ty<'_, T> {}
    )*};
}
copy_operand!(CsrOperand, SparseOperand, DenseOperand, VectorOperand);

impl<'a, T> From<&'a Csr<T>> for CsrOperand<'a, T> {
    fn from(m: &'a Csr<T>) -> Self {
        CsrOperand::Host(m)
    }
}
impl<'a, T> From<&'a ResidentCsr<T>> for CsrOperand<'a, T> {
    fn from(m: &'a ResidentCsr<T>) -> Self {
        CsrOperand::Resident(m)
    }
}
impl<'a, T> From<SparseRef<'a, T>> for SparseOperand<'a, T> {
    fn from(m: SparseRef<'a, T>) -> Self {
        SparseOperand::Host(m)
    }
}
impl<'a, T> From<&'a Csr<T>> for SparseOperand<'a, T> {
    fn from(m: &'a Csr<T>) -> Self {
        SparseOperand::Host(SparseRef::Csr(m))
    }
}
impl<'a, T> From<&'a ResidentCsr<T>> for SparseOperand<'a, T> {
    fn from(m: &'a ResidentCsr<T>) -> Self {
        SparseOperand::Resident(m)
    }
}
impl<'a, T> From<CsrOperand<'a, T>> for SparseOperand<'a, T> {
    fn from(m: CsrOperand<'a, T>) -> Self {
        match m {
            CsrOperand::Host(m) => SparseOperand::Host(SparseRef::Csr(m)),
            CsrOperand::Resident(m) => SparseOperand::Resident(m),
        }
    }
}
impl<'a, T> From<&'a Dense<T>> for DenseOperand<'a, T> {
    fn from(m: &'a Dense<T>) -> Self {
        DenseOperand::Host(m)
    }
}
impl<'a, T> From<&'a ResidentDense<T>> for DenseOperand<'a, T> {
    fn from(m: &'a ResidentDense<T>) -> Self {
        DenseOperand::Resident(m)
    }
}
impl<'a, T> From<&'a [T]> for VectorOperand<'a, T> {
    fn from(x: &'a [T]) -> Self {
        VectorOperand::Host(x)
    }
}
impl<'a, T> From<&'a Vec<T>> for VectorOperand<'a, T> {
    fn from(x: &'a Vec<T>) -> Self {
        VectorOperand::Host(x)
    }
}
impl<'a, T> From<&'a ResidentDense<T>> for VectorOperand<'a, T> {
    fn from(x: &'a ResidentDense<T>) -> Self {
        VectorOperand::Resident(x)
    }
}

impl<T: Scalar> CsrOperand<'_, T> {
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            CsrOperand::Host(m) => m.shape(),
            CsrOperand::Resident(m) => m.shape(),
        }
    }
    /// Stored entries.
    pub fn nnz(&self) -> u64 {
        match self {
            CsrOperand::Host(m) => m.nnz(),
            CsrOperand::Resident(m) => m.nnz(),
        }
    }
    /// The identity of its pattern (hashed for a host matrix: a pass over its indices).
    pub fn pattern(&self) -> PatternId {
        match self {
            CsrOperand::Host(m) => PatternId::of(m),
            CsrOperand::Resident(m) => m.pattern(),
        }
    }
}

impl<T: Scalar> SparseOperand<'_, T> {
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            SparseOperand::Host(m) => m.shape(),
            SparseOperand::Resident(m) => m.shape(),
        }
    }
}

impl<T: Scalar> DenseOperand<'_, T> {
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            DenseOperand::Host(m) => m.shape(),
            DenseOperand::Resident(m) => m.shape(),
        }
    }
}

impl<T: Scalar> VectorOperand<'_, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            VectorOperand::Host(x) => x.len(),
            VectorOperand::Resident(x) => x.nrows(),
        }
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mask, MaskKind};

    fn masked(mask: &Mask) -> PatternId {
        let (a, b) = (PatternId(1), PatternId(2));
        PatternId::of_masked_product(a, b, mask)
    }

    #[test]
    fn masks_of_the_same_positions_give_a_product_one_identity() {
        let m = Csr::try_new(1, 70, vec![0, 3], vec![1, 3, 69], vec![1.0, 2.0, 3.0]).unwrap();
        let listed = Mask::structural(&m);
        // Hashed once and kept: a clone shares it, an equal mask made apart computes the same.
        assert_eq!(masked(&listed), masked(&listed.clone()));
        assert_eq!(masked(&listed), masked(&Mask::structural(&m)));
        let bits = Mask::from_bitmap(70, vec![0b1010, 1 << 5], MaskKind::Structural).unwrap();
        assert_eq!(bits, listed);
        assert_eq!(masked(&bits), masked(&listed));
        // Another position, another kind or a complement: another identity.
        let other = Csr::try_new(1, 70, vec![0, 3], vec![1, 3, 68], vec![1.0; 3]).unwrap();
        assert_ne!(masked(&Mask::structural(&other)), masked(&listed));
        assert_ne!(masked(&listed.clone().complemented()), masked(&listed));
        assert_ne!(masked(&Mask::valued(&m)), masked(&listed));
        // The matrix's own identity is unchanged by the shared hash.
        assert_eq!(
            PatternId::of(&m).0,
            structure_hash((1, 70), m.row_offsets(), m.col_indices())
        );
    }
}

//! The arrays of a matrix in host memory: owned by hetsparse, or borrowed from someone else.

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

/// An immutable array of `T` in host memory that is cheap to clone: either a vector hetsparse
/// owns (reference-counted, so clones share it) or memory that someone else owns, kept alive
/// by an owner object held alongside it (a NumPy array, a memory map, a buffer of another
/// library).
///
/// Reading it is reading a slice ([`Deref`] to `[T]`). Writing goes through
/// [`make_mut`](HostArray::make_mut), which copies first unless the array is an owned vector
/// that no clone shares (copy on write), so foreign memory is never written.
///
/// ```
/// use hetsparse_core::format::HostArray;
/// let a = HostArray::from(vec![1u32, 2, 3]);
/// let mut b = a.clone(); // shares a's vector
/// b.make_mut()[0] = 7; // copies it first: a is shared
/// assert_eq!((&a[..], &b[..]), (&[1, 2, 3][..], &[7, 2, 3][..]));
/// ```
pub struct HostArray<T> {
    storage: Storage<T>,
}

enum Storage<T> {
    /// A vector of ours, shared by clones.
    Owned(Arc<Vec<T>>),
    /// `len` values at `ptr` that `owner` keeps valid and unchanged.
    Foreign {
        ptr: NonNull<T>,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    },
}

// SAFETY: a `HostArray` hands out only shared references to its values (`&[T]`), and clones
// of it on other threads read the same values: sending or sharing it is sending or sharing
// `&T` (T: Sync) and, for the last holder of an owned vector, dropping `T`s (T: Send). The
// foreign owner is `Send + Sync` by its type, and `from_foreign`'s contract makes the memory
// behind `ptr` valid and unwritten, from any thread, while the owner lives.
unsafe impl<T: Send + Sync> Send for HostArray<T> {}
// SAFETY: as for `Send`: `&HostArray` gives only `&[T]` and clones.
unsafe impl<T: Send + Sync> Sync for HostArray<T> {}

impl<T> HostArray<T> {
    /// An array over memory that `owner` owns: `len` values of `T` at `ptr`, read in place.
    /// Nothing is copied; clones share `owner`, and it is dropped (on whichever thread drops the
    /// last clone) when the last array made from it is.
    ///
    /// # Safety
    /// The caller promises that, from this call until `owner` is dropped:
    /// - `ptr` is non-null and aligned for `T`, and the `len` values of `T` from it are
    ///   initialised and valid (the rules of [`std::slice::from_raw_parts`]: the whole span is
    ///   at most `isize::MAX` bytes); with `len == 0` it may be null or dangling;
    /// - that memory stays allocated and is not written, by anyone (this thread, another
    ///   thread, another process sharing it), nor freed: hetsparse reads it without copying,
    ///   and what it checked once (a matrix's invariants) must stay true.
    pub unsafe fn from_foreign<O: Send + Sync + 'static>(
        ptr: *const T,
        len: usize,
        owner: O,
    ) -> Self {
        let ptr = NonNull::new(ptr.cast_mut()).unwrap_or(NonNull::dangling());
        HostArray {
            storage: Storage::Foreign {
                ptr,
                len,
                owner: Arc::new(owner),
            },
        }
    }

    /// The values.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match &self.storage {
            Storage::Owned(v) => v,
            // SAFETY: `from_foreign`'s caller promised `len` valid, unwritten values at `ptr`
            // for as long as `owner` lives, which is at least as long as `self`.
            Storage::Foreign { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }

    /// Whether the memory is someone else's ([`HostArray::from_foreign`]) rather than a vector
    /// of hetsparse's.
    pub fn is_foreign(&self) -> bool {
        matches!(self.storage, Storage::Foreign { .. })
    }

    /// Whether another array (a clone) shares this one's vector or foreign memory.
    pub fn is_shared(&self) -> bool {
        match &self.storage {
            Storage::Owned(v) => Arc::strong_count(v) > 1,
            Storage::Foreign { owner, .. } => Arc::strong_count(owner) > 1,
        }
    }
}

impl<T: Clone> HostArray<T> {
    /// The values, writable: copied first into a vector of this array's own unless they
    /// already are one that no clone shares (copy on write; foreign memory is never written).
    pub fn make_mut(&mut self) -> &mut [T] {
        if let Storage::Foreign { .. } = self.storage {
            self.storage = Storage::Owned(Arc::new(self.as_slice().to_vec()));
        }
        match &mut self.storage {
            Storage::Owned(v) => Arc::make_mut(v).as_mut_slice(),
            Storage::Foreign { .. } => unreachable!("foreign memory was replaced by a copy"),
        }
    }

    /// The values as a vector: the owned one itself when no clone shares it, else a copy.
    pub fn into_vec(self) -> Vec<T> {
        match self.storage {
            Storage::Owned(v) => Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()),
            Storage::Foreign { .. } => self.as_slice().to_vec(),
        }
    }
}

impl<T> From<Vec<T>> for HostArray<T> {
    fn from(values: Vec<T>) -> Self {
        HostArray {
            storage: Storage::Owned(Arc::new(values)),
        }
    }
}

impl<T> Default for HostArray<T> {
    fn default() -> Self {
        HostArray::from(Vec::new())
    }
}

impl<T> Clone for HostArray<T> {
    /// Another handle on the same values (no copy).
    fn clone(&self) -> Self {
        HostArray {
            storage: match &self.storage {
                Storage::Owned(v) => Storage::Owned(Arc::clone(v)),
                Storage::Foreign { ptr, len, owner } => Storage::Foreign {
                    ptr: *ptr,
                    len: *len,
                    owner: Arc::clone(owner),
                },
            },
        }
    }
}

impl<T> Deref for HostArray<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> AsRef<[T]> for HostArray<T> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for HostArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

/// Arrays are equal when their values are, wherever they are stored.
impl<T: PartialEq> PartialEq for HostArray<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Eq> Eq for HostArray<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Foreign memory for the tests: a boxed slice that counts its drops.
    struct Owner {
        values: Box<[u32]>,
        drops: Arc<AtomicUsize>,
    }
    impl Drop for Owner {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn foreign(values: &[u32]) -> (HostArray<u32>, *const u32, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let owner = Owner {
            values: values.into(),
            drops: Arc::clone(&drops),
        };
        let (ptr, len) = (owner.values.as_ptr(), owner.values.len());
        // SAFETY: the boxed slice lives, unwritten, as long as the owner.
        let array = unsafe { HostArray::from_foreign(ptr, len, owner) };
        (array, ptr, drops)
    }

    #[test]
    fn foreign_memory_is_read_in_place_and_its_owner_dropped_with_the_last_clone() {
        let (a, ptr, drops) = foreign(&[4, 5, 6]);
        assert!(a.is_foreign() && !a.is_shared());
        assert_eq!(&a[..], &[4, 5, 6]);
        assert_eq!(a.as_ptr(), ptr);
        let b = a.clone();
        assert!(a.is_shared() && b.is_foreign());
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(a, HostArray::from(vec![4, 5, 6]));
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert!(!b.is_shared());
        // Dropped on another thread: the owner goes with it.
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn writing_foreign_memory_copies_it_first() {
        let (a, ptr, drops) = foreign(&[1, 2]);
        let mut b = a.clone();
        b.make_mut()[1] = 9;
        assert!(!b.is_foreign());
        assert_ne!(b.as_ptr(), ptr);
        assert_eq!((&a[..], &b[..]), (&[1, 2][..], &[1, 9][..]));
        // The copy holds no reference to the owner.
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert_eq!(&b[..], &[1, 9]);
    }

    #[test]
    fn owned_vectors_are_shared_by_clones_and_copied_only_when_shared() {
        let v = vec![1u64, 2, 3];
        let vptr = v.as_ptr();
        let mut a = HostArray::from(v);
        // Not shared: written and given back in place.
        a.make_mut()[0] = 10;
        assert_eq!(a.as_ptr(), vptr);
        let b = a.clone();
        assert_eq!(b.as_ptr(), vptr);
        // Shared: the vector given back is a copy, the other clone keeps the original.
        let copy = a.into_vec();
        assert_ne!(copy.as_ptr(), vptr);
        assert_eq!(copy, vec![10, 2, 3]);
        let back = b.into_vec();
        assert_eq!(back.as_ptr(), vptr);
    }

    #[test]
    fn foreign_memory_is_copied_into_a_vector() {
        let (a, ptr, drops) = foreign(&[7, 8]);
        let v = a.into_vec();
        assert_eq!(v, vec![7, 8]);
        assert_ne!(v.as_ptr(), ptr);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn empty_foreign_memory_may_be_a_null_pointer() {
        // SAFETY: no values are read.
        let a = unsafe { HostArray::<f64>::from_foreign(std::ptr::null(), 0, ()) };
        assert!(a.is_empty());
        assert_eq!(a, HostArray::default());
    }
}

//! Semirings: the add, multiply and zero that kernels are written over.
//!
//! Plus-times is what every operation uses today; the kernels take a semiring so that min-plus,
//! boolean and other GraphBLAS-style semirings can be added without rewriting them.

use crate::scalar::{Accumulator, Scalar};

/// Add, multiply and the additive identity over a scalar type `T`, accumulating in `T::Acc`.
pub trait Semiring<T: Scalar>: Copy + Send + Sync + 'static {
    /// The additive identity.
    fn zero() -> T::Acc;
    /// Adds two partial results.
    fn add(a: T::Acc, b: T::Acc) -> T::Acc;
    /// Multiplies two stored values.
    fn mul(a: T, b: T) -> T::Acc;
    /// `acc + a * b`, the inner step of every kernel.
    #[inline(always)]
    fn fma(acc: T::Acc, a: T, b: T) -> T::Acc {
        Self::add(acc, Self::mul(a, b))
    }
}

/// Ordinary arithmetic: `+`, `×`, zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlusTimes;

impl<T: Scalar> Semiring<T> for PlusTimes {
    #[inline(always)]
    fn zero() -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn add(a: T::Acc, b: T::Acc) -> T::Acc {
        a + b
    }
    #[inline(always)]
    fn mul(a: T, b: T) -> T::Acc {
        a.to_acc() * b.to_acc()
    }
}

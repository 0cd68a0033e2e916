//! Semirings: the add, multiply and zero that kernels are written over.
//!
//! Every built-in semiring of [`SemiringKind`] is a type here implementing [`Semiring`], with
//! SuiteSparse:GraphBLAS's semantics over the real float types (f16 and bf16 through their f32
//! accumulator) and, for the semirings that need only `+` and `1`, over the complex types too
//! ([`SemiringKind::is_defined_for`]):
//!
//! | kind | add (identity) | multiply `a ⊗ b` (A's entry `a = A(i,k)`, B's `b = B(k,j)`) |
//! |---|---|---|
//! | `plus_times` | `+` (0) | `a × b` |
//! | `plus_pair` | `+` (0) | `1` |
//! | `plus_first` / `plus_second` | `+` (0) | `a` / `b` |
//! | `any_pair` | any (—) | `1` |
//! | `any_secondi` | any (—) | `k`, the inner index |
//! | `min_plus` / `max_plus` | `min` (+∞) / `max` (−∞) | `a + b` |
//! | `min_first` / `min_second` | `min` (+∞) | `a` / `b` |
//! | `max_times` | `max` (−∞) | `a × b` |
//! | `max_min` | `max` (−∞) | `min(a, b)` |
//! | `lor_land` | `or` (0) | `and`, of "is not zero", giving 0 or 1 |
//!
//! The pattern of a product never depends on the semiring: C holds an entry wherever a product
//! lands, also where its value is the additive identity. "any" keeps one of the products
//! landing on an entry: these kernels keep the last in their order (deterministic for one
//! kernel, but two kernels may pick different ones; each is a valid result). `min` and `max`
//! ignore NaN as GraphBLAS's do. `any_secondi` gives the index as a value: exact up to 2^24 in
//! f32, 2^31 in i32 and everywhere in f64, i64, u32 and u64, so it is defined for those (not
//! for f16, bf16 and bool).
//!
//! Over the integer types, `+` and `×` wrap on overflow and the bounds `MAX` and `MIN` stand
//! for `+∞` and `−∞`. Over `bool`, `+` is `or`, `×` is `and`, `min` is `and` and `max` is
//! `or` ([`Boolean`]): `plus_times` over `bool` is `lor_land`, `min_plus` is `land_lor`, as
//! GraphBLAS renames them.
//!
//! Code generic over the scalar type reaches the semiring a [`SemiringKind`] names through
//! [`with_semiring`] and a [`SemiringVisitor`].

use crate::backend::SemiringKind;
use crate::error::{Error, Result};
use crate::scalar::{Accumulator, Boolean, Scalar, ScalarType};
use std::num::Wrapping;

/// Add, multiply and the additive identity over a scalar type `T`, accumulating in `T::Acc`.
pub trait Semiring<T: Scalar>: Copy + Send + Sync + 'static {
    /// The additive identity.
    fn zero() -> T::Acc;
    /// Adds two partial results.
    fn add(a: T::Acc, b: T::Acc) -> T::Acc;
    /// Multiplies two stored values (a semiring whose product needs the inner index gives its
    /// product at index 0 here: kernels of products call [`Semiring::mul_at`]).
    fn mul(a: T, b: T) -> T::Acc;
    /// Multiplies `a = A(i, k)` by `b = B(k, j)` knowing the inner index `k`; the same as
    /// [`Semiring::mul`] for every semiring but those whose product is an index.
    #[inline(always)]
    fn mul_at(a: T, b: T, k: u32) -> T::Acc {
        let _ = k;
        Self::mul(a, b)
    }
    /// `acc + a * b`, the inner step of every kernel.
    #[inline(always)]
    fn fma(acc: T::Acc, a: T, b: T) -> T::Acc {
        Self::add(acc, Self::mul(a, b))
    }
    /// `acc + a * b` knowing the inner index `k` (see [`Semiring::mul_at`]).
    #[inline(always)]
    fn fma_at(acc: T::Acc, a: T, b: T, k: u32) -> T::Acc {
        Self::add(acc, Self::mul_at(a, b, k))
    }
}

/// An accumulator with an order and infinities: the real ones (`f32`, `f64`), which the
/// `min`/`max` semirings and `any_secondi` need.
pub trait OrderedAccumulator: Accumulator + PartialOrd {
    /// `+∞`, the identity of `min`.
    const INFINITY: Self;
    /// `−∞`, the identity of `max`.
    const NEG_INFINITY: Self;
    /// The smaller of two values; NaN loses to a number.
    fn min_of(self, other: Self) -> Self;
    /// The larger of two values; NaN loses to a number.
    fn max_of(self, other: Self) -> Self;
    /// An inner index as a value (rounded where the type cannot hold it exactly).
    fn from_index(k: u32) -> Self;
}

/// `OrderedAccumulator` for `$t` with `+∞` and `−∞` as `$inf` and `$neg_inf` and the index
/// `k` as `$index`. `min`/`max` are the type's own: over floats `f32::min`, which ignores NaN;
/// over `Wrapping` integers `Ord::min`.
macro_rules! ordered_accumulator {
    ($($t:ty: $inf:expr, $neg_inf:expr, |$k:ident| $index:expr;)*) => {$(
        impl OrderedAccumulator for $t {
            const INFINITY: Self = $inf;
            const NEG_INFINITY: Self = $neg_inf;
            #[inline(always)]
            fn min_of(self, other: Self) -> Self {
                self.min(other)
            }
            #[inline(always)]
            fn max_of(self, other: Self) -> Self {
                self.max(other)
            }
            #[inline(always)]
            fn from_index($k: u32) -> Self {
                $index
            }
        }
    )*};
}

// The integers' bounds stand in for the infinities (GraphBLAS's identities of `min` and `max`
// over integers).
ordered_accumulator! {
    f32: f32::INFINITY, f32::NEG_INFINITY, |k| k as f32;
    f64: f64::INFINITY, f64::NEG_INFINITY, |k| f64::from(k);
    Wrapping<i32>: Wrapping(i32::MAX), Wrapping(i32::MIN), |k| Wrapping(k as i32);
    Wrapping<i64>: Wrapping(i64::MAX), Wrapping(i64::MIN), |k| Wrapping(i64::from(k));
    Wrapping<u32>: Wrapping(u32::MAX), Wrapping(u32::MIN), |k| Wrapping(k);
    Wrapping<u64>: Wrapping(u64::MAX), Wrapping(u64::MIN), |k| Wrapping(u64::from(k));
}

/// `false < true`: `min` is `and`, `max` is `or`, as GraphBLAS renames them over `bool`.
impl OrderedAccumulator for Boolean {
    const INFINITY: Self = Boolean(true);
    const NEG_INFINITY: Self = Boolean(false);
    #[inline(always)]
    fn min_of(self, other: Self) -> Self {
        Boolean(self.0 & other.0)
    }
    #[inline(always)]
    fn max_of(self, other: Self) -> Self {
        Boolean(self.0 | other.0)
    }
    /// Never called: `any_secondi` is not defined over `bool`.
    #[inline(always)]
    fn from_index(k: u32) -> Self {
        Boolean(k != 0)
    }
}

/// Defines a unit struct per semiring, with its documentation.
macro_rules! semiring_types {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name;
        )*
    };
}

semiring_types! {
    /// `plus_times`: ordinary arithmetic, `+`, `×`, zero.
    PlusTimes;
    /// `plus_pair` (`plus_one`): `+` of a 1 per product: how many products land on each entry
    /// (common neighbours, triangles).
    PlusPair;
    /// `plus_first`: `+` of A's values, one per product.
    PlusFirst;
    /// `plus_second`: `+` of B's values, one per product.
    PlusSecond;
    /// `any_pair`: 1 wherever a product lands (reachability, structure only).
    AnyPair;
    /// `any_secondi`: one inner index `k` of the products landing on each entry (parents in a
    /// breadth-first search).
    AnySecondI;
    /// `min_plus`: shortest paths (`min`, `+`, identity `+∞`).
    MinPlus;
    /// `max_plus`: longest or critical paths (`max`, `+`, identity `−∞`).
    MaxPlus;
    /// `min_first`: the least of A's values over the products (`min`, identity `+∞`).
    MinFirst;
    /// `min_second`: the least of B's values over the products (`min`, identity `+∞`).
    MinSecond;
    /// `max_times`: most reliable paths (`max`, `×`, identity `−∞`).
    MaxTimes;
    /// `max_min`: widest (bottleneck) paths (`max`, `min`, identity `−∞`).
    MaxMin;
    /// `lor_land`: `or` of `and` over "is not zero", as 1 or 0 (identity 0).
    LorLand;
}

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

/// A semiring whose add is `+` (identity 0) over any scalar type, with `$mul(a, b)`.
macro_rules! plus_semiring {
    ($name:ident, |$a:ident, $b:ident| $mul:expr) => {
        impl<T: Scalar> Semiring<T> for $name {
            #[inline(always)]
            fn zero() -> T::Acc {
                T::Acc::ZERO
            }
            #[inline(always)]
            fn add(a: T::Acc, b: T::Acc) -> T::Acc {
                a + b
            }
            #[inline(always)]
            fn mul($a: T, $b: T) -> T::Acc {
                $mul
            }
        }
    };
}

plus_semiring!(PlusPair, |_a, _b| T::Acc::ONE);
plus_semiring!(PlusFirst, |a, _b| a.to_acc());
plus_semiring!(PlusSecond, |_a, b| b.to_acc());

impl<T: Scalar> Semiring<T> for AnyPair {
    /// Never seen in a result: "any" of one product is that product.
    #[inline(always)]
    fn zero() -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn add(_a: T::Acc, b: T::Acc) -> T::Acc {
        b
    }
    #[inline(always)]
    fn mul(_a: T, _b: T) -> T::Acc {
        T::Acc::ONE
    }
}

impl<T: Scalar> Semiring<T> for AnySecondI
where
    T::Acc: OrderedAccumulator,
{
    #[inline(always)]
    fn zero() -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn add(_a: T::Acc, b: T::Acc) -> T::Acc {
        b
    }
    #[inline(always)]
    fn mul(_a: T, _b: T) -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn mul_at(_a: T, _b: T, k: u32) -> T::Acc {
        T::Acc::from_index(k)
    }
}

/// A semiring over the real types with add `$add` (identity `$zero`) and multiply `$mul`.
macro_rules! ordered_semiring {
    ($name:ident, $zero:ident, |$x:ident, $y:ident| $add:expr, |$a:ident, $b:ident| $mul:expr) => {
        impl<T: Scalar> Semiring<T> for $name
        where
            T::Acc: OrderedAccumulator,
        {
            #[inline(always)]
            fn zero() -> T::Acc {
                <T::Acc as OrderedAccumulator>::$zero
            }
            #[inline(always)]
            fn add($x: T::Acc, $y: T::Acc) -> T::Acc {
                $add
            }
            #[inline(always)]
            fn mul($a: T, $b: T) -> T::Acc {
                $mul
            }
        }
    };
}

ordered_semiring!(MinPlus, INFINITY, |x, y| x.min_of(y), |a, b| a.to_acc()
    + b.to_acc());
ordered_semiring!(MaxPlus, NEG_INFINITY, |x, y| x.max_of(y), |a, b| a.to_acc()
    + b.to_acc());
ordered_semiring!(MinFirst, INFINITY, |x, y| x.min_of(y), |a, _b| a.to_acc());
ordered_semiring!(MinSecond, INFINITY, |x, y| x.min_of(y), |_a, b| b.to_acc());
ordered_semiring!(MaxTimes, NEG_INFINITY, |x, y| x.max_of(y), |a, b| a
    .to_acc()
    * b.to_acc());
ordered_semiring!(MaxMin, NEG_INFINITY, |x, y| x.max_of(y), |a, b| a
    .to_acc()
    .min_of(b.to_acc()));

impl<T: Scalar> Semiring<T> for LorLand
where
    T::Acc: OrderedAccumulator,
{
    #[inline(always)]
    fn zero() -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn add(x: T::Acc, y: T::Acc) -> T::Acc {
        if x != T::Acc::ZERO || y != T::Acc::ZERO {
            T::Acc::ONE
        } else {
            T::Acc::ZERO
        }
    }
    #[inline(always)]
    fn mul(a: T, b: T) -> T::Acc {
        if a.to_acc() != T::Acc::ZERO && b.to_acc() != T::Acc::ZERO {
            T::Acc::ONE
        } else {
            T::Acc::ZERO
        }
    }
}

/// Code generic over the semiring, run for the one a [`SemiringKind`] names
/// ([`with_semiring`]): the bridge from an option to a monomorphised kernel.
pub trait SemiringVisitor<T: Scalar> {
    /// What the code returns.
    type Output;
    /// Runs the code over semiring `S`.
    fn visit<S: Semiring<T>>(self) -> Self::Output;
}

impl SemiringKind {
    /// Whether this semiring is defined over `scalar`: every one over `f32`, `f64` and the
    /// integer types; all but `any_secondi` over `f16` and `bf16` (whose integers are exact
    /// only up to 2^11 and 2^8) and `bool`; over the complex types, those that need only `+`
    /// and `1` (`plus_times`, `plus_pair`, `plus_first`, `plus_second`, `any_pair`).
    pub fn is_defined_for(self, scalar: ScalarType) -> bool {
        use SemiringKind as K;
        let additive = matches!(
            self,
            K::PlusTimes | K::PlusPair | K::PlusFirst | K::PlusSecond | K::AnyPair
        );
        match scalar {
            ScalarType::F32
            | ScalarType::F64
            | ScalarType::I32
            | ScalarType::I64
            | ScalarType::U32
            | ScalarType::U64 => true,
            ScalarType::F16 | ScalarType::Bf16 | ScalarType::Bool => self != K::AnySecondI,
            ScalarType::C32 | ScalarType::C64 => additive,
        }
    }

    /// Every semiring defined over `scalar` ([`SemiringKind::is_defined_for`]).
    pub fn defined_for(scalar: ScalarType) -> impl Iterator<Item = SemiringKind> {
        SemiringKind::ALL
            .into_iter()
            .filter(move |k| k.is_defined_for(scalar))
    }
}

/// Runs `visitor` over the semiring `kind` names, for scalar type `T`;
/// [`Error::InvalidArgument`] where `kind` is not defined over `T`
/// ([`SemiringKind::is_defined_for`]).
///
/// ```
/// use hetsparse_core::semiring::{with_semiring, Semiring, SemiringVisitor};
/// use hetsparse_core::{Scalar, SemiringKind};
///
/// /// `a ⊗ b` as the semiring computes it.
/// struct Product(f64, f64);
/// impl SemiringVisitor<f64> for Product {
///     type Output = f64;
///     fn visit<S: Semiring<f64>>(self) -> f64 {
///         S::mul(self.0, self.1)
///     }
/// }
/// assert_eq!(with_semiring(SemiringKind::MinPlus, Product(2.0, 3.0))?, 5.0);
/// assert_eq!(with_semiring(SemiringKind::PlusPair, Product(2.0, 3.0))?, 1.0);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn with_semiring<T: Scalar, V: SemiringVisitor<T>>(
    kind: SemiringKind,
    visitor: V,
) -> Result<V::Output> {
    if !kind.is_defined_for(T::TYPE) {
        return Err(Error::InvalidArgument(format!(
            "the {kind} semiring is not defined over {}",
            T::TYPE
        )));
    }
    T::visit_semiring(kind, visitor).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the {kind} semiring is not defined over {}",
            T::TYPE
        ))
    })
}

/// [`Scalar::visit_semiring`] for a type whose accumulator is ordered (the real types).
pub(crate) fn visit_ordered<T: Scalar, V: SemiringVisitor<T>>(
    kind: SemiringKind,
    visitor: V,
) -> Option<V::Output>
where
    T::Acc: OrderedAccumulator,
{
    use SemiringKind as K;
    Some(match kind {
        K::MinPlus => visitor.visit::<MinPlus>(),
        K::MaxPlus => visitor.visit::<MaxPlus>(),
        K::MinFirst => visitor.visit::<MinFirst>(),
        K::MinSecond => visitor.visit::<MinSecond>(),
        K::MaxTimes => visitor.visit::<MaxTimes>(),
        K::MaxMin => visitor.visit::<MaxMin>(),
        K::LorLand => visitor.visit::<LorLand>(),
        K::AnySecondI => visitor.visit::<AnySecondI>(),
        other => return visit_additive(other, visitor),
    })
}

/// [`Scalar::visit_semiring`] for the semirings every scalar type has.
pub(crate) fn visit_additive<T: Scalar, V: SemiringVisitor<T>>(
    kind: SemiringKind,
    visitor: V,
) -> Option<V::Output> {
    use SemiringKind as K;
    Some(match kind {
        K::PlusTimes => visitor.visit::<PlusTimes>(),
        K::PlusPair => visitor.visit::<PlusPair>(),
        K::PlusFirst => visitor.visit::<PlusFirst>(),
        K::PlusSecond => visitor.visit::<PlusSecond>(),
        K::AnyPair => visitor.visit::<AnyPair>(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;

    /// `(zero, a ⊗ b at k = 7, x ⊕ y)` of a semiring.
    struct Table<T>(T, T, T::Acc, T::Acc)
    where
        T: Scalar;
    impl<T: Scalar> SemiringVisitor<T> for Table<T> {
        type Output = (T::Acc, T::Acc, T::Acc);
        fn visit<S: Semiring<T>>(self) -> Self::Output {
            (
                S::zero(),
                S::mul_at(self.0, self.1, 7),
                S::add(self.2, self.3),
            )
        }
    }

    #[test]
    fn each_semiring_computes_as_graphblas() {
        use SemiringKind as K;
        let inf = f64::INFINITY;
        for (kind, want) in [
            (K::PlusTimes, (0.0, -6.0, 1.0)),
            (K::PlusPair, (0.0, 1.0, 1.0)),
            (K::PlusFirst, (0.0, 2.0, 1.0)),
            (K::PlusSecond, (0.0, -3.0, 1.0)),
            (K::AnyPair, (0.0, 1.0, 5.0)),
            (K::AnySecondI, (0.0, 7.0, 5.0)),
            (K::MinPlus, (inf, -1.0, -4.0)),
            (K::MaxPlus, (-inf, -1.0, 5.0)),
            (K::MinFirst, (inf, 2.0, -4.0)),
            (K::MinSecond, (inf, -3.0, -4.0)),
            (K::MaxTimes, (-inf, -6.0, 5.0)),
            (K::MaxMin, (-inf, -3.0, 5.0)),
            (K::LorLand, (0.0, 1.0, 1.0)),
        ] {
            let got = with_semiring(kind, Table(2.0f64, -3.0, -4.0, 5.0)).unwrap();
            assert_eq!(got, want, "{kind}");
        }
        let got = with_semiring(K::LorLand, Table(0.0f64, -3.0, 0.0, 0.0)).unwrap();
        assert_eq!(got, (0.0, 0.0, 0.0));
        assert_eq!(
            with_semiring(K::MinPlus, Table(f64::NAN, 1.0, f64::NAN, 2.0))
                .unwrap()
                .2,
            2.0,
            "min ignores NaN"
        );
    }

    #[test]
    fn integers_and_bool_compute_as_graphblas() {
        use SemiringKind as K;
        let w = Wrapping;
        for (kind, want) in [
            (K::PlusTimes, (w(0), w(-6), w(1))),
            (K::PlusPair, (w(0), w(1), w(1))),
            (K::AnySecondI, (w(0), w(7), w(5))),
            (K::MinPlus, (w(i64::MAX), w(-1), w(-4))),
            (K::MaxPlus, (w(i64::MIN), w(-1), w(5))),
            (K::MaxMin, (w(i64::MIN), w(-3), w(5))),
            (K::LorLand, (w(0), w(1), w(1))),
        ] {
            let got = with_semiring(kind, Table(2i64, -3, w(-4), w(5))).unwrap();
            assert_eq!(got, want, "{kind} over i64");
        }
        let u = Wrapping::<u32>;
        let wrapped = with_semiring(K::PlusTimes, Table(u32::MAX, 2, u(u32::MAX), u(2))).unwrap();
        assert_eq!(wrapped, (u(0), u(u32::MAX - 1), u(1)), "u32 wraps");
        let (t, f) = (Boolean(true), Boolean(false));
        for (kind, a, b, want) in [
            (K::PlusTimes, true, false, (f, f, t)),
            (K::MinPlus, true, false, (t, t, f)),
            (K::MaxMin, true, true, (f, t, t)),
            (K::LorLand, false, true, (f, f, t)),
        ] {
            let got = with_semiring(kind, Table(a, b, t, f)).unwrap();
            assert_eq!(got, want, "{kind} over bool");
        }
        assert!(with_semiring(K::AnySecondI, Table(true, true, t, t)).is_err());
    }

    #[test]
    fn every_kind_defined_over_a_type_is_reached() {
        for scalar in ScalarType::ALL {
            for kind in SemiringKind::ALL {
                let reached = match scalar {
                    ScalarType::F32 => with_semiring(kind, Table(1.0f32, 1.0, 0.0, 0.0)).is_ok(),
                    ScalarType::F64 => with_semiring(kind, Table(1.0f64, 1.0, 0.0, 0.0)).is_ok(),
                    ScalarType::F16 => {
                        with_semiring(kind, Table(half::f16::ONE, half::f16::ONE, 0.0, 0.0)).is_ok()
                    }
                    ScalarType::Bf16 => {
                        with_semiring(kind, Table(half::bf16::ONE, half::bf16::ONE, 0.0, 0.0))
                            .is_ok()
                    }
                    ScalarType::C32 => {
                        let z = Complex::new(1.0f32, 0.0);
                        with_semiring(kind, Table(z, z, z, z)).is_ok()
                    }
                    ScalarType::C64 => {
                        let z = Complex::new(1.0f64, 0.0);
                        with_semiring(kind, Table(z, z, z, z)).is_ok()
                    }
                    ScalarType::Bool => {
                        let t = Boolean(true);
                        with_semiring(kind, Table(true, true, t, t)).is_ok()
                    }
                    ScalarType::I32 => {
                        with_semiring(kind, Table(1i32, 1, Wrapping(0), Wrapping(0))).is_ok()
                    }
                    ScalarType::I64 => {
                        with_semiring(kind, Table(1i64, 1, Wrapping(0), Wrapping(0))).is_ok()
                    }
                    ScalarType::U32 => {
                        with_semiring(kind, Table(1u32, 1, Wrapping(0), Wrapping(0))).is_ok()
                    }
                    ScalarType::U64 => {
                        with_semiring(kind, Table(1u64, 1, Wrapping(0), Wrapping(0))).is_ok()
                    }
                };
                assert_eq!(reached, kind.is_defined_for(scalar), "{kind} over {scalar}");
            }
        }
    }
}

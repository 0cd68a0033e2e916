//! Scalar types a matrix can hold, and the accumulators their products are summed in.

use std::fmt::{self, Debug, Display};
use std::num::Wrapping;
use std::ops::{Add, AddAssign, Mul};

use half::{bf16, f16};
use num_complex::Complex;

/// The scalar types hetsparse knows, for capability queries and error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarType {
    /// IEEE half precision, stored only; arithmetic is done in f32.
    F16,
    /// bfloat16, stored only; arithmetic is done in f32.
    Bf16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `Complex<f32>`.
    C32,
    /// `Complex<f64>`.
    C64,
    /// `bool`, with GraphBLAS's arithmetic: `+` is `or`, `×` is `and` ([`Boolean`]).
    Bool,
    /// `i32`, whose sums and products wrap on overflow.
    I32,
    /// `i64`, whose sums and products wrap on overflow.
    I64,
    /// `u32`, whose sums and products wrap on overflow.
    U32,
    /// `u64`, whose sums and products wrap on overflow.
    U64,
}

impl ScalarType {
    /// Every scalar type, in a fixed order.
    pub const ALL: [ScalarType; 11] = [
        ScalarType::F16,
        ScalarType::Bf16,
        ScalarType::F32,
        ScalarType::F64,
        ScalarType::C32,
        ScalarType::C64,
        ScalarType::Bool,
        ScalarType::I32,
        ScalarType::I64,
        ScalarType::U32,
        ScalarType::U64,
    ];

    /// The floating-point types, real and complex: those of numerical work (and the ones the
    /// GPU kernels are instantiated for).
    pub const FLOATS: [ScalarType; 6] = [
        ScalarType::F16,
        ScalarType::Bf16,
        ScalarType::F32,
        ScalarType::F64,
        ScalarType::C32,
        ScalarType::C64,
    ];

    /// The integer types and `bool`: those of graph algorithms (counts, indices, reachability).
    pub const INTEGERS: [ScalarType; 5] = [
        ScalarType::Bool,
        ScalarType::I32,
        ScalarType::I64,
        ScalarType::U32,
        ScalarType::U64,
    ];

    /// Bytes one value occupies in memory.
    pub fn size_bytes(self) -> usize {
        match self {
            ScalarType::Bool => 1,
            ScalarType::F16 | ScalarType::Bf16 => 2,
            ScalarType::F32 | ScalarType::I32 | ScalarType::U32 => 4,
            ScalarType::F64 | ScalarType::C32 | ScalarType::I64 | ScalarType::U64 => 8,
            ScalarType::C64 => 16,
        }
    }

    /// Whether values have an imaginary part.
    pub fn is_complex(self) -> bool {
        matches!(self, ScalarType::C32 | ScalarType::C64)
    }

    /// The relative precision of a stored value (the machine epsilon of its real type, the
    /// spacing of numbers near 1); 0 for the exact types. Tolerances of results scale by it.
    pub fn epsilon(self) -> f64 {
        match self {
            ScalarType::F16 => f64::from(f16::EPSILON.to_f32()),
            ScalarType::Bf16 => f64::from(bf16::EPSILON.to_f32()),
            ScalarType::F32 | ScalarType::C32 => f64::from(f32::EPSILON),
            ScalarType::F64 | ScalarType::C64 => f64::EPSILON,
            ScalarType::Bool
            | ScalarType::I32
            | ScalarType::I64
            | ScalarType::U32
            | ScalarType::U64 => 0.0,
        }
    }

    /// Whether values are exact: the integer types and `bool`, whose results are compared for
    /// equality where floats are compared within a rounding tolerance.
    pub fn is_exact(self) -> bool {
        Self::INTEGERS.contains(&self)
    }
}

impl Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScalarType::F16 => "f16",
            ScalarType::Bf16 => "bf16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
            ScalarType::C32 => "Complex<f32>",
            ScalarType::C64 => "Complex<f64>",
            ScalarType::Bool => "bool",
            ScalarType::I32 => "i32",
            ScalarType::I64 => "i64",
            ScalarType::U32 => "u32",
            ScalarType::U64 => "u64",
        })
    }
}

/// The type products are summed in: `f32` for f16/bf16/f32, `f64`, the complex types, the
/// integer types wrapped in [`Wrapping`] (sums and products wrap on overflow, as GraphBLAS's
/// do, instead of panicking or saturating) and [`Boolean`] for `bool`.
pub trait Accumulator:
    Copy
    + Send
    + Sync
    + Debug
    + PartialEq
    + Add<Output = Self>
    + Mul<Output = Self>
    + AddAssign
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Magnitude (absolute value, modulus for complex) as f64, used to scale tolerances.
    fn magnitude(self) -> f64;
    /// Machine epsilon of the accumulator's real type, as f64.
    const EPSILON: f64;
}

impl Accumulator for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const EPSILON: f64 = f32::EPSILON as f64;
    fn magnitude(self) -> f64 {
        f64::from(self.abs())
    }
}

impl Accumulator for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const EPSILON: f64 = f64::EPSILON;
    fn magnitude(self) -> f64 {
        self.abs()
    }
}

impl Accumulator for Complex<f32> {
    const ZERO: Self = Complex::new(0.0, 0.0);
    const ONE: Self = Complex::new(1.0, 0.0);
    const EPSILON: f64 = f32::EPSILON as f64;
    fn magnitude(self) -> f64 {
        f64::from(self.norm())
    }
}

impl Accumulator for Complex<f64> {
    const ZERO: Self = Complex::new(0.0, 0.0);
    const ONE: Self = Complex::new(1.0, 0.0);
    const EPSILON: f64 = f64::EPSILON;
    fn magnitude(self) -> f64 {
        self.norm()
    }
}

macro_rules! integer_accumulator {
    ($($t:ty),*) => {$(
        impl Accumulator for Wrapping<$t> {
            const ZERO: Self = Wrapping(0);
            const ONE: Self = Wrapping(1);
            const EPSILON: f64 = 0.0;
            fn magnitude(self) -> f64 {
                // Exact up to 2^53; beyond, a magnitude only scales tolerances, which are zero
                // for exact types.
                (self.0 as f64).abs()
            }
        }
    )*};
}

integer_accumulator!(i32, i64, u32, u64);

/// The accumulator of `bool`: GraphBLAS's arithmetic over booleans, where `+` is `or` and `×`
/// is `and` (so `plus_times` over `bool` is what GraphBLAS names `lor_land`), `false < true`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Boolean(pub bool);

// `+` is `or` and `×` is `and`: the arithmetic of GraphBLAS's bool semirings, on purpose.
#[allow(clippy::suspicious_arithmetic_impl)]
impl Add for Boolean {
    type Output = Self;
    #[inline(always)]
    fn add(self, other: Self) -> Self {
        Boolean(self.0 | other.0)
    }
}

#[allow(clippy::suspicious_op_assign_impl)]
impl AddAssign for Boolean {
    #[inline(always)]
    fn add_assign(&mut self, other: Self) {
        self.0 |= other.0;
    }
}

#[allow(clippy::suspicious_arithmetic_impl)]
impl Mul for Boolean {
    type Output = Self;
    #[inline(always)]
    fn mul(self, other: Self) -> Self {
        Boolean(self.0 & other.0)
    }
}

impl Accumulator for Boolean {
    const ZERO: Self = Boolean(false);
    const ONE: Self = Boolean(true);
    const EPSILON: f64 = 0.0;
    fn magnitude(self) -> f64 {
        f64::from(u8::from(self.0))
    }
}

/// A value a sparse or dense matrix can store.
///
/// Arithmetic happens in [`Scalar::Acc`]: f16 and bf16 are storage formats whose products are
/// summed in f32 and rounded once when stored.
pub trait Scalar: Copy + Send + Sync + Debug + PartialEq + Default + 'static {
    /// The accumulator type sums of products are formed in.
    type Acc: Accumulator;
    /// This type's tag.
    const TYPE: ScalarType;
    /// Widens to the accumulator.
    fn to_acc(self) -> Self::Acc;
    /// Rounds an accumulator back to storage.
    fn from_acc(acc: Self::Acc) -> Self;
    /// The value zero.
    fn zero() -> Self {
        Self::from_acc(Self::Acc::ZERO)
    }
    /// A real value (rounded to the storage precision).
    fn from_f64(x: f64) -> Self;
    /// A value from real and imaginary parts; `None` when `im != 0` and the type is real.
    fn try_from_parts(re: f64, im: f64) -> Option<Self>;
    /// A value from real and imaginary parts; real types drop `im`.
    fn from_parts_lossy(re: f64, im: f64) -> Self;
    /// Real and imaginary parts as f64 (imaginary is 0 for real types).
    fn to_parts(self) -> (f64, f64);
    /// Complex conjugate (identity for real types).
    fn conj(self) -> Self;
    /// Negation.
    fn neg(self) -> Self;
    /// Runs `visitor` over the semiring `kind` names, where it is defined over this type;
    /// `None` where not. Reached through [`crate::semiring::with_semiring`]. By default the
    /// semirings every type has (`+` and `1` only); the real types add the ordered ones.
    fn visit_semiring<V: crate::semiring::SemiringVisitor<Self>>(
        kind: crate::backend::SemiringKind,
        visitor: V,
    ) -> Option<V::Output> {
        crate::semiring::visit_additive(kind, visitor)
    }
    /// Magnitude as f64.
    fn magnitude(self) -> f64 {
        self.to_acc().magnitude()
    }
    /// Whether `self < other` in the order the `min` and `max` accumulators compare in: of the
    /// real parts, through f64 by default (exact for every float type; NaN is unordered), and
    /// natively for the integer types, which f64 does not hold exactly past 2^53.
    fn real_lt(self, other: Self) -> bool {
        self.to_parts().0 < other.to_parts().0
    }
}

macro_rules! real_scalar {
    ($t:ty, $tag:expr, $acc:ty, $to:expr, $from:expr, $from64:expr, $to64:expr) => {
        impl Scalar for $t {
            type Acc = $acc;
            const TYPE: ScalarType = $tag;
            #[inline(always)]
            fn to_acc(self) -> $acc {
                $to(self)
            }
            #[inline(always)]
            fn from_acc(acc: $acc) -> Self {
                $from(acc)
            }
            fn from_f64(x: f64) -> Self {
                $from64(x)
            }
            fn try_from_parts(re: f64, im: f64) -> Option<Self> {
                (im == 0.0).then(|| $from64(re))
            }
            fn from_parts_lossy(re: f64, _im: f64) -> Self {
                $from64(re)
            }
            fn to_parts(self) -> (f64, f64) {
                ($to64(self), 0.0)
            }
            fn conj(self) -> Self {
                self
            }
            fn neg(self) -> Self {
                -self
            }
            fn visit_semiring<V: crate::semiring::SemiringVisitor<Self>>(
                kind: crate::backend::SemiringKind,
                visitor: V,
            ) -> Option<V::Output> {
                crate::semiring::visit_ordered(kind, visitor)
            }
        }
    };
}

real_scalar!(
    f32,
    ScalarType::F32,
    f32,
    |x| x,
    |a| a,
    |x| x as f32,
    f64::from
);
real_scalar!(f64, ScalarType::F64, f64, |x| x, |a| a, |x| x, |x| x);
real_scalar!(
    f16,
    ScalarType::F16,
    f32,
    f16::to_f32,
    f16::from_f32,
    f16::from_f64,
    f16::to_f64
);
real_scalar!(
    bf16,
    ScalarType::Bf16,
    f32,
    bf16::to_f32,
    bf16::from_f32,
    bf16::from_f64,
    bf16::to_f64
);

macro_rules! complex_scalar {
    ($r:ty, $tag:expr) => {
        impl Scalar for Complex<$r> {
            type Acc = Complex<$r>;
            const TYPE: ScalarType = $tag;
            #[inline(always)]
            fn to_acc(self) -> Self {
                self
            }
            #[inline(always)]
            fn from_acc(acc: Self) -> Self {
                acc
            }
            fn from_f64(x: f64) -> Self {
                Complex::new(x as $r, 0.0)
            }
            fn try_from_parts(re: f64, im: f64) -> Option<Self> {
                Some(Complex::new(re as $r, im as $r))
            }
            fn from_parts_lossy(re: f64, im: f64) -> Self {
                Complex::new(re as $r, im as $r)
            }
            fn to_parts(self) -> (f64, f64) {
                (f64::from(self.re), f64::from(self.im))
            }
            fn conj(self) -> Self {
                Complex::conj(&self)
            }
            fn neg(self) -> Self {
                -self
            }
        }
    };
}

complex_scalar!(f32, ScalarType::C32);
complex_scalar!(f64, ScalarType::C64);

macro_rules! integer_scalar {
    ($t:ty, $tag:expr) => {
        impl Scalar for $t {
            type Acc = Wrapping<$t>;
            const TYPE: ScalarType = $tag;
            #[inline(always)]
            fn to_acc(self) -> Wrapping<$t> {
                Wrapping(self)
            }
            #[inline(always)]
            fn from_acc(acc: Wrapping<$t>) -> Self {
                acc.0
            }
            /// Rounds toward zero and saturates at the type's bounds (NaN gives 0), as Rust's
            /// float-to-integer conversion does.
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            /// `None` where `im != 0` or `re` is not an integer the type holds.
            fn try_from_parts(re: f64, im: f64) -> Option<Self> {
                let v = re as $t;
                (im == 0.0 && v as f64 == re).then_some(v)
            }
            fn from_parts_lossy(re: f64, _im: f64) -> Self {
                re as $t
            }
            fn to_parts(self) -> (f64, f64) {
                (self as f64, 0.0)
            }
            fn conj(self) -> Self {
                self
            }
            /// Two's-complement negation, wrapping (`-MIN` is `MIN`; unsigned `-x` is
            /// `2^n - x`), as GraphBLAS's additive inverse of integers.
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn real_lt(self, other: Self) -> bool {
                self < other
            }
            fn visit_semiring<V: crate::semiring::SemiringVisitor<Self>>(
                kind: crate::backend::SemiringKind,
                visitor: V,
            ) -> Option<V::Output> {
                crate::semiring::visit_ordered(kind, visitor)
            }
        }
    };
}

integer_scalar!(i32, ScalarType::I32);
integer_scalar!(i64, ScalarType::I64);
integer_scalar!(u32, ScalarType::U32);
integer_scalar!(u64, ScalarType::U64);

impl Scalar for bool {
    type Acc = Boolean;
    const TYPE: ScalarType = ScalarType::Bool;
    #[inline(always)]
    fn to_acc(self) -> Boolean {
        Boolean(self)
    }
    #[inline(always)]
    fn from_acc(acc: Boolean) -> Self {
        acc.0
    }
    /// `true` for every value but zero (NaN is `true`, as C's conversion to `bool`).
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
    /// `None` where the value is neither 0 nor 1.
    fn try_from_parts(re: f64, im: f64) -> Option<Self> {
        match (re, im) {
            (r, i) if r == 0.0 && i == 0.0 => Some(false),
            (r, i) if r == 1.0 && i == 0.0 => Some(true),
            _ => None,
        }
    }
    fn from_parts_lossy(re: f64, _im: f64) -> Self {
        re != 0.0
    }
    fn to_parts(self) -> (f64, f64) {
        (f64::from(u8::from(self)), 0.0)
    }
    fn conj(self) -> Self {
        self
    }
    /// The identity, as GraphBLAS's additive inverse of `bool` (`or` has no inverse).
    fn neg(self) -> Self {
        self
    }
    fn visit_semiring<V: crate::semiring::SemiringVisitor<Self>>(
        kind: crate::backend::SemiringKind,
        visitor: V,
    ) -> Option<V::Output> {
        crate::semiring::visit_ordered(kind, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_types_accumulate_in_f32() {
        let a = f16::from_f32(0.1);
        let acc = a.to_acc() * 3.0 + 1.0;
        assert_eq!(f16::from_acc(acc), f16::from_f32(a.to_f32() * 3.0 + 1.0));
        assert_eq!(bf16::TYPE.size_bytes(), 2);
    }

    #[test]
    fn integers_wrap_and_bool_is_or_and() {
        let big = i32::MAX.to_acc();
        assert_eq!(i32::from_acc(big + 1i32.to_acc()), i32::MIN);
        assert_eq!(
            u64::from_acc(3u64.to_acc() * u64::MAX.to_acc()),
            u64::MAX - 2
        );
        assert_eq!(7u32.neg(), u32::MAX - 6);
        assert_eq!(true.to_acc() + false.to_acc(), Boolean(true));
        assert_eq!(true.to_acc() * false.to_acc(), Boolean(false));
        assert_eq!(i64::try_from_parts(2.5, 0.0), None);
        assert_eq!(i64::try_from_parts(-2.0, 0.0), Some(-2));
        assert_eq!(u32::try_from_parts(-1.0, 0.0), None);
        assert_eq!(bool::try_from_parts(2.0, 0.0), None);
        // Ordered exactly, also where f64 cannot tell the values apart.
        assert!((i64::MAX - 3).real_lt(i64::MAX - 1));
        assert!(!(i64::MAX - 1).real_lt(i64::MAX - 3));
        assert!((u64::MAX - 1).real_lt(u64::MAX));
        assert!(false.real_lt(true) && !true.real_lt(false));
        assert!(ScalarType::ALL
            .iter()
            .all(|t| t.is_exact() != ScalarType::FLOATS.contains(t)));
    }

    #[test]
    fn real_types_refuse_imaginary_parts() {
        assert_eq!(f64::try_from_parts(1.0, 2.0), None);
        assert_eq!(f64::try_from_parts(1.0, 0.0), Some(1.0));
        assert_eq!(
            Complex::<f32>::try_from_parts(1.0, 2.0),
            Some(Complex::new(1.0, 2.0))
        );
    }
}

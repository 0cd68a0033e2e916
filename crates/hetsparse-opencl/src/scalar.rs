//! The scalar types the kernels know, and their bytes as the device sees them.

use std::any::TypeId;

use hetsparse_core::{bf16, f16, Complex, Scalar, ScalarType};

/// Whether `T` is a scalar type whose memory layout the kernels assume (f16 and bf16 as 16
/// bits, complex as re then im, the integers as themselves; not `bool`).
pub(crate) fn is_device_scalar<T: Scalar>() -> bool {
    let id = TypeId::of::<T>();
    let expected = match T::TYPE {
        ScalarType::F16 => TypeId::of::<f16>(),
        ScalarType::Bf16 => TypeId::of::<bf16>(),
        ScalarType::F32 => TypeId::of::<f32>(),
        ScalarType::F64 => TypeId::of::<f64>(),
        ScalarType::C32 => TypeId::of::<Complex<f32>>(),
        ScalarType::C64 => TypeId::of::<Complex<f64>>(),
        ScalarType::I32 => TypeId::of::<i32>(),
        ScalarType::I64 => TypeId::of::<i64>(),
        ScalarType::U32 => TypeId::of::<u32>(),
        ScalarType::U64 => TypeId::of::<u64>(),
        // Not every byte pattern is a bool: never viewed as device bytes.
        ScalarType::Bool => return false,
    };
    id == expected
}

/// The bytes of a slice of device scalars.
pub(crate) fn bytes_of<T: Scalar>(v: &[T]) -> &[u8] {
    // Entry points refuse other types first; this guards the cast below.
    assert!(is_device_scalar::<T>(), "not a device scalar type");
    // SAFETY: T is one of f16, bf16, f32, f64, Complex<f32>, Complex<f64> or an integer type
    // (checked): plain data without padding, any byte pattern of which is a valid value.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of a mutable slice of device scalars.
pub(crate) fn bytes_of_mut<T: Scalar>(v: &mut [T]) -> &mut [u8] {
    assert!(is_device_scalar::<T>(), "not a device scalar type");
    // SAFETY: as in `bytes_of`; every byte pattern is a valid value of these types.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

//! The scalar types the kernels know, and their bytes as the device sees them.
//!
//! Every type but `bool` is plain data: any bytes the device writes are a value of it, so
//! results are read straight into the host's vectors. A `bool` is one byte, 0 or 1, on both
//! sides (`uchar` in the kernels), and only 0 and 1 are `bool`s: the host's values are copied
//! to the device as their bytes (always 0 or 1), but the device's bytes are never viewed as
//! `bool`s. They are read as bytes and converted, any byte but 0 becoming `true`
//! ([`from_device_bytes`]), so whatever a kernel wrote, the host only ever holds valid `bool`s.

use std::any::{Any, TypeId};

use hetsparse_core::{bf16, f16, Complex, Error, Result, Scalar, ScalarType};

use crate::BACKEND;

/// Whether `T` is a scalar type whose memory layout the kernels assume (f16 and bf16 as 16
/// bits, complex as re then im, the integers as themselves, `bool` as a byte 0 or 1).
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
        ScalarType::Bool => TypeId::of::<bool>(),
    };
    id == expected
}

/// Whether `T` is a device scalar type every byte pattern of which is a value: all but
/// `bool`, which is downloaded as bytes and converted ([`from_device_bytes`]).
pub(crate) fn is_plain_device_scalar<T: Scalar>() -> bool {
    is_device_scalar::<T>() && T::TYPE != ScalarType::Bool
}

/// The bytes of a slice of device scalars, to copy to the device.
pub(crate) fn bytes_of<T: Scalar>(v: &[T]) -> &[u8] {
    // Entry points refuse other types first; this guards the cast below.
    assert!(is_device_scalar::<T>(), "not a device scalar type");
    // SAFETY: T is one of f16, bf16, f32, f64, Complex<f32>, Complex<f64>, an integer type or
    // bool (checked): plain data without padding, so every byte is initialised and may be
    // read as a u8 (a bool's byte is 0 or 1). The view is shared: nothing is written as T.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of a mutable slice of device scalars every byte pattern of which is a value (not
/// `bool`), for the device to write into.
pub(crate) fn bytes_of_mut<T: Scalar>(v: &mut [T]) -> &mut [u8] {
    assert!(
        is_plain_device_scalar::<T>(),
        "not a plain device scalar type"
    );
    // SAFETY: as in `bytes_of`, and every byte pattern is a valid value of these types (bool,
    // whose is not, is refused above).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The `bool`s whose device bytes are `bytes`: `true` for every byte but 0. For `T = bool`
/// only; [`Error::Internal`] for any other type.
pub(crate) fn from_device_bytes<T: Scalar>(bytes: &[u8]) -> Result<Vec<T>> {
    let values: Box<dyn Any> = Box::new(bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>());
    values
        .downcast::<Vec<T>>()
        .map(|v| *v)
        .map_err(|_| Error::Internal {
            backend: BACKEND,
            what: format!("{} values read back as bytes of bool", T::TYPE),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_byte_reads_back_as_a_valid_bool() {
        let bytes: Vec<u8> = (0..=255).collect();
        let got = from_device_bytes::<bool>(&bytes).expect("bools");
        assert_eq!(got.len(), 256);
        assert!(!got[0]);
        assert!(got[1..].iter().all(|&b| b));
        assert!(from_device_bytes::<u32>(&bytes).is_err());
        assert_eq!(bytes_of(&[true, false, true]), &[1, 0, 1]);
        assert!(is_device_scalar::<bool>() && !is_plain_device_scalar::<bool>());
        assert!(is_plain_device_scalar::<u32>());
    }
}

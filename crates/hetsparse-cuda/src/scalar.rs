//! Scalar types on the device: bit-identical `DeviceCopy` representations and the suffix of
//! each type's kernel entry points (`kernels-cuda/common.cuh` instantiates every templated
//! kernel as `name_f32`, `name_f64`, `name_c32`, `name_c64`, `name_f16`, `name_bf16`;
//! `semiring.cu` its kernels for `bool`, `i32`, `i64`, `u32` and `u64` too).

use cust::memory::DeviceCopy;
use hetsparse_core::{bf16, f16, Complex, Scalar};

macro_rules! device_wrapper {
    ($(#[$doc:meta])* $name:ident, $inner:ty) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name(pub $inner);
        // SAFETY: plain bits without pointers or drop glue.
        unsafe impl DeviceCopy for $name {}
    };
}

device_wrapper!(
    /// `f16` for the device: 16 storage bits, converted to f32 in kernels.
    DeviceF16,
    f16
);
device_wrapper!(
    /// `bf16` for the device: 16 storage bits, converted to f32 in kernels.
    DeviceBf16,
    bf16
);
device_wrapper!(
    /// `Complex<f32>` for the device: `{re, im}` as in `common.cuh`'s `hs_c32`.
    DeviceC32,
    Complex<f32>
);
device_wrapper!(
    /// `Complex<f64>` for the device: `{re, im}` as in `common.cuh`'s `hs_c64`.
    DeviceC64,
    Complex<f64>
);

/// A [`Scalar`] the kernels are instantiated for.
///
/// # Safety
/// `Device` must have exactly the layout of `Self` (a `#[repr(transparent)]` wrapper or the
/// type itself), so that slices convert by pointer casts.
pub unsafe trait DeviceScalar: Scalar {
    /// The device representation.
    type Device: DeviceCopy + Copy + Default + Send + Sync;
    /// The suffix of this type's kernel entry points.
    const SUFFIX: &'static str;
}

// SAFETY: each `Device` is `Self` or a transparent wrapper of it.
unsafe impl DeviceScalar for f32 {
    type Device = f32;
    const SUFFIX: &'static str = "f32";
}
unsafe impl DeviceScalar for f64 {
    type Device = f64;
    const SUFFIX: &'static str = "f64";
}
unsafe impl DeviceScalar for Complex<f32> {
    type Device = DeviceC32;
    const SUFFIX: &'static str = "c32";
}
unsafe impl DeviceScalar for Complex<f64> {
    type Device = DeviceC64;
    const SUFFIX: &'static str = "c64";
}
unsafe impl DeviceScalar for f16 {
    type Device = DeviceF16;
    const SUFFIX: &'static str = "f16";
}
unsafe impl DeviceScalar for bf16 {
    type Device = DeviceBf16;
    const SUFFIX: &'static str = "bf16";
}

/// The integer types and `bool` hold themselves on the device. Only the semiring kernels
/// (`kernels-cuda/semiring.cu`) are instantiated for them, so the backend claims SpGEMM alone
/// over them; the other operations are refused before any launch. A `bool` comes back from the
/// device as a byte made 0 or 1 on the host (`resident::download_values_into`), never viewed
/// as device bytes.
macro_rules! exact_device_scalar {
    ($($t:ty => $suffix:literal),*) => {$(
        // SAFETY: `Device` is `Self`.
        unsafe impl DeviceScalar for $t {
            type Device = $t;
            const SUFFIX: &'static str = $suffix;
        }
    )*};
}

exact_device_scalar!(bool => "bool", i32 => "i32", i64 => "i64", u32 => "u32", u64 => "u64");

/// Views host values as their device representation.
pub fn as_device<T: DeviceScalar>(values: &[T]) -> &[T::Device] {
    // SAFETY: same layout by the trait's contract; length and lifetime carry over.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const T::Device, values.len()) }
}

/// Views device representations as host values.
pub fn from_device<T: DeviceScalar>(values: &[T::Device]) -> &[T] {
    // SAFETY: same layout by the trait's contract.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const T, values.len()) }
}

/// The kernel `base` instantiated for `T`, e.g. `spgemm_hash_numeric_f64`. Names are
/// `'static` (leaked once per distinct name) because launches carry them in spans and errors.
pub fn kernel_name<T: DeviceScalar>(base: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let full = format!("{base}_{}", T::SUFFIX);
    let mut names = NAMES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(&n) = names.get(full.as_str()) {
        return n;
    }
    let leaked: &'static str = Box::leak(full.into_boxed_str());
    names.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn representations_round_trip_and_name_kernels() {
        let v = [Complex::new(1.0f32, -2.0)];
        assert_eq!(as_device(&v)[0].0, v[0]);
        assert_eq!(from_device::<Complex<f32>>(as_device(&v)), &v);
        assert_eq!(std::mem::size_of::<DeviceF16>(), 2);
        assert_eq!(kernel_name::<bf16>("k"), "k_bf16");
        assert!(std::ptr::eq(
            kernel_name::<bf16>("k"),
            kernel_name::<bf16>("k")
        ));
    }
}

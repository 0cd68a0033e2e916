//! CUDA driver status codes turned into [`hetsparse_core::Error`].
//!
//! Codes are mapped here, by number, and never formatted through cust's `Display` (which fails
//! for codes it does not know, see `NOTES-gpu.md`).

use hetsparse_core::{DeviceFault, Error};

use crate::ffi::{CUresult, CUDA_SUCCESS};

/// The backend's name in errors and [`hetsparse_core::DeviceInfo`].
pub(crate) const BACKEND: hetsparse_core::BackendKind = hetsparse_core::BackendKind::Cuda;

/// What a driver status means, in words.
pub(crate) fn describe(code: CUresult) -> &'static str {
    match code {
        1 => "invalid value (CUDA_ERROR_INVALID_VALUE)",
        2 => "out of device memory (CUDA_ERROR_OUT_OF_MEMORY)",
        3 => "the driver is not initialised (CUDA_ERROR_NOT_INITIALIZED)",
        4 => "the driver is shutting down (CUDA_ERROR_DEINITIALIZED)",
        34 => "the CUDA driver library is the link stub, not a driver (CUDA_ERROR_STUB_LIBRARY)",
        35 => "the installed driver is older than the CUDA runtime (CUDA_ERROR_INSUFFICIENT_DRIVER)",
        100 => "no CUDA-capable device is present (CUDA_ERROR_NO_DEVICE)",
        101 => "invalid device ordinal (CUDA_ERROR_INVALID_DEVICE)",
        200 => "invalid kernel image (CUDA_ERROR_INVALID_IMAGE)",
        201 => "invalid context (CUDA_ERROR_INVALID_CONTEXT)",
        46 => "the device is unavailable (CUDA_ERROR_DEVICE_UNAVAILABLE)",
        209 => "no kernel image for this GPU (CUDA_ERROR_NO_BINARY_FOR_GPU)",
        214 => "an uncorrectable ECC error was detected (CUDA_ERROR_ECC_UNCORRECTABLE)",
        218 => "the PTX failed to compile (CUDA_ERROR_INVALID_PTX)",
        220 => "an uncorrectable NVLink error was detected (CUDA_ERROR_NVLINK_UNCORRECTABLE)",
        221 => "the driver's PTX JIT compiler is missing (CUDA_ERROR_JIT_COMPILER_NOT_FOUND)",
        222 => "the PTX ISA version is newer than this driver supports; update the driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)",
        400 => "invalid handle (CUDA_ERROR_INVALID_HANDLE)",
        500 => "kernel not found in the module (CUDA_ERROR_NOT_FOUND)",
        700 => "a kernel accessed an illegal address (CUDA_ERROR_ILLEGAL_ADDRESS)",
        701 => "too many resources requested for the launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)",
        702 => "the kernel timed out (CUDA_ERROR_LAUNCH_TIMEOUT)",
        709 => "the context was destroyed (CUDA_ERROR_CONTEXT_IS_DESTROYED)",
        710 => "a device-side assertion failed (CUDA_ERROR_ASSERT)",
        714 => "hardware stack error (CUDA_ERROR_HARDWARE_STACK_ERROR)",
        715 => "illegal instruction (CUDA_ERROR_ILLEGAL_INSTRUCTION)",
        716 => "misaligned address (CUDA_ERROR_MISALIGNED_ADDRESS)",
        717 => "invalid address space (CUDA_ERROR_INVALID_ADDRESS_SPACE)",
        718 => "invalid program counter (CUDA_ERROR_INVALID_PC)",
        719 => "the kernel launch failed (CUDA_ERROR_LAUNCH_FAILED)",
        800 => "operation not permitted (CUDA_ERROR_NOT_PERMITTED)",
        801 => "operation not supported (CUDA_ERROR_NOT_SUPPORTED)",
        999 => "unknown error (CUDA_ERROR_UNKNOWN)",
        _ => "unrecognised CUDA driver status",
    }
}

/// Turns a driver status into a result; `what` says what was being done.
pub(crate) fn check(code: CUresult, what: &str) -> hetsparse_core::Result<()> {
    if code == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(from_code(code, what))
    }
}

/// The error for a failed driver call.
pub(crate) fn from_code(code: CUresult, what: &str) -> Error {
    match code {
        // No usable driver or device: the backend cannot exist here, callers skip.
        34 | 35 | 100 | 3 | 4 => Error::NoDevice {
            backend: BACKEND,
            reason: format!("{what}: {} [code {code}]", describe(code)),
        },
        2 => Error::OutOfMemory {
            backend: BACKEND,
            what: what.into(),
            needed_bytes: 0,
            available_bytes: crate::memory::free_device_memory(),
        },
        _ => Error::Device {
            backend: BACKEND,
            context: what.into(),
            message: format!("{} [code {code}]", describe(code)),
            fault: fault(code),
            source: None,
        },
    }
}

/// What kind of failure a driver status is, for a scheduler deciding whether to retry.
///
/// Launch failures (701, 702, 719) leave the context usable: the work may be retried, with
/// other launch parameters or elsewhere. Faults a kernel leaves behind (700 and the other
/// sticky 7xx codes), uncorrectable ECC or NVLink errors (214, 220), an unavailable device or
/// destroyed context (46, 709) and unknown errors (999) leave the context unusable: the
/// device is lost to this process.
pub(crate) fn fault(code: CUresult) -> DeviceFault {
    match code {
        701 | 702 | 719 => DeviceFault::LaunchFailed,
        // ILLEGAL_ADDRESS, ASSERT, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION,
        // MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE, INVALID_PC: sticky, the context is gone.
        700 | 710 | 714 | 715 | 716 | 717 | 718 => DeviceFault::DeviceLost,
        // ECC_UNCORRECTABLE, NVLINK_UNCORRECTABLE, DEVICE_UNAVAILABLE, CONTEXT_IS_DESTROYED,
        // UNKNOWN.
        214 | 220 | 46 | 709 | 999 => DeviceFault::DeviceLost,
        _ => DeviceFault::Other,
    }
}

/// The error for a failed cust call, by the code cust carries (never its `Display`).
pub(crate) fn from_cust(e: cust::error::CudaError, what: &str) -> Error {
    // cust's enum discriminants are the driver's codes.
    from_code(e as u32 as CUresult, what)
}

/// A budget or device-memory shortfall with the sizes involved.
pub(crate) fn out_of_memory(what: &str, needed: u64, available: u64) -> Error {
    Error::OutOfMemory {
        backend: BACKEND,
        what: what.into(),
        needed_bytes: needed,
        available_bytes: available,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_and_missing_driver_mean_no_device() {
        for code in [34, 35, 100] {
            assert!(matches!(from_code(code, "init"), Error::NoDevice { .. }));
        }
    }

    #[test]
    fn codes_are_named_and_never_panic() {
        let e = from_code(222, "loading PTX");
        assert!(e.to_string().contains("PTX ISA version is newer"), "{e}");
        assert!(matches!(from_code(2, "x"), Error::OutOfMemory { .. }));
        assert!(from_code(719, "launch")
            .to_string()
            .contains("launch failed"));
        assert!(from_code(123_456, "x").to_string().contains("123456"));
        let cust_unknown = from_cust(cust::error::CudaError::UnknownError, "y");
        assert!(cust_unknown.to_string().contains("999"));
    }

    #[test]
    fn driver_codes_map_to_fault_kinds() {
        let kind = |code| match from_code(code, "x") {
            Error::Device { fault, message, .. } => {
                assert!(message.contains(&format!("[code {code}]")), "{message}");
                fault
            }
            other => panic!("code {code}: {other:?}"),
        };
        for code in [701, 702, 719] {
            assert_eq!(kind(code), DeviceFault::LaunchFailed, "code {code}");
        }
        for code in [700, 214, 709, 999] {
            assert_eq!(kind(code), DeviceFault::DeviceLost, "code {code}");
        }
        assert_eq!(kind(1), DeviceFault::Other);
        assert!(from_code(719, "k").is_retryable());
        assert!(!from_code(1, "k").is_retryable());
    }
}

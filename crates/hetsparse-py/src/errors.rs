//! hetsparse's errors as Python exceptions.

use hetsparse::Error;
use pyo3::exceptions::{
    PyKeyboardInterrupt, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::PyErr;

pyo3::create_exception!(
    _hetsparse,
    DeviceError,
    PyRuntimeError,
    "A device, driver or runtime failed, or no device of the kind asked for is present."
);

/// The Python exception for `e`, with hetsparse's message:
///
/// - operands or arguments that do not fit (shapes, structure, arguments) → `ValueError`;
/// - an operation a device does not run for the dtype → `TypeError`;
/// - memory that cannot be had, even out of core, or sizes past a limit → `MemoryError`;
/// - a cancelled run → `KeyboardInterrupt` (cancellation comes only from Ctrl-C here);
/// - a missing device or a failing driver → [`DeviceError`] (a `RuntimeError`);
/// - anything else (a bug) → `RuntimeError`.
pub fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    let mut kind = &e;
    while let Error::InChunk { source, .. } = kind {
        kind = source;
    }
    match kind {
        Error::Format(_)
        | Error::ShapeMismatch { .. }
        | Error::InvalidArgument(_)
        | Error::PatternMismatch { .. }
        | Error::WrongDevice { .. } => PyValueError::new_err(message),
        Error::Unsupported { .. } => PyTypeError::new_err(message),
        Error::OutOfMemory { .. } | Error::TooLarge { .. } => PyMemoryError::new_err(message),
        Error::Cancelled => PyKeyboardInterrupt::new_err(message),
        Error::NoDevice { .. } | Error::Device { .. } => DeviceError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// A `ValueError` with `message`.
pub fn value(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

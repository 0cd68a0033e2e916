//! Panics on the way from a backend to the caller: a device's panic is that device's failure
//! (its work reruns on the others), a panic of the caller's own progress callback goes back to
//! the caller as the panic it was, on the caller's thread.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use hetsparse_core::{Backend, Error, Result, RunControl, Scalar};

/// Runs `call`, a call into `device` on behalf of `run`: a panic in it becomes the device's
/// failure ([`Error::Internal`] with the panic's message), unless it is the panic of `run`'s
/// progress callback ([`RunControl::callback_panicked`]), which goes on unwinding.
pub(crate) fn device_call<T: Scalar, R>(
    device: &dyn Backend<T>,
    run: &RunControl,
    call: impl FnOnce() -> Result<R>,
) -> Result<R> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(result) => result,
        Err(payload) if run.callback_panicked() => resume_unwind(payload),
        Err(payload) => Err(panicked(device, payload.as_ref())),
    }
}

/// The error for a backend that panicked, with the panic's message.
pub(crate) fn panicked<T: Scalar>(device: &dyn Backend<T>, payload: &(dyn Any + Send)) -> Error {
    Error::Internal {
        backend: device.info().backend,
        what: format!("the backend panicked: {}", panic_message(payload)),
    }
}

/// A panic's message, where it carried one.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// The first panic that escaped a worker thread (the caller's callback's, which
/// [`device_call`] lets through), kept to be resumed on the caller's thread once every worker
/// has ended: a scoped thread's panic would otherwise reach the caller as a message of the
/// standard library's, not the caller's own.
#[derive(Default)]
pub(crate) struct EscapedPanic(Mutex<Option<Box<dyn Any + Send>>>);

impl EscapedPanic {
    /// Runs a worker's body, keeping a panic that escapes it.
    pub(crate) fn catch(&self, body: impl FnOnce()) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
            let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
            kept.get_or_insert(payload);
        }
    }

    /// Resumes the kept panic, if any, on this thread.
    pub(crate) fn resume(self) {
        let kept = self.0.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(payload) = kept {
            resume_unwind(payload);
        }
    }
}

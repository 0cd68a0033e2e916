//! What every test file shares: obtaining the backend, skipping without a device.

use hetsparse_core::{Error, Result};
use hetsparse_cuda::CudaBackend;

/// The backend, or `None` (test skipped) where there is no device; with
/// `HETSPARSE_REQUIRE_DEVICE=1` a missing device fails the test instead.
pub fn obtain(test: &str, made: Result<CudaBackend>) -> Option<CudaBackend> {
    match made {
        Ok(b) => Some(b),
        Err(e @ Error::NoDevice { .. }) => {
            if std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref() == Ok("1") {
                panic!("{test}: HETSPARSE_REQUIRE_DEVICE=1 but {e}");
            }
            eprintln!("{test}: SKIPPED, {e}");
            None
        }
        Err(e) => panic!("{test}: the backend could not be constructed: {e}"),
    }
}

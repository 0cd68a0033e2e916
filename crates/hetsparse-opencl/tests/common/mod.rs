//! What the integration tests share: the backend under test.

use hetsparse_core::Error;
use hetsparse_opencl::OpenClBackend;

/// The backend chosen by `HETSPARSE_OPENCL_DEVICE` (else the first GPU, else the first
/// device), or `None` (with a note) when there is no OpenCL device and
/// `HETSPARSE_REQUIRE_DEVICE` is not `1`. Any other construction error fails the test.
pub fn backend(suite: &str) -> Option<OpenClBackend> {
    match OpenClBackend::from_env() {
        Ok(b) => Some(b),
        Err(e @ Error::NoDevice { .. }) => {
            if std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref() == Ok("1") {
                panic!("{suite}: HETSPARSE_REQUIRE_DEVICE=1 but {e}");
            }
            eprintln!("{suite}: SKIPPED, {e}");
            None
        }
        Err(e) => panic!("{suite}: the backend could not be constructed: {e}"),
    }
}

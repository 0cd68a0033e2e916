//! The backends to measure: one registration per backend, each behind the bench crate's Cargo
//! feature of the same name, so the default build needs neither CUDA nor OpenCL.

use hetsparse_core::{Backend, Error, ReferenceBackend, Result};

/// A backend that could be constructed, under the name its results carry.
pub struct Registered {
    /// The backend's short name ([`hetsparse_core::DeviceInfo::backend`]).
    pub name: String,
    /// The backend.
    pub backend: Box<dyn Backend<f64>>,
}

/// A compiled-in backend that is not available on this machine, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// The backend's name.
    pub name: &'static str,
    /// Why it could not be constructed (e.g. no device).
    pub reason: String,
}

/// Which backends to construct.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Threads of the CPU backend; `None` for its default (all cores, or `RAYON_NUM_THREADS`).
    pub threads: Option<usize>,
    /// Also measure the serial reference kernels (slow: meant for quick runs and for checking
    /// the harness).
    pub reference: bool,
}

/// Constructs every backend compiled in and selected. A backend whose device is missing lands
/// in the second list; any other construction error is returned.
pub fn backends(selection: Selection) -> Result<(Vec<Registered>, Vec<Unavailable>)> {
    let mut ready = Vec::new();
    let mut unavailable = Vec::new();
    let mut register = |name: &'static str, made: Result<Box<dyn Backend<f64>>>| match made {
        Ok(backend) => {
            ready.push(Registered {
                name: backend.info().backend.to_string(),
                backend,
            });
            Ok(())
        }
        Err(e @ Error::NoDevice { .. }) => {
            unavailable.push(Unavailable {
                name,
                reason: e.to_string(),
            });
            Ok(())
        }
        Err(e) => Err(e),
    };
    #[cfg(feature = "cpu")]
    register("cpu", cpu(selection.threads))?;
    #[cfg(feature = "cuda")]
    register(
        "cuda",
        hetsparse_cuda::CudaBackend::new().map(|b| Box::new(b) as _),
    )?;
    #[cfg(feature = "opencl")]
    register(
        "opencl",
        hetsparse_opencl::OpenClBackend::new().map(|b| Box::new(b) as _),
    )?;
    if selection.reference {
        register("reference", Ok(Box::new(ReferenceBackend)))?;
    }
    Ok((ready, unavailable))
}

#[cfg(feature = "cpu")]
fn cpu(threads: Option<usize>) -> Result<Box<dyn Backend<f64>>> {
    let backend = match threads {
        Some(n) => hetsparse_cpu::CpuBackend::with_threads(n)?,
        None => hetsparse_cpu::CpuBackend::new()?,
    };
    Ok(Box::new(backend))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::BackendKind;

    #[test]
    fn reference_only_when_asked() {
        let (with, _) = backends(Selection {
            threads: None,
            reference: true,
        })
        .unwrap();
        assert!(with
            .iter()
            .any(|r| r.backend.info().backend == BackendKind::Reference));
        let (without, _) = backends(Selection::default()).unwrap();
        assert!(without
            .iter()
            .all(|r| r.backend.info().backend != BackendKind::Reference));
    }
}

//! [`DeviceChoice`]: a device as a user names it, and the [`Context`] computing on it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use hetsparse_core::{Backend, Error, Result};

use crate::context::{Context, ContextScalar};

/// A device as a user names it (the command line's `--device`, Python's `device=`): `auto`,
/// `all`, `cpu`, `cuda[:N]` or `opencl[:NAME|P.D]`, case-insensitive.
///
/// ```
/// use hetsparse::DeviceChoice;
/// assert_eq!("cuda:1".parse::<DeviceChoice>()?, DeviceChoice::Cuda(1));
/// assert_eq!("OpenCL:NVIDIA".parse::<DeviceChoice>()?.to_string(), "opencl:NVIDIA");
/// assert!("tpu".parse::<DeviceChoice>().is_err());
/// # Ok::<(), hetsparse::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceChoice {
    /// Every device [`Context::auto`] uses.
    Auto,
    /// The same devices, every product large enough to cut shared over all of them
    /// ([`Context::share_always`]).
    All,
    /// The CPU's cores.
    Cpu,
    /// CUDA GPU number N (`cuda` alone is 0).
    Cuda(u32),
    /// An OpenCL device: the first GPU (else the first device), `P.D` (platform and device
    /// index), or the first whose name, platform or vendor contains the text.
    OpenCl(Option<String>),
}

impl FromStr for DeviceChoice {
    type Err = Error;
    /// [`Error::InvalidArgument`] saying what is accepted.
    fn from_str(s: &str) -> Result<Self> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind.trim().to_ascii_lowercase().as_str(), arg) {
            ("auto", None) => Ok(DeviceChoice::Auto),
            ("all", None) => Ok(DeviceChoice::All),
            ("cpu", None) => Ok(DeviceChoice::Cpu),
            ("cuda", None) => Ok(DeviceChoice::Cuda(0)),
            ("cuda", Some(n)) => n.trim().parse().map(DeviceChoice::Cuda).map_err(|_| {
                Error::InvalidArgument(format!(
                    "`{s}`: a CUDA device is numbered (cuda:0, cuda:1, ...), not `{n}`"
                ))
            }),
            ("opencl", None) => Ok(DeviceChoice::OpenCl(None)),
            ("opencl", Some(name)) if !name.trim().is_empty() => {
                Ok(DeviceChoice::OpenCl(Some(name.trim().to_string())))
            }
            _ => Err(Error::InvalidArgument(format!(
                "`{s}` is not a device: use auto, all, cpu, cuda[:N] or opencl[:NAME]"
            ))),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::All => f.write_str("all"),
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceChoice::OpenCl(None) => f.write_str("opencl"),
            DeviceChoice::OpenCl(Some(name)) => write!(f, "opencl:{name}"),
        }
    }
}

impl<T: ContextScalar> Context<T> {
    /// A context computing on `choice`: [`Context::auto`] for `auto`, the same sharing every
    /// product for `all`, else that one device alone (listed under the name `choice` prints
    /// as). [`Error::NoDevice`] when it is absent or this build lacks its backend's feature.
    pub fn on(choice: &DeviceChoice) -> Result<Self> {
        let label = choice.to_string();
        let single =
            |backend: Arc<dyn Backend<T>>| Context::from_backends(&[&label], vec![backend]);
        match choice {
            DeviceChoice::Auto => Context::auto(),
            DeviceChoice::All => Context::auto().and_then(Context::share_always),
            DeviceChoice::Cpu => single(cpu::<T>()?),
            DeviceChoice::Cuda(n) => single(cuda::<T>(*n)?),
            DeviceChoice::OpenCl(name) => single(opencl::<T>(name.as_deref())?),
        }
    }
}

#[cfg(feature = "cpu")]
fn cpu<T: ContextScalar>() -> Result<Arc<dyn Backend<T>>> {
    Ok(Arc::new(hetsparse_cpu::CpuBackend::new()?))
}

#[cfg(not(feature = "cpu"))]
fn cpu<T: ContextScalar>() -> Result<Arc<dyn Backend<T>>> {
    Err(Error::NoDevice {
        backend: hetsparse_core::BackendKind::Cpu,
        reason: "this hetsparse was built without the CPU backend (its `cpu` feature)".into(),
    })
}

#[cfg(feature = "cuda")]
fn cuda<T: ContextScalar>(ordinal: u32) -> Result<Arc<dyn Backend<T>>> {
    let gpu = hetsparse_cuda::CudaBackend::with_device(ordinal)?;
    gpu.warm_up();
    Ok(Arc::new(gpu))
}

#[cfg(not(feature = "cuda"))]
fn cuda<T: ContextScalar>(_ordinal: u32) -> Result<Arc<dyn Backend<T>>> {
    Err(Error::NoDevice {
        backend: hetsparse_core::BackendKind::Cuda,
        reason: "this hetsparse was built without CUDA (its `cuda` feature)".into(),
    })
}

#[cfg(feature = "opencl")]
fn opencl<T: ContextScalar>(name: Option<&str>) -> Result<Arc<dyn Backend<T>>> {
    use hetsparse_opencl::OpenClBackend;
    let index = name.and_then(|n| {
        let (p, d) = n.split_once('.')?;
        Some((p.parse::<usize>().ok()?, d.parse::<usize>().ok()?))
    });
    let backend = match (name, index) {
        (_, Some((platform, device))) => OpenClBackend::with_device_index(platform, device)?,
        (Some(name), None) => OpenClBackend::with_device_name(name)?,
        (None, None) => OpenClBackend::new()?,
    };
    Ok(Arc::new(backend))
}

#[cfg(not(feature = "opencl"))]
fn opencl<T: ContextScalar>(_name: Option<&str>) -> Result<Arc<dyn Backend<T>>> {
    Err(Error::NoDevice {
        backend: hetsparse_core::BackendKind::OpenCl,
        reason: "this hetsparse was built without OpenCL (its `opencl` feature)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_print_back() {
        for (text, want) in [
            ("auto", DeviceChoice::Auto),
            ("All", DeviceChoice::All),
            ("CPU", DeviceChoice::Cpu),
            ("cuda", DeviceChoice::Cuda(0)),
            ("cuda:3", DeviceChoice::Cuda(3)),
            ("opencl", DeviceChoice::OpenCl(None)),
            ("opencl:NVIDIA", DeviceChoice::OpenCl(Some("NVIDIA".into()))),
            ("opencl:0.1", DeviceChoice::OpenCl(Some("0.1".into()))),
        ] {
            let got: DeviceChoice = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string().parse::<DeviceChoice>().unwrap(), want);
        }
        for bad in ["cuda:x", "opencl:", "tpu", "cpu:1", ""] {
            let e = bad.parse::<DeviceChoice>().unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
        }
    }

    #[cfg(feature = "cpu")]
    #[test]
    fn the_cpu_alone_computes() {
        let ctx = Context::<f64>::on(&DeviceChoice::Cpu).unwrap();
        assert_eq!(ctx.devices().len(), 1);
        assert_eq!(
            ctx.devices()[0].to_string().split_whitespace().next(),
            Some("cpu")
        );
    }
}

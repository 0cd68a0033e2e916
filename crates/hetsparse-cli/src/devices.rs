//! `--device`: which devices a command computes on.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use hetsparse::{Backend, Context, Error};

use crate::error::CliError;

/// A device as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// Every device [`Context::auto`] uses.
    Auto,
    /// The same devices, every large enough product shared over all of them.
    All,
    /// The CPU's cores.
    Cpu,
    /// CUDA GPU number N.
    Cuda(u32),
    /// An OpenCL device: the first GPU (else the first device), `P.D` (platform and device
    /// index), or the first whose name, platform or vendor contains the text.
    OpenCl(Option<String>),
}

impl FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind.to_ascii_lowercase().as_str(), arg) {
            ("auto", None) => Ok(DeviceChoice::Auto),
            ("all", None) => Ok(DeviceChoice::All),
            ("cpu", None) => Ok(DeviceChoice::Cpu),
            ("cuda", None) => Ok(DeviceChoice::Cuda(0)),
            ("cuda", Some(n)) => n.parse().map(DeviceChoice::Cuda).map_err(|_| {
                format!("`{s}`: a CUDA device is numbered (cuda:0, cuda:1, ...), not `{n}`")
            }),
            ("opencl", None) => Ok(DeviceChoice::OpenCl(None)),
            ("opencl", Some(name)) if !name.trim().is_empty() => {
                Ok(DeviceChoice::OpenCl(Some(name.trim().to_string())))
            }
            _ => Err(format!(
                "`{s}` is not a device: use auto, all, cpu, cuda[:N] or opencl[:NAME]"
            )),
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

/// The context computing on `choice`.
pub fn context(choice: &DeviceChoice) -> Result<Context<f64>, CliError> {
    let unavailable = |e: Error| match e {
        Error::NoDevice { reason, .. } => CliError::Device {
            device: choice.to_string(),
            reason,
        },
        other => CliError::Device {
            device: choice.to_string(),
            reason: other.to_string(),
        },
    };
    let single = |backend: Arc<dyn Backend<f64>>| {
        Context::from_backends(&[&choice.to_string()], vec![backend]).map_err(unavailable)
    };
    match choice {
        DeviceChoice::Auto => Context::auto().map_err(unavailable),
        DeviceChoice::All => Context::auto()
            .and_then(Context::share_always)
            .map_err(unavailable),
        DeviceChoice::Cpu => single(Arc::new(
            hetsparse::cpu::CpuBackend::new().map_err(unavailable)?,
        )),
        DeviceChoice::Cuda(n) => cuda(*n).map_err(unavailable).and_then(single),
        DeviceChoice::OpenCl(name) => opencl(name.as_deref())
            .map_err(unavailable)
            .and_then(single),
    }
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: u32) -> Result<Arc<dyn Backend<f64>>, Error> {
    Ok(Arc::new(hetsparse::cuda::CudaBackend::with_device(
        ordinal,
    )?))
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: u32) -> Result<Arc<dyn Backend<f64>>, Error> {
    Err(Error::NoDevice {
        backend: "cuda".into(),
        reason: "this hetsparse was built without CUDA (build it with `--features cuda`)".into(),
    })
}

#[cfg(feature = "opencl")]
fn opencl(name: Option<&str>) -> Result<Arc<dyn Backend<f64>>, Error> {
    use hetsparse::opencl::OpenClBackend;
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
fn opencl(_name: Option<&str>) -> Result<Arc<dyn Backend<f64>>, Error> {
    Err(Error::NoDevice {
        backend: "opencl".into(),
        reason: "this hetsparse was built without OpenCL (build it with `--features opencl`)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse() {
        assert_eq!("auto".parse(), Ok(DeviceChoice::Auto));
        assert_eq!("CPU".parse(), Ok(DeviceChoice::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceChoice::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceChoice::Cuda(3)));
        assert_eq!(
            "opencl:NVIDIA".parse(),
            Ok(DeviceChoice::OpenCl(Some("NVIDIA".into())))
        );
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
        assert!("opencl:".parse::<DeviceChoice>().is_err());
        assert!("tpu".parse::<DeviceChoice>().is_err());
        assert!("cpu:1".parse::<DeviceChoice>().is_err());
    }
}

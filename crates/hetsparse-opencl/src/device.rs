//! Platforms and devices: listing every one, and picking one by kind or by name.

use opencl3::device::{
    Device as ClDevice, CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU,
    CL_DEVICE_TYPE_GPU,
};
use opencl3::platform::get_platforms;
use std::sync::OnceLock;

use opencl3::types::cl_device_id;

use hetsparse_core::{DeviceKind, Error, Result};

use crate::BACKEND;

/// One OpenCL device as its platform reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceDescription {
    /// Position of the platform in the ICD loader's list.
    pub platform_index: usize,
    /// Position of the device in its platform's list.
    pub device_index: usize,
    /// The platform's name (`Portable Computing Language`, `NVIDIA CUDA`, ...).
    pub platform: String,
    /// The device's name.
    pub name: String,
    /// The device's vendor.
    pub vendor: String,
    /// CPU, GPU or other accelerator.
    pub kind: DeviceKind,
    /// The OpenCL version string of the device.
    pub version: String,
    /// Compute units.
    pub compute_units: u32,
    /// Global memory in bytes.
    pub global_memory_bytes: u64,
    /// Largest single buffer in bytes.
    pub max_buffer_bytes: u64,
    /// Local memory per work-group in bytes.
    pub local_memory_bytes: u64,
    /// Whether the device has `cl_khr_fp64`: f64 and `Complex<f64>` need it.
    pub fp64: bool,
    /// Whether it has `cl_khr_int64_base_atomics` (CSPR SpMV in double precision needs it).
    pub int64_atomics: bool,
}

impl std::fmt::Display for DeviceDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}.{}] {} / {} ({:?}, {} compute units, {} MiB{})",
            self.platform_index,
            self.device_index,
            self.platform,
            self.name,
            self.kind,
            self.compute_units,
            self.global_memory_bytes >> 20,
            if self.fp64 { ", fp64" } else { "" }
        )
    }
}

/// How a backend constructor chooses its device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    /// A GPU if there is one, else the first device.
    PreferGpu,
    /// The first device of this kind.
    Kind(DeviceKind),
    /// The first device whose platform or device name contains this (case-insensitive).
    Name(String),
    /// Device `.1` of platform `.0`, as [`list_devices`] numbers them.
    Index(usize, usize),
}

fn no_device(reason: impl Into<String>) -> Error {
    Error::NoDevice {
        backend: BACKEND,
        reason: reason.into(),
    }
}

fn kind_of(bits: u64) -> DeviceKind {
    if bits & CL_DEVICE_TYPE_GPU != 0 {
        DeviceKind::Gpu
    } else if bits & CL_DEVICE_TYPE_CPU != 0 {
        DeviceKind::Cpu
    } else {
        let _ = CL_DEVICE_TYPE_ACCELERATOR;
        DeviceKind::Accelerator
    }
}

/// Lists every device of every platform the ICD loader knows.
///
/// Returns [`Error::NoDevice`] when the OpenCL library cannot be loaded or lists no platform;
/// a platform that fails to list its devices is skipped.
///
/// ```
/// match hetsparse_opencl::list_devices() {
///     Ok(devices) => devices.iter().for_each(|d| println!("{d}")),
///     Err(e) => println!("no OpenCL: {e}"),
/// }
/// ```
pub fn list_devices() -> Result<Vec<DeviceDescription>> {
    Ok(enumerate()?.into_iter().map(|(_, d)| d).collect())
}

/// Device handles with their descriptions.
pub(crate) type Listed = Vec<(DeviceId, DeviceDescription)>;

/// A device handle that may cross threads (OpenCL handles are thread-safe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceId(pub(crate) cl_device_id);

// SAFETY: cl_device_id is an opaque handle that every OpenCL call accepts from any thread.
unsafe impl Send for DeviceId {}
unsafe impl Sync for DeviceId {}

/// The platforms' devices, asked for once per process: the ICD loader's first
/// clGetPlatformIDs is not safe to run from several threads at once (concurrent first calls
/// crashed the process or listed no platform).
pub(crate) fn enumerate() -> Result<Listed> {
    static LISTED: OnceLock<std::result::Result<Listed, String>> = OnceLock::new();
    LISTED
        .get_or_init(|| {
            query().map_err(|e| match e {
                Error::NoDevice { reason, .. } => reason,
                other => other.to_string(),
            })
        })
        .clone()
        .map_err(|reason| Error::NoDevice {
            backend: BACKEND,
            reason,
        })
}

fn query() -> Result<Listed> {
    let platforms = get_platforms().map_err(|e| {
        no_device(format!(
            "no OpenCL platform (ICD loader or driver missing): {e}"
        ))
    })?;
    if platforms.is_empty() {
        return Err(no_device("the OpenCL ICD loader lists no platform"));
    }
    let mut out = Vec::new();
    for (pi, platform) in platforms.iter().enumerate() {
        let Ok(ids) = platform.get_devices(CL_DEVICE_TYPE_ALL) else {
            continue;
        };
        let platform_name = platform.name().unwrap_or_default();
        for (di, &id) in ids.iter().enumerate() {
            let d = ClDevice::new(id);
            let extensions = d.extensions().unwrap_or_default();
            let has = |ext: &str| extensions.split_whitespace().any(|e| e == ext);
            out.push((
                DeviceId(id),
                DeviceDescription {
                    platform_index: pi,
                    device_index: di,
                    platform: platform_name.trim().to_string(),
                    name: d.name().unwrap_or_default().trim().to_string(),
                    vendor: d.vendor().unwrap_or_default().trim().to_string(),
                    kind: kind_of(d.dev_type().unwrap_or(0)),
                    version: d.version().unwrap_or_default().trim().to_string(),
                    compute_units: d.max_compute_units().unwrap_or(1).max(1),
                    global_memory_bytes: d.global_mem_size().unwrap_or(0),
                    max_buffer_bytes: d.max_mem_alloc_size().unwrap_or(0),
                    local_memory_bytes: d.local_mem_size().unwrap_or(0),
                    fp64: has("cl_khr_fp64"),
                    int64_atomics: has("cl_khr_int64_base_atomics"),
                },
            ));
        }
    }
    if out.is_empty() {
        return Err(no_device("the OpenCL platforms list no device"));
    }
    Ok(out)
}

/// The device `selector` picks from `devices`.
pub(crate) fn pick<D: Clone>(
    devices: &[(D, DeviceDescription)],
    selector: &Selector,
) -> Result<(D, DeviceDescription)> {
    let found = match selector {
        Selector::PreferGpu => devices
            .iter()
            .find(|(_, d)| d.kind == DeviceKind::Gpu)
            .or_else(|| devices.first()),
        Selector::Kind(kind) => devices.iter().find(|(_, d)| d.kind == *kind),
        Selector::Index(platform, device) => devices
            .iter()
            .find(|(_, d)| d.platform_index == *platform && d.device_index == *device),
        Selector::Name(name) => {
            let needle = name.to_lowercase();
            devices.iter().find(|(_, d)| {
                d.name.to_lowercase().contains(&needle)
                    || d.platform.to_lowercase().contains(&needle)
                    || d.vendor.to_lowercase().contains(&needle)
            })
        }
    };
    found.cloned().ok_or_else(|| {
        let listed: Vec<String> = devices.iter().map(|(_, d)| d.to_string()).collect();
        let wanted = match selector {
            Selector::PreferGpu => "any device".to_string(),
            Selector::Kind(k) => format!("a device of kind {k:?}"),
            Selector::Name(n) => format!("a device whose name contains `{n}`"),
            Selector::Index(p, d) => format!("device {d} of platform {p}"),
        };
        no_device(format!(
            "{wanted} was asked for; present: {}",
            listed.join("; ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(name: &str, platform: &str, kind: DeviceKind) -> DeviceDescription {
        DeviceDescription {
            platform_index: 0,
            device_index: 0,
            platform: platform.into(),
            name: name.into(),
            vendor: String::new(),
            kind,
            version: String::new(),
            compute_units: 1,
            global_memory_bytes: 0,
            max_buffer_bytes: 0,
            local_memory_bytes: 0,
            fp64: false,
            int64_atomics: false,
        }
    }

    #[test]
    fn picking_prefers_gpus_and_matches_names() {
        let devices = vec![
            (
                0,
                desc(
                    "pthread-skylake",
                    "Portable Computing Language",
                    DeviceKind::Cpu,
                ),
            ),
            (1, desc("NVIDIA H100", "NVIDIA CUDA", DeviceKind::Gpu)),
        ];
        assert_eq!(pick(&devices, &Selector::PreferGpu).unwrap().0, 1);
        assert_eq!(
            pick(&devices, &Selector::Kind(DeviceKind::Cpu)).unwrap().0,
            0
        );
        assert_eq!(
            pick(&devices, &Selector::Name("portable".into()))
                .unwrap()
                .0,
            0
        );
        assert_eq!(pick(&devices, &Selector::Name("h100".into())).unwrap().0, 1);
        let only_cpu = vec![devices[0].clone()];
        assert_eq!(pick(&only_cpu, &Selector::PreferGpu).unwrap().0, 0);
        let err = pick(&only_cpu, &Selector::Kind(DeviceKind::Gpu)).unwrap_err();
        assert!(matches!(err, Error::NoDevice { .. }), "{err}");
        assert!(err.to_string().contains("pthread-skylake"), "{err}");
        let err = pick(&only_cpu, &Selector::Name("radeon".into())).unwrap_err();
        assert!(err.to_string().contains("`radeon`"), "{err}");
    }

    #[test]
    fn picking_by_index_tells_devices_of_one_name_apart() {
        let mut second = desc("Radeon", "AMD APP", DeviceKind::Gpu);
        second.device_index = 1;
        let devices = vec![(0, desc("Radeon", "AMD APP", DeviceKind::Gpu)), (1, second)];
        assert_eq!(pick(&devices, &Selector::Index(0, 1)).unwrap().0, 1);
        assert_eq!(pick(&devices, &Selector::Index(0, 0)).unwrap().0, 0);
        let err = pick(&devices, &Selector::Index(1, 0)).unwrap_err();
        assert!(err.to_string().contains("device 0 of platform 1"), "{err}");
    }
}

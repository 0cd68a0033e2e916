//! [`DeviceProfile`]: what a device is as a cost model needs it — memory bandwidth, the link
//! to the host, what a call costs, how fast its units multiply — with defaults per kind of
//! device where the device cannot report them.

use super::{DeviceInfo, DeviceKind, MemorySpace};

/// How fast a device is, as a cost model predicts a call's time from it.
///
/// Backends report what their driver tells them and leave the rest at the defaults of
/// [`DeviceProfile::defaults`]; every number is per second or in seconds, and positive.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProfile {
    /// Bandwidth of the memory the device computes in, bytes per second.
    pub memory_bandwidth: f64,
    /// Bandwidth of the copies between host memory and the device's, bytes per second, one
    /// way; `None` for a device that computes in host memory (nothing is copied).
    pub link_bandwidth: Option<f64>,
    /// Seconds a call costs whatever its size: launches, synchronisations, a host backend's
    /// threads waking up.
    pub call_latency: f64,
    /// Intermediate products of SpGEMM one compute unit accumulates per second into entries
    /// of C already there (a multiply-add into a dense accumulator: what a product whose
    /// rows of C fill up, like a dense one, costs per product).
    pub products_per_unit: f64,
    /// Products per second of a unit where the row of B is a run of consecutive columns (32
    /// or more, as in a dense product): the accumulation is then a vector add along the run.
    pub run_products_per_unit: f64,
    /// Entries of C one compute unit makes per second beside that (finding the slot of a new
    /// column, hashing or sorting, writing the entry): with every product a new entry, as in
    /// a uniformly random product, a unit's rate is `1 / (1/products_per_unit +
    /// 1/entries_per_unit)` products per second.
    pub entries_per_unit: f64,
    /// Floating-point multiply-adds one compute unit does per second on SpMM's dense rows.
    pub multiply_adds_per_unit: f64,
    /// Parallel units ([`DeviceInfo::compute_units`], at least 1).
    pub compute_units: u32,
    /// How much a skewed product slows the device: its compute time is multiplied by
    /// `1 + skew_penalty · ln(max / mean)` of the products per row (a GPU's warps wait on
    /// the longest row of their block; a CPU's threads steal).
    pub skew_penalty: f64,
    /// Bytes of the cache that serves the device's reads of a dense operand (a CPU's last
    /// level, all of it; a GPU's L2): an operand this size or smaller is read from memory
    /// once, whatever the order of the reads.
    pub cache_bytes: u64,
    /// Bytes per second the device reads from its memory a cache line at a time in no order
    /// (the rows of a dense operand that uniformly random columns of A ask for): latency
    /// bound, a fraction of [`memory_bandwidth`](Self::memory_bandwidth).
    pub gather_bandwidth: f64,
    /// Seconds the device's next call costs beyond a later one's because the device is not
    /// ready yet (kernels still to load, staging buffers still to lock): 0 once it is. A
    /// backend that readies itself in the background says how far it got.
    pub cold_start: f64,
    /// Whether the numbers were measured or reported by the device (`false`: defaults).
    pub reported: bool,
}

/// Host memory bandwidth one CPU thread draws, bytes per second (a DDR4/DDR5 channel serves
/// two to four busy cores).
pub const HOST_BANDWIDTH_PER_THREAD: f64 = 6e9;
/// The most host memory bandwidth the defaults assume, bytes per second (a two-socket server).
pub const HOST_BANDWIDTH_MAX: f64 = 200e9;
/// Intermediate products a CPU thread accumulates per second into entries already there (a
/// dense accumulator's multiply-add at a scattered column).
pub const CPU_PRODUCTS_PER_THREAD: f64 = 200e6;
/// The same where B's row is a run of consecutive columns: vector adds along the run (a
/// dense product's rows of B ran fifteen times the scattered rate).
pub const CPU_RUN_PRODUCTS_PER_THREAD: f64 = 3e9;
/// Entries of C a CPU thread makes per second (hash or sort accumulators; with the products
/// above, 50 million products a second where each makes an entry).
pub const CPU_ENTRIES_PER_THREAD: f64 = 66.7e6;
/// Bytes per second of random cache-line reads one CPU thread draws from host memory (about
/// ten misses in flight at 100 ns each, less what the page walks of a large operand cost).
pub const HOST_GATHER_PER_THREAD: f64 = 1.3e9;
/// Last-level cache assumed per CPU thread where the backend does not read the real size.
pub const HOST_CACHE_PER_THREAD: u64 = 2 << 20;
/// A GPU's L2 cache when the driver does not report it (current data-centre parts have
/// 40–60 MiB).
pub const GPU_CACHE_BYTES: u64 = 40 << 20;
/// Seconds a host backend's call costs (rayon's threads waking, the result's allocation).
pub const CPU_CALL_LATENCY: f64 = 20e-6;
/// A GPU's memory bandwidth when the driver does not report it, bytes per second (an upper
/// mid-range card; an H100/H200 has 3–4.8 TB/s).
pub const GPU_MEMORY_BANDWIDTH: f64 = 1e12;
/// Host to GPU copies from pageable host memory, bytes per second (PCIe 5 x16 through the
/// driver's staging copy; PCIe 4 about half). With it the model has a GPU's whole SpGEMM from
/// host memory well ahead of a many-core CPU's and its SpMV behind (copying A costs more than
/// the host's threads take to read it once), as measured (docs/benchmarks.md).
pub const GPU_LINK_BANDWIDTH: f64 = 25e9;
/// Intermediate products a GPU multiprocessor accumulates per second into entries already
/// there (shared-memory dense or hash accumulators of rows that fill up).
pub const GPU_PRODUCTS_PER_UNIT: f64 = 300e6;
/// Entries of C a GPU multiprocessor makes per second (with the products above, 40 million
/// products a second where each makes an entry: 2–10 billion on 100–132 SMs).
pub const GPU_ENTRIES_PER_UNIT: f64 = 46e6;
/// Seconds a GPU's first call costs beyond later ones where the backend does not say it is
/// ready (kernels loading on first use, the first allocations, staging buffers locked by the
/// call itself).
pub const GPU_COLD_START: f64 = 20e-3;
/// What a GPU's first call still costs beyond later ones once its backend readied it ahead
/// (first launches, the first allocations of the call's sizes).
pub const GPU_READIED_COLD_START: f64 = 5e-3;
/// Seconds a whole GPU call costs whatever its size (allocations, a dozen launches, the
/// synchronisations between the symbolic and numeric phases).
pub const GPU_CALL_LATENCY: f64 = 300e-6;
/// Copies between an OpenCL CPU device's buffers and the host's, bytes per second (a memcpy
/// on the same memory).
pub const OPENCL_CPU_LINK_BANDWIDTH: f64 = 8e9;
/// Seconds an OpenCL CPU device's call costs (enqueueing, PoCL's work-group threads).
pub const OPENCL_CPU_CALL_LATENCY: f64 = 500e-6;
/// An OpenCL CPU runtime's entries of C per thread per second against the CPU backend's
/// [`CPU_ENTRIES_PER_THREAD`]: generic kernels, no vector accumulators.
pub const OPENCL_CPU_ENTRIES_PER_THREAD: f64 = 20e6;

impl DeviceProfile {
    /// The defaults for a device of `info`'s kind computing in `space`:
    ///
    /// | | host memory (CPU backend) | own memory, `DeviceKind::Cpu` (PoCL) | own memory, GPU or accelerator |
    /// |---|---|---|---|
    /// | memory bandwidth | 6 GB/s per thread, at most 200 GB/s | the same | 1 TB/s |
    /// | link | none | 8 GB/s | 25 GB/s |
    /// | call latency | 20 µs | 500 µs | 300 µs |
    /// | products per unit per s | 200 M | 1 G | 300 M |
    /// | the same, rows of B that are runs | 3 G | 1 G | 300 M |
    /// | entries of C per unit per s | 66.7 M | 20 M | 46 M |
    /// | cold start | 0 | 0 | 20 ms |
    /// | skew penalty | 0.02 | 0.05 | 0.15 |
    /// | cache | 2 MiB per thread | the same | 40 MiB |
    /// | random reads | 1.3 GB/s per thread, at most 50 GB/s | the same | a quarter of the bandwidth |
    ///
    /// Multiply-adds per unit per second are 4 G on a CPU thread and 30 G on a GPU
    /// multiprocessor (far above what SpMM's memory traffic allows, so bandwidth decides).
    pub fn defaults(info: &DeviceInfo, space: &MemorySpace) -> Self {
        let units = info.compute_units.max(1);
        let host_bandwidth = (HOST_BANDWIDTH_PER_THREAD * f64::from(units)).min(HOST_BANDWIDTH_MAX);
        let host_gathers =
            (HOST_GATHER_PER_THREAD * f64::from(units)).min(HOST_BANDWIDTH_MAX / 4.0);
        let host_cache = HOST_CACHE_PER_THREAD.saturating_mul(u64::from(units));
        match (space, info.kind) {
            (MemorySpace::Host, _) => DeviceProfile {
                memory_bandwidth: host_bandwidth,
                link_bandwidth: None,
                call_latency: CPU_CALL_LATENCY,
                products_per_unit: CPU_PRODUCTS_PER_THREAD,
                run_products_per_unit: CPU_RUN_PRODUCTS_PER_THREAD,
                entries_per_unit: CPU_ENTRIES_PER_THREAD,
                multiply_adds_per_unit: 4e9,
                compute_units: units,
                skew_penalty: 0.02,
                cache_bytes: host_cache,
                gather_bandwidth: host_gathers,
                cold_start: 0.0,
                reported: false,
            },
            (_, DeviceKind::Cpu) => DeviceProfile {
                memory_bandwidth: host_bandwidth,
                link_bandwidth: Some(OPENCL_CPU_LINK_BANDWIDTH),
                call_latency: OPENCL_CPU_CALL_LATENCY,
                products_per_unit: 1e9,
                run_products_per_unit: 1e9,
                entries_per_unit: OPENCL_CPU_ENTRIES_PER_THREAD,
                multiply_adds_per_unit: 2e9,
                compute_units: units,
                skew_penalty: 0.05,
                cache_bytes: host_cache,
                gather_bandwidth: host_gathers,
                cold_start: 0.0,
                reported: false,
            },
            (_, DeviceKind::Gpu | DeviceKind::Accelerator) => DeviceProfile {
                memory_bandwidth: GPU_MEMORY_BANDWIDTH,
                link_bandwidth: Some(GPU_LINK_BANDWIDTH),
                call_latency: GPU_CALL_LATENCY,
                products_per_unit: GPU_PRODUCTS_PER_UNIT,
                run_products_per_unit: GPU_PRODUCTS_PER_UNIT,
                entries_per_unit: GPU_ENTRIES_PER_UNIT,
                multiply_adds_per_unit: 30e9,
                compute_units: units,
                skew_penalty: 0.15,
                cache_bytes: GPU_CACHE_BYTES,
                gather_bandwidth: GPU_MEMORY_BANDWIDTH / 4.0,
                cold_start: GPU_COLD_START,
                reported: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: DeviceKind, units: u32) -> DeviceInfo {
        DeviceInfo {
            backend: crate::BackendKind::Other("x"),
            name: "x".into(),
            kind,
            memory_bytes: 1 << 30,
            compute_units: units,
        }
    }

    #[test]
    fn defaults_follow_the_kind_and_the_memory() {
        let cpu = DeviceProfile::defaults(&info(DeviceKind::Cpu, 16), &MemorySpace::Host);
        assert_eq!(cpu.link_bandwidth, None);
        assert_eq!(cpu.memory_bandwidth, 96e9);
        let big = DeviceProfile::defaults(&info(DeviceKind::Cpu, 256), &MemorySpace::Host);
        assert_eq!(big.memory_bandwidth, HOST_BANDWIDTH_MAX);
        let gpu_space = MemorySpace::Device {
            backend: crate::BackendKind::Cuda,
            id: 0,
        };
        let gpu = DeviceProfile::defaults(&info(DeviceKind::Gpu, 0), &gpu_space);
        assert_eq!(gpu.link_bandwidth, Some(GPU_LINK_BANDWIDTH));
        assert_eq!(gpu.compute_units, 1);
        let pocl = DeviceProfile::defaults(&info(DeviceKind::Cpu, 2), &gpu_space);
        assert_eq!(pocl.link_bandwidth, Some(OPENCL_CPU_LINK_BANDWIDTH));
        assert!(!pocl.reported);
    }
}

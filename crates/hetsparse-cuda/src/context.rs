//! The device, its primary context, the loaded kernel modules, streams, events and launches.
//!
//! Every public operation of the backend starts with [`Gpu::bind`], which makes the device's
//! primary context current on the calling thread: the backend is shared between threads and the
//! driver keeps the current context per thread.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::ops::Deref;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};

use hetsparse_core::{Error, Result};

use crate::error::{check, from_code, from_cust, BACKEND};
use crate::ffi::{self, CUdevice, CUevent, CUfunction, CUmemoryPool, CUmodule, CUstream};
use crate::kernels::{self, MODULES};
use crate::memory::{DeviceBuffer, PinnedPool};
use hetsparse_core::MemoryPool;

/// Static shared memory any kernel of this crate declares at most (scan scratch, counters):
/// what dynamic shared memory leaves room for.
pub(crate) const STATIC_SHARED_BYTES: u32 = 1024;

/// One GPU: its primary context, properties and kernel modules.
pub struct Gpu {
    // Field order matters: pooled streams are destroyed and modules unloaded before the
    // context is released.
    streams: Mutex<Vec<Arc<Stream>>>,
    functions: Mutex<HashMap<(usize, &'static str), Function>>,
    modules: Vec<(&'static str, Module)>,
    context: cust::context::Context,
    ordinal: u32,
    name: String,
    total_memory: u64,
    multiprocessors: u32,
    memory_bandwidth: Option<f64>,
    l2_bytes: Option<u64>,
    /// [`Gpu::warm_up`] and the staging buffers' locking ran to their end.
    ready: std::sync::atomic::AtomicBool,
    /// Calls running on other devices of the process: the warm-up waits while there are any.
    paused: std::sync::atomic::AtomicUsize,
    /// When the last pause ended ([`Gpu::pause_warm_up`]): microseconds on
    /// [`micros_since_epoch`]'s clock, or [`NEVER_PAUSED`].
    resumed_at: std::sync::atomic::AtomicU64,
    driver_version: Option<String>,
    max_shared_per_block: u32,
    max_shared_optin: u32,
    compute_capability: (i32, i32),
    memory: Arc<MemoryPool>,
    pinned: PinnedPool,
    /// The device's default stream-ordered memory pool, where the driver supports them.
    mempool: Option<MemPool>,
    /// Every kernel module was loaded from its binary for this architecture (no PTX compiled).
    kernel_binaries: bool,
}

/// A driver memory pool handle.
#[derive(Clone, Copy)]
pub(crate) struct MemPool(pub(crate) CUmemoryPool);

// SAFETY: pool handles are process-wide driver objects, usable from any thread.
unsafe impl Send for MemPool {}
unsafe impl Sync for MemPool {}

/// Streams a [`Gpu`] keeps for reuse (creating one costs microseconds, more than a small
/// kernel); more are created when more operations run at once.
const STREAM_POOL_KEEP: usize = 16;

struct Module(CUmodule);

// SAFETY: a module handle may be used from any thread once its context is current.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuModuleLoadDataEx and is unloaded once.
        unsafe { ffi::cuModuleUnload(self.0) };
    }
}

/// A kernel entry point.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    raw: CUfunction,
    name: &'static str,
}

// SAFETY: function handles are immutable driver objects, usable from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// A kernel argument. Device pointers are passed as [`Arg::U64`] (see
/// [`crate::memory::DeviceSlice::arg`]).
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// `unsigned int` / `int` bits.
    U32(u32),
    /// `unsigned long long`, or a device pointer.
    U64(u64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
}

/// Grid, block and dynamic shared memory of a launch (one-dimensional).
#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig {
    /// Blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// Enough blocks of `block` threads for `threads` threads, capped for grid-stride kernels.
    pub fn for_threads(threads: u64, block: u32) -> Self {
        let blocks = threads.div_ceil(u64::from(block)).clamp(1, 1 << 20);
        LaunchConfig {
            grid: blocks as u32,
            block,
            shared_bytes: 0,
        }
    }
}

fn device_attribute(device: CUdevice, attribute: c_int) -> Result<i32> {
    let mut value = 0;
    // SAFETY: plain query into a local.
    check(
        unsafe { ffi::cuDeviceGetAttribute(&mut value, attribute, device) },
        "querying a device attribute",
    )?;
    Ok(value)
}

/// The pool of device `ordinal`'s memory, one per device in the process: every backend on the
/// device reserves from it as well as from its own pool (its budget), so that backends on one
/// device cannot together reserve more than it has.
fn device_memory(ordinal: u32, bytes: u64) -> Result<Arc<MemoryPool>> {
    static POOLS: OnceLock<Mutex<HashMap<u32, Arc<MemoryPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| Error::Internal {
            backend: BACKEND,
            what: "the device memory registry: a thread panicked while holding it".into(),
        })?;
    Ok(Arc::clone(
        pools
            .entry(ordinal)
            .or_insert_with(|| MemoryPool::new(BACKEND, bytes)),
    ))
}

/// How many GPUs the CUDA driver sees (ordinals `0..count` for
/// [`CudaBackend::with_device`](crate::CudaBackend::with_device)), without opening any: callers
/// that want one backend per GPU can tell "no more devices" from a device that failed to open.
/// Without a driver, with the link stub or with no device: [`Error::NoDevice`].
pub fn device_count() -> Result<u32> {
    // SAFETY: cuInit may be called any number of times.
    check(unsafe { ffi::cuInit(0) }, "initialising the CUDA driver")?;
    let mut count = 0;
    // SAFETY: query into a local.
    check(
        unsafe { ffi::cuDeviceGetCount(&mut count) },
        "counting devices",
    )?;
    Ok(count.max(0) as u32)
}

impl Gpu {
    /// Initialises the driver, retains device `ordinal`'s primary context and loads the
    /// kernels. Its memory pool's limit is the device's memory, and it reserves from the
    /// device's pool too, which every [`Gpu`] of the device shares. Without a driver, with the
    /// link stub or without such a device: [`Error::NoDevice`].
    pub fn new(ordinal: u32) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice {
                backend: BACKEND,
                reason: format!("device {ordinal} asked for, the driver sees {count}"),
            });
        }
        let mut device: CUdevice = 0;
        // SAFETY: ordinal checked above.
        check(
            unsafe { ffi::cuDeviceGet(&mut device, ordinal as c_int) },
            "opening the device",
        )?;
        let mut name_buf = [0 as c_char; 256];
        // SAFETY: the buffer is 256 bytes and the driver writes a NUL-terminated name.
        check(
            unsafe { ffi::cuDeviceGetName(name_buf.as_mut_ptr(), 256, device) },
            "reading the device name",
        )?;
        // SAFETY: NUL-terminated by the driver (the buffer was zeroed).
        let name = unsafe { CStr::from_ptr(name_buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut total = 0usize;
        // SAFETY: query into a local.
        check(
            unsafe { ffi::cuDeviceTotalMem_v2(&mut total, device) },
            "reading the device memory size",
        )?;
        let multiprocessors =
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_shared_per_block =
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)? as u32;
        let max_shared_optin = device_attribute(
            device,
            ffi::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?
        .max(max_shared_per_block as i32) as u32;
        // Peak memory bandwidth from the memory's clock (kHz) and bus width (bits), double
        // data rate; `None` where the driver reports neither (some report 0).
        let memory_bandwidth = match (
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        ) {
            (Ok(khz), Ok(bits)) if khz > 0 && bits > 0 => {
                Some(2.0 * f64::from(khz) * 1e3 * f64::from(bits) / 8.0)
            }
            _ => None,
        };
        let l2_bytes = device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .ok()
            .and_then(|b| u64::try_from(b).ok())
            .filter(|&b| b > 0);
        let mut driver = 0;
        // SAFETY: query into a local.
        let driver_version = (unsafe { ffi::cuDriverGetVersion(&mut driver) } == ffi::CUDA_SUCCESS
            && driver > 0)
            .then(|| format!("{}.{}", driver / 1000, driver % 1000 / 10));
        let compute_capability = (
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let cust_device = cust::device::Device::get_device(ordinal)
            .map_err(|e| from_cust(e, "opening the device through cust"))?;
        let context = cust::context::Context::new(cust_device)
            .map_err(|e| from_cust(e, "retaining the primary context"))?;
        let memory = MemoryPool::with_parent(
            BACKEND,
            total as u64,
            &device_memory(ordinal, total as u64)?,
        );
        let mempool =
            if device_attribute(device, ffi::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0 {
                let mut pool: CUmemoryPool = ptr::null_mut();
                // SAFETY: query into a local.
                check(
                    unsafe { ffi::cuDeviceGetDefaultMemPool(&mut pool, device) },
                    "getting the device's memory pool",
                )?;
                Some(MemPool(pool))
            } else {
                None
            };
        let mut gpu = Gpu {
            streams: Mutex::new(Vec::new()),
            functions: Mutex::new(HashMap::new()),
            mempool,
            modules: Vec::new(),
            context,
            ordinal,
            name,
            total_memory: total as u64,
            multiprocessors,
            memory_bandwidth,
            l2_bytes,
            ready: std::sync::atomic::AtomicBool::new(false),
            paused: std::sync::atomic::AtomicUsize::new(0),
            resumed_at: std::sync::atomic::AtomicU64::new(NEVER_PAUSED),
            driver_version,
            max_shared_per_block,
            max_shared_optin,
            compute_capability,
            memory,
            pinned: PinnedPool::default(),
            kernel_binaries: false,
        };
        gpu.bind()?;
        gpu.set_memory_limit(total as u64)?;
        let mut binaries = 0;
        for module in MODULES {
            let binary = if kernels::binary_for(compute_capability) {
                load_binary(module.name, module.sm90)
                    .inspect_err(|e| {
                        tracing::warn!(
                            module = module.name,
                            error = %e,
                            "the sm_90 kernel binary did not load; compiling the PTX instead"
                        )
                    })
                    .ok()
            } else {
                None
            };
            let loaded = match binary {
                Some(loaded) => {
                    binaries += 1;
                    loaded
                }
                None => load_module(module.name, module.ptx)?,
            };
            gpu.modules.push((module.name, loaded));
        }
        gpu.kernel_binaries = binaries == MODULES.len();
        tracing::debug!(
            ordinal,
            binaries,
            modules = MODULES.len(),
            "kernel modules loaded"
        );
        Ok(gpu)
    }

    /// Readies, on the calling thread (bound to this device), what a process's first call
    /// would otherwise wait for: every embedded kernel looked up (where the driver loads
    /// modules lazily, its default since CUDA 12, a kernel is loaded on its first look-up,
    /// milliseconds each, which a first call paid for each kernel it used), two streams in
    /// the pool, and [`WARM_POOL_BYTES`] of device memory taken from the stream-ordered pool
    /// and given back (the pool keeps it, so the first call's allocations need no new
    /// mapping). Stops as soon as a call begins, which then does what is left itself. The
    /// kernels looked up, or `None` where a call began first. Failures are left to the calls
    /// that meet them.
    pub fn warm_up(&self) -> Option<usize> {
        let mut looked_up = 0;
        for (module, (_, loaded)) in MODULES.iter().zip(&self.modules) {
            for name in kernel_names(module.ptx) {
                if !self.may_warm_up() {
                    return None;
                }
                let Ok(c_name) = CString::new(name) else {
                    continue;
                };
                let mut raw: CUfunction = ptr::null_mut();
                // SAFETY: the module is loaded and the name NUL-terminated; the handle is
                // dropped (the look-up is what loads the kernel).
                if unsafe { ffi::cuModuleGetFunction(&mut raw, loaded.0, c_name.as_ptr()) }
                    == ffi::CUDA_SUCCESS
                {
                    looked_up += 1;
                }
            }
        }
        for _ in 0..2 {
            if !self.may_warm_up() {
                return None;
            }
            let Ok(stream) = Stream::new() else { break };
            self.streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Arc::new(stream));
        }
        if !self.may_warm_up() {
            return None;
        }
        let home = self.streams.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(home) = home {
            if let Ok(buffer) = DeviceBuffer::<u8>::new_on(
                self,
                &home,
                WARM_POOL_BYTES as usize,
                "readying the memory pool",
            ) {
                drop(buffer);
                let _ = home.synchronize();
            }
            self.streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(home);
        }
        Some(looked_up)
    }

    /// Whether the warm-up may take its next step: `false` once a call began on the device;
    /// while calls run on other devices of the process ([`Gpu::pause_warm_up`]), and for
    /// [`WARM_UP_QUIET`] after the last of them, waits (page-locking takes the process's
    /// memory-map lock, which every page fault of a host call waits for, and loading kernels
    /// takes host time; a caller making host calls one after another would otherwise meet a
    /// step at the start of each).
    pub fn may_warm_up(&self) -> bool {
        use std::sync::atomic::Ordering;
        loop {
            if self.pinned.call_begun() {
                return false;
            }
            if self.paused.load(Ordering::Acquire) == 0 {
                let resumed = self.resumed_at.load(Ordering::Acquire);
                if resumed == NEVER_PAUSED
                    || micros_since_epoch().saturating_sub(resumed)
                        >= WARM_UP_QUIET.as_micros() as u64
                {
                    return true;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Holds the warm-up while a call runs on another device; it resumes when the returned
    /// guard is dropped.
    pub fn pause_warm_up(&self) -> WarmUpPause<'_> {
        self.paused
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        WarmUpPause { gpu: self }
    }

    /// Says that the device was readied ahead ([`Gpu::warm_up`] and the staging buffers).
    pub fn mark_ready(&self) {
        self.ready.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the device was readied ahead ([`Gpu::warm_up`] ran to its end), or a call
    /// has begun since (which readied what it used).
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire) || self.pinned.call_begun()
    }

    /// Whether a call has begun on the device since its warm-up started.
    pub fn call_begun(&self) -> bool {
        self.pinned.call_begun()
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: the context is retained for the lifetime of `self`.
        check(
            unsafe { ffi::cuCtxSetCurrent(self.context.as_raw() as *mut c_void) },
            "making the CUDA context current",
        )
    }

    /// Sets the memory pool's limit to `bytes`, and lets the driver's stream-ordered pool keep
    /// that much freed memory cached for reuse (by default it returns everything to the
    /// device at each synchronisation, which makes the next allocation a full cuMemAlloc):
    /// what the driver caches never exceeds the budget.
    pub(crate) fn set_memory_limit(&self, bytes: u64) -> Result<()> {
        self.memory.set_limit(bytes);
        if let Some(pool) = self.mempool {
            let mut threshold = bytes;
            // SAFETY: the attribute takes a pointer to a 64-bit value, read during the call.
            check(
                unsafe {
                    ffi::cuMemPoolSetAttribute(
                        pool.0,
                        ffi::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                        &mut threshold as *mut u64 as *mut c_void,
                    )
                },
                "setting the memory pool's release threshold",
            )?;
        }
        Ok(())
    }

    /// The device's stream-ordered memory pool, if the driver supports one.
    pub(crate) fn mempool(&self) -> Option<MemPool> {
        self.mempool
    }

    /// A stream from the device's pool (a new one if all are in use), given back when the
    /// lease is dropped. Work queued on it need not be over by then: the next user's work
    /// simply queues behind it.
    pub fn stream(&self) -> Result<StreamLease<'_>> {
        // Every call on the device takes a stream: one has begun, so locking staging buffers
        // ahead stops rather than hold the driver's lock against it.
        self.pinned.stop_filling();
        let reused = self.streams.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let stream = match reused {
            Some(s) => s,
            None => Arc::new(Stream::new()?),
        };
        Ok(StreamLease {
            stream: Some(stream),
            gpu: self,
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }
    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Device memory in bytes.
    pub fn total_memory(&self) -> u64 {
        self.total_memory
    }
    /// Streaming multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }
    /// Peak memory bandwidth in bytes per second, from the memory's clock and bus width as
    /// the driver reports them (`None` where it reports neither).
    pub fn memory_bandwidth(&self) -> Option<f64> {
        self.memory_bandwidth
    }
    /// Bytes of the device's L2 cache, where the driver says.
    pub fn l2_bytes(&self) -> Option<u64> {
        self.l2_bytes
    }
    /// The driver's CUDA version (`13.0`), where the driver says.
    pub fn driver_version(&self) -> Option<&str> {
        self.driver_version.as_deref()
    }
    /// Whether every kernel module was loaded from the binary compiled ahead of time for this
    /// GPU's architecture (sm_90), rather than from PTX compiled by the driver at load time.
    pub fn kernel_binaries(&self) -> bool {
        self.kernel_binaries
    }
    /// Static shared memory a block may use, in bytes.
    pub fn max_shared_per_block(&self) -> u32 {
        self.max_shared_per_block
    }
    /// Shared memory a block may use after opting in ([`Gpu::allow_shared`]), in bytes.
    pub fn max_shared_optin(&self) -> u32 {
        self.max_shared_optin
    }
    /// Lets `function` use `bytes` of dynamic shared memory (beyond 48 KiB, static and dynamic
    /// together, GPUs ask for an explicit opt-in per kernel). The kernels' static shared
    /// variables take at most [`STATIC_SHARED_BYTES`].
    pub fn allow_shared(&self, function: Function, bytes: u32) -> Result<()> {
        if bytes + STATIC_SHARED_BYTES <= 48 * 1024 {
            return Ok(());
        }
        // SAFETY: valid function handle; the driver checks the value.
        check(
            unsafe {
                ffi::cuFuncSetAttribute(
                    function.raw,
                    ffi::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as c_int,
                )
            },
            &format!(
                "allowing kernel `{}` {bytes} bytes of shared memory",
                function.name
            ),
        )
    }
    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }
    /// The device-memory pool every allocation reserves from.
    pub fn memory(&self) -> &Arc<MemoryPool> {
        &self.memory
    }

    /// Pinned host buffers reused between operations.
    pub fn pinned_pool(&self) -> &PinnedPool {
        &self.pinned
    }

    /// Kernel `name` of module `module` (a `kernels-cuda/*.cu` file's stem).
    pub fn function(&self, module: &str, name: &'static str) -> Result<Function> {
        // Looked up once per kernel: every launch asks, and a lookup (a C string and a driver
        // call) is a noticeable part of a small kernel's cost.
        let index = self.modules.iter().position(|(n, _)| *n == module);
        if let Some(i) = index {
            let cache = self.functions.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = cache.get(&(i, name)) {
                return Ok(*f);
            }
        }
        let (_, m) = index
            .map(|i| &self.modules[i])
            .ok_or_else(|| Error::Internal {
                backend: BACKEND,
                what: format!(
                    "looking up kernel `{name}`: no kernel module `{module}` is embedded"
                ),
            })?;
        let c_name = CString::new(name).map_err(|_| {
            Error::InvalidArgument(format!("kernel name `{name}` contains a NUL byte"))
        })?;
        let mut raw: CUfunction = ptr::null_mut();
        // SAFETY: the module is loaded and the name NUL-terminated.
        check(
            unsafe { ffi::cuModuleGetFunction(&mut raw, m.0, c_name.as_ptr()) },
            &format!("looking up kernel `{name}` in module `{module}`"),
        )?;
        let function = Function { raw, name };
        if let Some(i) = index {
            self.functions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((i, name), function);
        }
        Ok(function)
    }

    /// Launches `function` on `stream`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in number, order and size, and every device
    /// pointer among them must be valid for what the kernel reads and writes until the
    /// stream has passed the launch.
    pub unsafe fn launch(
        &self,
        function: Function,
        config: LaunchConfig,
        stream: &Stream,
        args: &[Arg],
    ) -> Result<()> {
        // Each argument lives in its own 8-byte slot; the kernel reads the first 4 bytes of a
        // 32-bit one, so those bytes are filled in the machine's byte order.
        let mut storage: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::U32(v) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&v.to_ne_bytes());
                    u64::from_ne_bytes(b)
                }
                Arg::F32(v) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&v.to_ne_bytes());
                    u64::from_ne_bytes(b)
                }
                Arg::U64(v) => v,
                Arg::F64(v) => u64::from_ne_bytes(v.to_ne_bytes()),
            })
            .collect();
        let mut pointers: Vec<*mut c_void> = storage
            .iter_mut()
            .map(|s| s as *mut u64 as *mut c_void)
            .collect();
        let _span = tracing::trace_span!(
            "kernel",
            name = function.name,
            grid = config.grid,
            block = config.block
        )
        .entered();
        // SAFETY: by the caller's contract; `storage` outlives the call, which copies the
        // arguments before returning.
        let code = unsafe {
            ffi::cuLaunchKernel(
                function.raw,
                config.grid,
                1,
                1,
                config.block,
                1,
                1,
                config.shared_bytes,
                stream.raw(),
                pointers.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        check(code, &format!("launching kernel `{}`", function.name))
    }
}

/// Loads a module compiled ahead of time (an ELF image for this GPU's architecture).
fn load_binary(name: &str, image: &[u8]) -> Result<Module> {
    // The driver parses the image in place: give it 8-byte alignment, which the bytes embedded
    // in the program need not have.
    let mut aligned = vec![0u64; image.len().div_ceil(8)];
    // SAFETY: `aligned` holds at least `image.len()` bytes; the two do not overlap.
    unsafe {
        ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr() as *mut u8, image.len())
    };
    let mut module: CUmodule = ptr::null_mut();
    // SAFETY: the image is a complete cubin that outlives the call; the module goes to a local.
    check(
        unsafe {
            ffi::cuModuleLoadDataEx(
                &mut module,
                aligned.as_ptr() as *const c_void,
                0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
        &format!("loading the sm_90 binary of kernel module `{name}`"),
    )?;
    Ok(Module(module))
}

/// A pause of a device's warm-up ([`Gpu::pause_warm_up`]), over when dropped.
pub struct WarmUpPause<'g> {
    gpu: &'g Gpu,
}

impl Drop for WarmUpPause<'_> {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.gpu
            .resumed_at
            .store(micros_since_epoch(), Ordering::Release);
        self.gpu.paused.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long the warm-up waits after a pause ends before its next step: longer than the gap
/// between a program's calls, so that calls made one after another do not meet its steps.
pub const WARM_UP_QUIET: std::time::Duration = std::time::Duration::from_millis(20);

/// [`Gpu`]'s `resumed_at` before any pause.
const NEVER_PAUSED: u64 = u64::MAX;

/// Microseconds since the first time this was asked (a clock for [`Gpu::may_warm_up`]).
fn micros_since_epoch() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_micros() as u64
}

/// Device memory [`Gpu::warm_up`] takes from the stream-ordered pool and gives back, so
/// that the pool holds it mapped: what the first calls' operands and work buffers take.
pub const WARM_POOL_BYTES: u64 = 256 << 20;

/// The kernels a module's PTX defines (its `.entry` directives).
fn kernel_names(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let line = line.trim_start();
        let rest = line
            .strip_prefix(".visible .entry ")
            .or_else(|| line.strip_prefix(".entry "))?;
        let name = rest.split(['(', ' ']).next()?.trim();
        (!name.is_empty()).then_some(name)
    })
}

fn load_module(name: &str, ptx: &str) -> Result<Module> {
    let image = CString::new(ptx).map_err(|_| Error::Internal {
        backend: BACKEND,
        what: format!("loading kernel module `{name}`: the embedded PTX contains a NUL byte"),
    })?;
    let mut log = vec![0u8; 8192];
    let mut options = [
        ffi::CU_JIT_ERROR_LOG_BUFFER,
        ffi::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut module: CUmodule = ptr::null_mut();
    // SAFETY: the image is NUL-terminated PTX; the log buffer outlives the call and its size
    // is passed by value in the pointer slot, as the JIT option API wants.
    let code = unsafe {
        ffi::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr() as *const c_void,
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if code != ffi::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let jit_log = String::from_utf8_lossy(&log[..end]).trim().to_string();
        let base = from_code(code, &format!("loading kernel module `{name}`"));
        return Err(match base {
            Error::Device {
                backend,
                context,
                message,
                fault,
                source,
            } if !jit_log.is_empty() => Error::Device {
                backend,
                context,
                message: format!("{message}; JIT log: {jit_log}"),
                fault,
                source,
            },
            other => other,
        });
    }
    Ok(Module(module))
}

/// A non-blocking stream (it does not synchronise with the legacy default stream).
///
/// A handle: clones name the same stream, which is destroyed with the last of them. Device
/// buffers keep a clone of every stream that used them, so that their free can still be
/// ordered behind that work after the caller's handle is gone.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<RawStream>,
}

/// The driver's stream, destroyed once.
struct RawStream(CUstream);

// SAFETY: stream handles may be used from any thread with the context current.
unsafe impl Send for RawStream {}
unsafe impl Sync for RawStream {}

impl Stream {
    /// A new stream on the current context.
    pub fn new() -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: creates a stream into a local.
        check(
            unsafe { ffi::cuStreamCreate(&mut raw, ffi::CU_STREAM_NON_BLOCKING) },
            "creating a stream",
        )?;
        Ok(Stream {
            inner: Arc::new(RawStream(raw)),
        })
    }
    /// Waits for everything queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid stream.
        check(
            unsafe { ffi::cuStreamSynchronize(self.raw()) },
            "waiting for a stream",
        )
    }
    /// Makes later work on this stream wait for `event`.
    pub fn wait(&self, event: &Event) -> Result<()> {
        // SAFETY: valid stream and event.
        check(
            unsafe { ffi::cuStreamWaitEvent(self.raw(), event.raw, 0) },
            "making a stream wait for an event",
        )
    }
    /// Whether `other` is the same driver stream (a clone of this one).
    pub fn is(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
    pub(crate) fn raw(&self) -> CUstream {
        self.inner.0
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: created by cuStreamCreate, destroyed once; pending work still completes.
        unsafe { ffi::cuStreamDestroy_v2(self.0) };
    }
}

/// A stream on loan from a [`Gpu`]'s pool (see [`Gpu::stream`]).
pub struct StreamLease<'g> {
    stream: Option<Arc<Stream>>,
    gpu: &'g Gpu,
}

impl Deref for StreamLease<'_> {
    type Target = Arc<Stream>;
    fn deref(&self) -> &Arc<Stream> {
        self.stream.as_ref().expect("present until drop")
    }
}

impl Drop for StreamLease<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            let mut free = self.gpu.streams.lock().unwrap_or_else(|p| p.into_inner());
            if free.len() < STREAM_POOL_KEEP {
                free.push(s);
            }
        }
    }
}

/// A point in a stream that the host or other streams can wait for.
pub struct Event {
    raw: CUevent,
}

// SAFETY: event handles may be used from any thread with the context current.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    /// A new event; `timing` enables [`Event::elapsed_ms`].
    pub fn new(timing: bool) -> Result<Self> {
        let flags = if timing {
            ffi::CU_EVENT_DEFAULT
        } else {
            ffi::CU_EVENT_DISABLE_TIMING
        };
        let mut raw = ptr::null_mut();
        // SAFETY: creates an event into a local.
        check(
            unsafe { ffi::cuEventCreate(&mut raw, flags) },
            "creating an event",
        )?;
        Ok(Event { raw })
    }
    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: valid event and stream.
        check(
            unsafe { ffi::cuEventRecord(self.raw, stream.raw()) },
            "recording an event",
        )
    }
    /// Waits on the host until the event has happened.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid event.
        check(
            unsafe { ffi::cuEventSynchronize(self.raw) },
            "waiting for an event",
        )
    }
    /// Whether the work before the event has completed (an event never recorded has).
    pub fn is_done(&self) -> bool {
        // SAFETY: valid event.
        unsafe { ffi::cuEventQuery(self.raw) != ffi::CUDA_ERROR_NOT_READY }
    }
    pub(crate) fn raw(&self) -> CUevent {
        self.raw
    }
    /// Milliseconds between `start` and this event (both recorded with timing).
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32> {
        let mut ms = 0.0f32;
        // SAFETY: valid events.
        check(
            unsafe { ffi::cuEventElapsedTime(&mut ms, start.raw, self.raw) },
            "timing between events",
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        unsafe { ffi::cuEventDestroy_v2(self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_module_names_its_kernels() {
        let ptx =
            ".visible .entry scale_rows(\n\t.param .u64 a\n)\n.entry helper (\n.func not_a_kernel(";
        assert_eq!(
            kernel_names(ptx).collect::<Vec<_>>(),
            ["scale_rows", "helper"]
        );
        for module in MODULES {
            let names: Vec<&str> = kernel_names(module.ptx).collect();
            assert!(!names.is_empty(), "module {} lists no kernels", module.name);
            assert!(
                names.iter().all(|n| n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')),
                "{names:?}"
            );
        }
    }
}

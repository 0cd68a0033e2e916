//! The OpenCL objects behind a backend: one context per device shared by every backend in the
//! process, programs compiled once per (device, variant) and cached, and typed helpers for
//! buffers and kernel launches that return errors instead of panicking.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device as ClDevice;
use opencl3::error_codes::ClError;
use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::{cl_device_id, cl_mem, CL_BLOCKING};

use hetsparse_core::backend::MemorySpace;
use hetsparse_core::{
    ChunkTiming, DeviceFault, Error, MemoryPool, Result, RunControl, ScalarType, SemiringKind,
};

use crate::device::DeviceDescription;
use crate::BACKEND;

/// Which program, the key of a context's program cache: each is compiled on first use, once
/// per context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Variant {
    /// The scalar kernels (ESC, SpMV, SpMM) of a type over a semiring (SpMV, SpMM and plans
    /// use plus-times' alone).
    Scalar(ScalarType, SemiringKind),
    /// The block SpGEMM kernels of a type (plus-times).
    Block(ScalarType),
    /// The masked SpGEMM kernels of a type over a semiring.
    Masked(ScalarType, SemiringKind),
}

type ProgramSlot = Arc<OnceLock<std::result::Result<Arc<Program>, String>>>;

/// A device with its context and program cache, shared by every backend on that device.
///
/// Resident matrices hold an `Arc` of the state their buffers were made in: the context (and
/// with it the memory space) lives as long as any of its buffers, whatever queue made them.
///
/// Fields drop in order: programs and buffers before the context they belong to.
pub(crate) struct DeviceState {
    pub(crate) description: DeviceDescription,
    pub(crate) id: cl_device_id,
    /// Which context this is, unique in the process: the id of the memory space.
    pub(crate) serial: u64,
    programs: Mutex<HashMap<Variant, ProgramSlot>>,
    /// Programs compiled in this context so far (failed builds included): what shows that
    /// the cache compiles each variant once.
    builds: AtomicU64,
    staging: Mutex<Option<Staging>>,
    /// Command queues whose work finished, for the next calls (see [`IdleObjects`]).
    idle_queues: Mutex<Vec<(bool, CommandQueue)>>,
    /// Kernel objects not in use, by program and name.
    idle_kernels: Mutex<HashMap<(usize, &'static str), Vec<Kernel>>>,
    pool: Mutex<BufferPool>,
    /// The in-order queue of operations that return before their kernels finish (see
    /// [`Stream`]), made on first use.
    stream: Mutex<Option<Stream>>,
    /// The device's memory, shared by every backend on the device, whatever its context: each
    /// backend's own pool (its budget) reserves from this one too.
    pub(crate) device_memory: Arc<MemoryPool>,
    pub(crate) context: Context,
}

/// Device buffers kept between calls for reuse, by capacity. Creating and releasing the dozen
/// buffers of a product cost NVIDIA's OpenCL about 1 ms per call (allocation happens on first
/// use, release took 0.57 ms on the road class), which is most of a small product's time.
/// Only buffers up to [`POOL_MAX_BUFFER`] are kept, at power-of-two capacities, and at most
/// [`POOL_LIMIT`] bytes in all (a sixteenth of the device's memory on small devices), so idle
/// memory stays small beside what a product may use.
struct BufferPool {
    free: HashMap<usize, Vec<Buffer<u8>>>,
    bytes: usize,
    limit: usize,
}

/// Largest buffer the pool keeps.
const POOL_MAX_BUFFER: usize = 64 << 20;
/// Most bytes the pool keeps.
const POOL_LIMIT: usize = 256 << 20;
/// Smallest capacity class.
const POOL_MIN_BUFFER: usize = 64 << 10;

/// The capacity a buffer of `bytes` gets when it is pooled, or `None` when it is too large.
fn pool_class(bytes: usize) -> Option<usize> {
    (bytes <= POOL_MAX_BUFFER).then(|| bytes.max(POOL_MIN_BUFFER).next_power_of_two())
}

impl BufferPool {
    fn new(device_memory: u64) -> Self {
        let sixteenth = usize::try_from(device_memory / 16).unwrap_or(usize::MAX);
        BufferPool {
            free: HashMap::new(),
            bytes: 0,
            limit: POOL_LIMIT.min(sixteenth),
        }
    }

    fn take(&mut self, class: usize) -> Option<Buffer<u8>> {
        let b = self.free.get_mut(&class)?.pop()?;
        self.bytes -= class;
        Some(b)
    }

    /// Keeps `b` if there is room; otherwise it is released.
    fn put(&mut self, class: usize, b: Buffer<u8>) {
        if self.bytes + class <= self.limit {
            self.bytes += class;
            self.free.entry(class).or_default().push(b);
        }
    }
}

// SAFETY: cl_device_id is an opaque handle that OpenCL allows to be used from any thread.
unsafe impl Send for DeviceState {}
unsafe impl Sync for DeviceState {}

/// A device failure of kind [`DeviceFault::Other`] without an OpenCL code.
pub(crate) fn device_error(context: impl Into<String>, e: impl std::fmt::Display) -> Error {
    Error::device(BACKEND, context, e.to_string())
}

/// An OpenCL status code, kept as the source of [`Error::Device`].
#[derive(Debug, thiserror::Error)]
#[error("OpenCL status {code} ({text})")]
pub(crate) struct ClStatus {
    code: i32,
    text: String,
}

/// Whether an OpenCL status says the device or its context is gone (a queue or context no
/// longer valid, the device unavailable, or commands aborted by an earlier fault).
fn device_lost(code: i32) -> bool {
    use opencl3::error_codes::{
        CL_DEVICE_NOT_AVAILABLE, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
        CL_INVALID_COMMAND_QUEUE, CL_INVALID_CONTEXT,
    };
    matches!(
        code,
        CL_INVALID_COMMAND_QUEUE
            | CL_INVALID_CONTEXT
            | CL_DEVICE_NOT_AVAILABLE
            | CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
    )
}

/// Whether an OpenCL status says memory ran out on the device.
fn out_of_memory(code: i32) -> bool {
    use opencl3::error_codes::{CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES};
    matches!(code, CL_OUT_OF_RESOURCES | CL_MEM_OBJECT_ALLOCATION_FAILURE)
}

fn status_error(context: String, e: ClError, fault: DeviceFault) -> Error {
    let fault = if device_lost(e.0) {
        DeviceFault::DeviceLost
    } else {
        fault
    };
    Error::Device {
        backend: BACKEND,
        context,
        message: e.to_string(),
        fault,
        source: Some(Box::new(ClStatus {
            code: e.0,
            text: e.to_string(),
        })),
    }
}

/// A failed OpenCL call: [`DeviceFault::DeviceLost`] for a lost queue, context or device,
/// [`DeviceFault::Other`] otherwise.
pub(crate) fn cl_error(context: impl Into<String>, e: ClError) -> Error {
    status_error(context.into(), e, DeviceFault::Other)
}

/// A failed kernel launch: [`DeviceFault::LaunchFailed`] unless the device is gone.
pub(crate) fn launch_error(context: impl Into<String>, e: ClError) -> Error {
    status_error(context.into(), e, DeviceFault::LaunchFailed)
}

/// A failed allocation of `needed` bytes: [`Error::OutOfMemory`] when the device ran out
/// (`available`: what the device may still have), a device error otherwise (a size above the
/// device's largest buffer, ...).
pub(crate) fn alloc_error(what: &str, needed: u64, available: u64, e: ClError) -> Error {
    if out_of_memory(e.0) {
        Error::OutOfMemory {
            backend: BACKEND,
            what: format!("{what} ({e})"),
            needed_bytes: needed,
            available_bytes: available,
        }
    } else {
        cl_error(format!("allocating {needed} bytes for {what}"), e)
    }
}

/// The shared state of the device `id`, created on first use.
pub(crate) fn device_state(
    id: crate::device::DeviceId,
    description: DeviceDescription,
) -> Result<Arc<DeviceState>> {
    static STATES: OnceLock<Mutex<HashMap<usize, Arc<DeviceState>>>> = OnceLock::new();
    let states = STATES.get_or_init(Default::default);
    let mut states = states
        .lock()
        .map_err(|_| device_error("device registry", "a thread panicked while holding it"))?;
    let id = id.0;
    if let Some(s) = states.get(&(id as usize)) {
        return Ok(s.clone());
    }
    let state = new_context(crate::device::DeviceId(id), description)?;
    states.insert(id as usize, state.clone());
    Ok(state)
}

/// The pool of device `id`'s memory, one per device in the process: contexts of their own on
/// one device still share its memory.
fn device_memory(id: usize, bytes: u64) -> Result<Arc<MemoryPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<MemoryPool>>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Default::default).lock().map_err(|_| {
        device_error(
            "device memory registry",
            "a thread panicked while holding it",
        )
    })?;
    Ok(Arc::clone(
        pools
            .entry(id)
            .or_insert_with(|| MemoryPool::new(BACKEND, bytes)),
    ))
}

/// A state with a context of its own on device `id`, not shared through the registry: its
/// buffers form a memory space of their own (its memory is the device's, shared).
pub(crate) fn new_context(
    id: crate::device::DeviceId,
    description: DeviceDescription,
) -> Result<Arc<DeviceState>> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let id = id.0;
    let context = Context::from_device(&ClDevice::new(id))
        .map_err(|e| cl_error(format!("creating a context on {}", description.name), e))?;
    let memory = description.global_memory_bytes;
    let device_memory = device_memory(id as usize, memory)?;
    Ok(Arc::new(DeviceState {
        device_memory,
        description,
        id,
        context,
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        programs: Mutex::new(HashMap::new()),
        builds: AtomicU64::new(0),
        staging: Mutex::new(None),
        idle_queues: Mutex::new(Vec::new()),
        idle_kernels: Mutex::new(HashMap::new()),
        pool: Mutex::new(BufferPool::new(memory)),
        stream: Mutex::new(None),
    }))
}

impl DeviceState {
    /// The program of `variant`, compiled on first use with `source` (built by the caller only
    /// then). Concurrent callers of the same variant wait for one compilation.
    pub(crate) fn program(
        &self,
        variant: Variant,
        source: impl FnOnce() -> String,
    ) -> Result<Arc<Program>> {
        let slot = {
            let mut programs = self
                .programs
                .lock()
                .map_err(|_| device_error("program cache", "a thread panicked while holding it"))?;
            programs.entry(variant).or_default().clone()
        };
        let built = slot.get_or_init(|| {
            self.builds.fetch_add(1, Ordering::Relaxed);
            let _span =
                tracing::info_span!("compile", ?variant, device = %self.description.name).entered();
            let src = source();
            let mut program = Program::create_from_source(&self.context, &src)
                .map_err(|e| format!("clCreateProgramWithSource: {e}"))?;
            match program.build(&[self.id], "-cl-std=CL1.2") {
                Ok(()) => Ok(Arc::new(program)),
                Err(e) => {
                    let log = program.get_build_log(self.id).unwrap_or_default();
                    Err(format!("build failed ({e}); build log:\n{log}"))
                }
            }
        });
        built
            .clone()
            .map_err(|msg| device_error(format!("compiling the {variant:?} kernels"), msg))
    }

    /// How many programs this context has compiled.
    #[cfg(test)]
    pub(crate) fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// Whether the program of `variant` is compiled (or its build failed) in this context.
    #[cfg(test)]
    pub(crate) fn is_cached(&self, variant: Variant) -> bool {
        self.programs
            .lock()
            .map(|p| p.get(&variant).is_some_and(|slot| slot.get().is_some()))
            .unwrap_or(false)
    }

    /// The memory space of this context's buffers.
    pub(crate) fn space(&self) -> MemorySpace {
        MemorySpace::Device {
            backend: BACKEND,
            id: self.serial,
        }
    }

    /// A new in-order queue; each operation uses its own, so that threads do not wait on each
    /// other's work.
    pub(crate) fn queue(&self) -> Result<Queue<'_>> {
        self.queue_with(false)
    }

    /// A new in-order queue with profiling on: [`Queue::timing`] tells what its commands cost.
    pub(crate) fn timed_queue(&self) -> Result<Queue<'_>> {
        self.queue_with(true)
    }

    fn queue_with(&self, timed: bool) -> Result<Queue<'_>> {
        let _span = tracing::debug_span!("queue create").entered();
        let profile = timed || tracing::enabled!(target: KERNEL_TIMES, tracing::Level::DEBUG);
        let reused = {
            let mut idle = self
                .idle_queues
                .lock()
                .map_err(|_| poisoned("idle queues"))?;
            let at = idle.iter().rposition(|(p, _)| *p == profile);
            at.map(|at| idle.swap_remove(at).1)
        };
        let queue = match reused {
            Some(q) => q,
            None => {
                let properties = if profile {
                    opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE
                } else {
                    0
                };
                #[allow(deprecated)] // clCreateCommandQueue is the call every OpenCL 1.2 device has
                CommandQueue::create_default(&self.context, properties)
                    .map_err(|e| cl_error("creating a command queue", e))?
            }
        };
        Ok(Queue {
            queue: std::mem::ManuallyDrop::new(queue),
            idle_queues: &self.idle_queues,
            idle_kernels: &self.idle_kernels,
            context: &self.context,
            staging: &self.staging,
            pool: &self.pool,
            pooled: std::cell::RefCell::new(Vec::new()),
            free_estimate: self.description.global_memory_bytes,
            timing: std::cell::Cell::new(Timing::default()),
            transfers: std::cell::RefCell::new(Vec::new()),
            retired: std::cell::RefCell::new(Vec::new()),
            profile,
            launched: std::cell::RefCell::new(Vec::new()),
            recycled: None,
        })
    }

    /// Runs `f` on the device's [`Stream`] and returns as soon as its commands are queued,
    /// with the event of the last kernel it launched (`None` when it launched none): what its
    /// results wait for before any other queue reads them ([`Ready::wait`]).
    ///
    /// `f` may only allocate ([`Queue::alloc_kept`]) and launch kernels: the buffers it passes
    /// to them are kept alive ([`Queue::hold`]) until its last kernel completed, and results
    /// it keeps go back to the stream when dropped ([`DeviceState::recycle`]).
    pub(crate) fn on_stream<R>(
        &self,
        f: impl FnOnce(&Queue<'_>) -> Result<R>,
    ) -> Result<(R, Ready)> {
        let mut guard = self.stream.lock().map_err(|_| poisoned("device stream"))?;
        // Profiling costs each call a few microseconds on NVIDIA's OpenCL: the stream profiles
        // only while kernel times are listened to, and is replaced (its commands finished
        // first) when that changes.
        let profiled = tracing::enabled!(target: KERNEL_TIMES, tracing::Level::DEBUG);
        let mut stream = match guard.take() {
            Some(s) if s.profiled == profiled => s,
            _ => Stream::new(&self.context, profiled)?,
        };
        let pruned = stream.prune();
        let recycled = RefCell::new(std::mem::take(&mut stream.free));
        let q = Queue {
            // An alias of the stream's queue, never released through this wrapper (the
            // field is not taken back in `drop`).
            queue: std::mem::ManuallyDrop::new(CommandQueue::new(
                stream.queue.get(),
                stream.queue.max_work_item_dimensions(),
            )),
            idle_queues: &self.idle_queues,
            idle_kernels: &self.idle_kernels,
            context: &self.context,
            staging: &self.staging,
            pool: &self.pool,
            pooled: RefCell::new(Vec::new()),
            free_estimate: self.description.global_memory_bytes,
            timing: std::cell::Cell::new(Timing::default()),
            transfers: RefCell::new(Vec::new()),
            retired: RefCell::new(Vec::new()),
            // Every launch's event is kept (profiled or not): the last one is what the
            // results wait for.
            profile: true,
            launched: RefCell::new(Vec::new()),
            recycled: Some(&recycled),
        };
        let result = pruned.and_then(|()| f(&q));
        let launched = q.launched.take();
        let held = q.retired.take();
        // Submitted now rather than when the queue next blocks.
        let flushed = q
            .queue
            .flush()
            .map_err(|e| cl_error("submitting the stream's commands", e));
        drop(q);
        stream.free = recycled.into_inner();
        let ready = match launched.last() {
            Some((_, e)) => Ready(Some(retained_event(e)?)),
            None => Ready(None),
        };
        stream.queue_done(launched, held);
        *guard = Some(stream);
        let r = result?;
        flushed?;
        Ok((r, ready))
    }

    /// Lets go of what the stream's completed commands hold: after a result of the stream
    /// was waited for, so that operands dropped meanwhile are released now, not some calls
    /// later.
    pub(crate) fn settle_stream(&self) -> Result<()> {
        let mut guard = self.stream.lock().map_err(|_| poisoned("device stream"))?;
        match guard.as_mut() {
            Some(stream) => stream.settle(),
            None => Ok(()),
        }
    }

    /// Takes back the buffer of a result made on the stream whose handle is being dropped:
    /// kept for later commands of the stream, which run after every command queued before
    /// (those that still read or write it included), or else held until those finished.
    pub(crate) fn recycle(&self, b: &DeviceBuffer<u8>) {
        let Ok(mut guard) = self.stream.lock() else {
            return;
        };
        let Some(stream) = guard.as_mut() else {
            return;
        };
        // SAFETY: a valid buffer; the retain is matched by the drop of the wrapper made here.
        if unsafe { opencl3::memory::retain_mem_object(b.mem()) }.is_err() {
            return;
        }
        let buffer = Buffer::<u8>::new(b.mem());
        let bytes = b.bytes().max(1);
        let kept: usize = stream.free.iter().map(|(n, _)| n).sum();
        if stream.free.len() < IDLE_OBJECTS && kept + bytes <= POOL_LIMIT {
            stream.free.push((bytes, buffer));
        } else if let Some(last) = stream.in_flight.back_mut() {
            last.held.push(buffer);
        }
        // Otherwise nothing queued can use it any more: released here.
    }
}

/// Most entries the stream keeps in flight before a call waits for the oldest.
const STREAM_IN_FLIGHT: usize = 256;
/// Entries in flight below which a call does not ask which completed: asking costs about as
/// much as a small kernel's launch. The buffers they hold stay alive a few calls longer (or
/// until a result of the stream is waited for).
const STREAM_PRUNE_AT: usize = 8;

/// The device's ordered stream: one in-order queue, shared by every backend on the device, for
/// the operations whose operands and result all stay on the device (SpMV and SpMM). Such a
/// call returns once its kernel is queued: in a solver loop it costs a launch, not a wait for
/// the device and an allocation (on NVIDIA's OpenCL both cost about as much as a stencil's
/// SpMV kernel). Its result carries the event of the kernel that writes it, which other queues
/// wait for; its buffer, once the handle is dropped, is reused only by later commands of this
/// queue, which run after every earlier use of it.
struct Stream {
    queue: CommandQueue,
    /// Whether the queue profiles its commands (for [`KERNEL_TIMES`]).
    profiled: bool,
    /// Commands that may still run, oldest first, each with the buffers it uses: references
    /// held until its last kernel completed, so that an operand dropped meanwhile stays valid
    /// for it.
    in_flight: VecDeque<InFlight>,
    /// Buffers of dropped results.
    free: FreeBuffers,
}

/// One call's commands on the stream.
struct InFlight {
    launched: Vec<(&'static str, Event)>,
    held: Vec<Buffer<u8>>,
}

impl InFlight {
    fn done(&self) -> Result<bool> {
        match self.launched.last() {
            None => Ok(true),
            Some((name, e)) => {
                let status = e
                    .command_execution_status()
                    .map_err(|e| cl_error(format!("querying kernel {name}"), e))?;
                if status.0 < 0 {
                    return Err(launch_error(
                        format!("kernel {name} on the device's stream"),
                        ClError(status.0),
                    ));
                }
                Ok(status.0 == opencl3::event::CL_COMPLETE)
            }
        }
    }

    /// Reports the kernels' device times (all completed).
    fn report(&self) {
        if tracing::enabled!(target: KERNEL_TIMES, tracing::Level::DEBUG) {
            for (kernel, event) in &self.launched {
                if let Some(ns) = device_ns(event) {
                    tracing::debug!(target: KERNEL_TIMES, kernel, device_ns = ns);
                }
            }
        }
    }
}

impl Stream {
    fn new(context: &Context, profiled: bool) -> Result<Stream> {
        let properties = if profiled {
            opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE
        } else {
            0
        };
        #[allow(deprecated)] // clCreateCommandQueue is the call every OpenCL 1.2 device has
        let queue = CommandQueue::create_default(context, properties)
            .map_err(|e| cl_error("creating the device's stream", e))?;
        Ok(Stream {
            queue,
            profiled,
            in_flight: VecDeque::new(),
            free: Vec::new(),
        })
    }

    /// Drops the entries whose commands completed (an in-order queue completes them in
    /// order) once [`STREAM_PRUNE_AT`] are in flight, waiting for the oldest while more than
    /// [`STREAM_IN_FLIGHT`] are.
    fn prune(&mut self) -> Result<()> {
        if self.in_flight.len() < STREAM_PRUNE_AT {
            return Ok(());
        }
        self.settle()
    }

    /// Drops every entry whose commands completed.
    fn settle(&mut self) -> Result<()> {
        while let Some(first) = self.in_flight.front() {
            let done = if self.in_flight.len() > STREAM_IN_FLIGHT {
                match first.launched.last() {
                    Some((name, e)) => e
                        .wait()
                        .map_err(|e| cl_error(format!("waiting for kernel {name}"), e))
                        .and_then(|()| first.done()),
                    None => Ok(true),
                }
            } else {
                first.done()
            };
            match done {
                Ok(false) => break,
                Ok(true) => {
                    if let Some(entry) = self.in_flight.pop_front() {
                        entry.report();
                    }
                }
                // Reported once, to the call that found it; the calls after it go on.
                Err(e) => {
                    self.in_flight.pop_front();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Records a call's commands; buffers of a call that launched nothing are held by the
    /// latest entry instead (commands queued before may still use them).
    fn queue_done(&mut self, launched: Vec<(&'static str, Event)>, held: Vec<Buffer<u8>>) {
        if !launched.is_empty() {
            self.in_flight.push_back(InFlight { launched, held });
        } else if let Some(last) = self.in_flight.back_mut() {
            last.held.extend(held);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Nothing to report an error to; the held buffers go after their commands.
        let _ = self.queue.finish();
    }
}

/// A second handle to `e`.
fn retained_event(e: &Event) -> Result<Event> {
    // SAFETY: a valid event; the retain is matched by the drop of the handle made here.
    unsafe { opencl3::event::retain_event(e.get()) }
        .map_err(|c| cl_error("retaining an event", ClError(c)))?;
    Ok(Event::new(e.get()))
}

/// When a result made on the device's stream is complete: the event of the last kernel that
/// writes it (none for results made on a queue of their own, complete when handed out).
#[derive(Default)]
pub(crate) struct Ready(Option<Event>);

impl Ready {
    /// Whether the result comes from the stream (and may still be computed).
    pub(crate) fn is_pending(&self) -> bool {
        self.0.is_some()
    }

    /// Blocks until the result is complete: before a queue other than the stream reads it.
    pub(crate) fn wait(&self) -> Result<()> {
        match &self.0 {
            None => Ok(()),
            Some(e) => {
                e.wait()
                    .map_err(|e| cl_error("waiting for a result of the device's stream", e))?;
                let status = e
                    .command_execution_status()
                    .map_err(|e| cl_error("querying a result of the device's stream", e))?;
                if status.0 < 0 {
                    return Err(launch_error(
                        "a kernel of the device's stream",
                        ClError(status.0),
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Bytes of each slot of the pinned staging buffer. Transfers cycle through the slots, so
/// while the device fills (or empties) some, the host copies out of (or into) another: with
/// two halves of 16 MiB a 13 MB result sat in one half and its copy-out overlapped nothing.
const STAGING_SLOT: usize = 4 << 20;
/// Slots of the staging buffer (32 MiB in all).
const STAGING_SLOTS: usize = 8;

/// Pinned (page-locked) host memory for transfers, allocated and mapped once per device:
/// reads and writes from ordinary pageable memory ran at about 1.4 GB/s on NVIDIA's OpenCL,
/// through pinned memory the DMA runs at full speed and only a host copy remains.
pub(crate) struct Staging {
    /// The queue the buffer was mapped with; it stays mapped for the process.
    _queue: CommandQueue,
    _buffer: Buffer<u8>,
    ptr: *mut u8,
}

// SAFETY: the mapped pointer is only used under the device's staging mutex.
unsafe impl Send for Staging {}

impl Drop for Staging {
    /// Unmaps the buffer before it is released (only states of a context of their own, see
    /// [`new_context`], are ever dropped).
    fn drop(&mut self) {
        // SAFETY: `ptr` is the mapping of `_buffer` made on `_queue`; nothing uses it after
        // the state that owns the staging buffer is dropped.
        let unmapped = unsafe {
            self._queue
                .enqueue_unmap_mem_object(self._buffer.get(), self.ptr.cast(), &[])
        };
        // Nothing to report an error to here; a failed unmap leaves the mapping to OpenCL.
        if unmapped.is_ok() {
            let _ = self._queue.finish();
        }
    }
}

impl Staging {
    fn get<'s>(slot: &'s mut Option<Staging>, context: &Context) -> Result<&'s Staging> {
        if slot.is_none() {
            *slot = Some(Staging::new(context)?);
        }
        slot.as_ref()
            .ok_or_else(|| device_error("staging buffer", "missing after creation"))
    }

    fn new(context: &Context) -> Result<Staging> {
        let fail = |e| cl_error("allocating pinned staging memory", e);
        #[allow(deprecated)] // clCreateCommandQueue is the call every OpenCL 1.2 device has
        let queue = CommandQueue::create_default(context, 0).map_err(fail)?;
        // SAFETY: no host pointer is passed; the runtime allocates pinned memory.
        let buffer = unsafe {
            Buffer::<u8>::create(
                context,
                CL_MEM_READ_WRITE | opencl3::memory::CL_MEM_ALLOC_HOST_PTR,
                STAGING_SLOTS * STAGING_SLOT,
                ptr::null_mut(),
            )
        }
        .map_err(fail)?;
        let mut mapped: cl_mem = ptr::null_mut();
        // SAFETY: a blocking map of the whole buffer; the pointer stays valid while mapped.
        unsafe {
            queue.enqueue_map_buffer(
                &buffer,
                CL_BLOCKING,
                opencl3::memory::CL_MAP_READ | opencl3::memory::CL_MAP_WRITE,
                0,
                STAGING_SLOTS * STAGING_SLOT,
                &mut mapped,
                &[],
            )
        }
        .map_err(fail)?;
        if mapped.is_null() {
            return Err(device_error(
                "mapping pinned staging memory",
                "null pointer",
            ));
        }
        Ok(Staging {
            _queue: queue,
            _buffer: buffer,
            ptr: mapped.cast::<u8>(),
        })
    }

    /// Bytes `at..at + len` of slot `h`.
    #[allow(clippy::mut_from_ref)] // callers hold the staging mutex and use disjoint ranges
    fn range(&self, h: usize, at: usize, len: usize) -> &mut [u8] {
        assert!(
            h < STAGING_SLOTS && at + len <= STAGING_SLOT,
            "staging range out of bounds"
        );
        // SAFETY: the mapping holds STAGING_SLOTS * STAGING_SLOT bytes (checked above);
        // callers hold the staging mutex and never touch a range that a queued transfer still
        // uses.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(h * STAGING_SLOT + at), len) }
    }
}

/// `dst.copy_from_slice(src)` on several threads for large copies, with streaming stores
/// ([`hetsparse_core::host::copy_streaming`]): the fresh pages of a result being written fault
/// in one at a time, and on a GPU host a single thread copied results out of the staging
/// buffer at about 1.5 GB/s.
fn parallel_copy(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    use hetsparse_core::host::copy_streaming;
    use rayon::prelude::*;
    // Rayon's threads live across calls: spawning threads per copy cost about 20 µs each,
    // which added up over the hundreds of staging slots of a large result.
    const PER_TASK: usize = 512 << 10;
    if dst.len() <= PER_TASK || rayon::current_num_threads() <= 1 {
        copy_streaming(dst, src);
        return;
    }
    dst.par_chunks_mut(PER_TASK)
        .zip(src.par_chunks(PER_TASK))
        .for_each(|(d, s)| copy_streaming(d, s));
}

fn poisoned(what: &str) -> Error {
    device_error(what, "a thread panicked while holding it")
}

/// The bytes of plain data.
fn plain_bytes<T: Plain>(data: &[T]) -> &[u8] {
    // SAFETY: Plain types have no padding, so every byte is initialised.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// A command queue with the context its buffers come from.
pub(crate) struct Queue<'a> {
    /// Taken back into `idle_queues` when the queue ends (its work finished).
    queue: std::mem::ManuallyDrop<CommandQueue>,
    idle_queues: &'a Mutex<Vec<(bool, CommandQueue)>>,
    idle_kernels: &'a Mutex<HashMap<(usize, &'static str), Vec<Kernel>>>,
    context: &'a Context,
    staging: &'a Mutex<Option<Staging>>,
    pool: &'a Mutex<BufferPool>,
    /// A reference to every pooled buffer this queue handed out, with its capacity: returned to
    /// the pool when the queue ends (after its commands finished) if nothing else holds it.
    pooled: std::cell::RefCell<Vec<(usize, Buffer<u8>)>>,
    /// What the device may have free at most, for out-of-memory errors.
    free_estimate: u64,
    /// Device times (when profiling) and bytes of the commands that completed.
    timing: std::cell::Cell<Timing>,
    /// Transfers whose device time is still to be read (when profiling).
    transfers: std::cell::RefCell<Vec<(bool, opencl3::event::Event)>>,
    /// A second reference to every buffer allocated since the queue last drained. OpenCL defers
    /// the release of a buffer until the commands using it finish, but with PoCL 3.1 dropping
    /// buffers that queued kernels still used crashed under load; these references keep them
    /// until a blocking read (or the queue's end) shows that every earlier command finished.
    retired: std::cell::RefCell<Vec<Buffer<u8>>>,
    /// Whether kernel times are reported (a subscriber listens to [`KERNEL_TIMES`]).
    profile: bool,
    /// Kernels launched since the queue last drained, with their events, when profiling.
    launched: std::cell::RefCell<Vec<(&'static str, opencl3::event::Event)>>,
    /// On the device's [`Stream`]: the buffers of dropped results, which allocations take
    /// first (and which nothing else may use); `None` on a queue of its own.
    recycled: Option<&'a RefCell<FreeBuffers>>,
}

/// Buffers of dropped results of the device's stream, with their sizes in bytes.
type FreeBuffers = Vec<(usize, Buffer<u8>)>;

/// Device time of a completed command of a profiling queue.
fn device_ns(e: &opencl3::event::Event) -> Option<u64> {
    let start = e.profiling_command_start().ok()?;
    let end = e.profiling_command_end().ok()?;
    Some(end.saturating_sub(start))
}

/// What a queue's commands cost: device times in nanoseconds (from event profiling) and bytes
/// copied each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    pub(crate) kernel_ns: u64,
    pub(crate) h2d_ns: u64,
    pub(crate) d2h_ns: u64,
    pub(crate) h2d_bytes: u64,
    pub(crate) d2h_bytes: u64,
}

impl Timing {
    /// As a chunk's timing, with `wall` from the chunk's start to its result.
    pub(crate) fn chunk(self, wall: std::time::Duration) -> ChunkTiming {
        use std::time::Duration;
        let mut t = ChunkTiming::default();
        t.wall = wall;
        t.kernel = Duration::from_nanos(self.kernel_ns);
        t.h2d = Duration::from_nanos(self.h2d_ns);
        t.d2h = Duration::from_nanos(self.d2h_ns);
        t.h2d_bytes = self.h2d_bytes;
        t.d2h_bytes = self.d2h_bytes;
        t
    }
}

/// Tracing target of the per-kernel device times (DEBUG events with fields `kernel` and
/// `device_ns`), reported when the queue drains; queues are created with profiling on only
/// when a subscriber listens to it.
pub const KERNEL_TIMES: &str = "hetsparse_opencl::kernel_times";

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        if self.recycled.is_some() {
            // The stream's alias: the stream keeps the queue, and `on_stream` took what the
            // commands hold.
            return;
        }
        let _span = tracing::debug_span!("queue finish").entered();
        // Nothing to report an error to here; a failing finish leaves the buffers to OpenCL.
        let finished = self.queue.finish().is_ok();
        self.retired.get_mut().clear();
        let pooled = std::mem::take(self.pooled.get_mut());
        if let Ok(mut pool) = self.pool.lock() {
            for (class, b) in pooled {
                // Ours is the only reference left: no DeviceBuffer outlived the queue.
                if b.reference_count().ok() == Some(1) {
                    pool.put(class, b);
                }
            }
        }
        // SAFETY: taken once, here; the field is not used afterwards.
        let queue = unsafe { std::mem::ManuallyDrop::take(&mut self.queue) };
        if finished {
            if let Ok(mut idle) = self.idle_queues.lock() {
                if idle.len() < IDLE_OBJECTS {
                    idle.push((self.profile, queue));
                }
            }
        }
    }
}

/// Queues, and kernel objects of each kernel, kept for reuse at most. Creating a command queue
/// and a kernel object for every call, and releasing them after, is host work on the path of
/// each small operation (a resident SpMV is a single kernel); idle ones cost no device memory.
/// A queue is kept only once its commands finished, and serves one [`Queue`] at a time; a
/// kernel object serves one [`Launch`] at a time (argument setting is not thread-safe on one
/// object), and every launch sets all its arguments again.
const IDLE_OBJECTS: usize = 8;

/// Element types that may cross to the device as they lie in memory.
///
/// # Safety
/// Implementors are plain data without padding or pointers (what `bytemuck::Pod` promises).
pub(crate) unsafe trait Plain: Copy + Send + Sync + 'static {}
unsafe impl Plain for u8 {}
unsafe impl Plain for u32 {}
unsafe impl Plain for u64 {}
unsafe impl Plain for f32 {}
unsafe impl Plain for f64 {}
unsafe impl Plain for hetsparse_core::f16 {}
unsafe impl Plain for hetsparse_core::bf16 {}
unsafe impl Plain for hetsparse_core::Complex<f32> {}
unsafe impl Plain for hetsparse_core::Complex<f64> {}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let _span = tracing::debug_span!("release").entered();
        // SAFETY: dropped once, here; the field is not used afterwards.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.buffer) }
    }
}

/// One array to copy to the device, for [`Queue::write_all`].
pub(crate) struct Upload<'d> {
    dst: cl_mem,
    data: &'d [u8],
}

/// One range of a buffer to copy to the host, for [`Queue::read_all`].
pub(crate) struct Download<'o> {
    src: cl_mem,
    /// Byte offset in the buffer.
    offset: usize,
    out: &'o mut [MaybeUninit<u8>],
}

/// The bytes of `out`, to be overwritten with initialised bytes only.
fn writable_bytes(out: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: same layout; callers only write initialised bytes through the result, so `out`
    // stays initialised.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), out.len()) }
}

/// A vector of `len` elements that a download fills: its memory is not zeroed first (glibc
/// hands out recycled heap memory for arrays up to its mmap threshold, which grows to 32 MiB,
/// and `vec![0; n]` then clears every byte before the copy overwrites it: about 1 ms for the
/// 13 MB of the road product's C).
pub(crate) struct Incoming<T> {
    v: Vec<T>,
    len: usize,
}

impl<T> Incoming<T> {
    pub(crate) fn new(len: usize) -> Self {
        Incoming {
            v: Vec::with_capacity(len),
            len,
        }
    }

    fn piece<'o>(&'o mut self, src: cl_mem, what: &str, available: usize) -> Result<Download<'o>> {
        let bytes = self.len * std::mem::size_of::<T>();
        if bytes > available {
            return Err(device_error(
                format!("reading {what}"),
                format!("{bytes} bytes from a buffer of {available}"),
            ));
        }
        let spare = &mut self.v.spare_capacity_mut()[..self.len];
        // SAFETY: MaybeUninit<T> is as large as T; the bytes of uninitialised elements are
        // themselves uninitialised, which MaybeUninit<u8> allows.
        let out = unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast(), bytes) };
        Ok(Download {
            src,
            offset: 0,
            out,
        })
    }

    /// The vector, once [`Queue::read_all`] returned `Ok` for its piece.
    ///
    /// # Safety
    /// A successful `read_all` of this vector's piece wrote every byte of its `len` elements,
    /// and `T` is plain data (every byte pattern a valid value).
    pub(crate) unsafe fn assume_filled(mut self) -> Vec<T> {
        // SAFETY: per the contract above, the first `len` elements are initialised.
        unsafe { self.v.set_len(self.len) };
        self.v
    }
}

impl<T: Plain> Incoming<T> {
    /// This vector as the download of the first `len` elements of `b`.
    pub(crate) fn piece_of<'o>(
        &'o mut self,
        b: &DeviceBuffer<T>,
        what: &str,
    ) -> Result<Download<'o>> {
        self.piece(b.mem(), what, b.bytes())
    }
}

impl<T: hetsparse_core::Scalar> Incoming<T> {
    /// This vector of scalars as the download of the first bytes of `b`.
    fn piece_of_bytes<'o>(&'o mut self, b: &DeviceBuffer<u8>, what: &str) -> Result<Download<'o>> {
        // The entry points refuse other scalar types first, and `IncomingValues` sends `bool`
        // through bytes; this guards the byte view.
        if !crate::scalar::is_plain_device_scalar::<T>() {
            return Err(device_error(
                format!("reading {what}"),
                "not a plain device scalar type",
            ));
        }
        self.piece(b.mem(), what, b.bytes())
    }
}

/// The `len` scalar values a download fills: read straight into the vector for the plain
/// types, as bytes converted afterwards for `bool` (not every byte is one).
pub(crate) enum IncomingValues<T> {
    /// A plain device scalar type: the download writes the values themselves.
    Plain(Incoming<T>),
    /// `bool`: the download writes its bytes, [`IncomingValues::assume_filled`] converts them.
    Bytes(Incoming<u8>),
}

impl<T: hetsparse_core::Scalar> IncomingValues<T> {
    pub(crate) fn new(len: usize) -> Self {
        if crate::scalar::is_plain_device_scalar::<T>() {
            IncomingValues::Plain(Incoming::new(len))
        } else {
            IncomingValues::Bytes(Incoming::new(len * std::mem::size_of::<T>()))
        }
    }

    /// These values as the download of the first bytes of `b`.
    pub(crate) fn piece_of_bytes<'o>(
        &'o mut self,
        b: &DeviceBuffer<u8>,
        what: &str,
    ) -> Result<Download<'o>> {
        match self {
            IncomingValues::Plain(v) => v.piece_of_bytes(b, what),
            IncomingValues::Bytes(v) => v.piece(b.mem(), what, b.bytes()),
        }
    }

    /// The values, once [`Queue::read_all`] returned `Ok` for their piece.
    ///
    /// # Safety
    /// As [`Incoming::assume_filled`]: a successful `read_all` of this piece wrote all of it.
    pub(crate) unsafe fn assume_filled(self) -> Result<Vec<T>> {
        match self {
            // SAFETY: per the contract above; `Plain` holds a plain device scalar type only.
            IncomingValues::Plain(v) => Ok(unsafe { v.assume_filled() }),
            IncomingValues::Bytes(v) => {
                // SAFETY: per the contract above; u8 is plain data.
                let bytes = unsafe { v.assume_filled() };
                crate::scalar::from_device_bytes(&bytes)
            }
        }
    }
}

/// A device buffer of `len` elements of `T`.
pub(crate) struct DeviceBuffer<T> {
    /// Released in `drop`, under a span: releasing device memory is part of a call's fixed
    /// cost.
    pub(crate) buffer: std::mem::ManuallyDrop<Buffer<T>>,
    pub(crate) len: usize,
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn mem(&self) -> opencl3::types::cl_mem {
        self.buffer.get()
    }

    fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
}

impl<T: Plain> DeviceBuffer<T> {
    /// `data` to be copied to the start of this buffer, which must hold it.
    pub(crate) fn upload_of<'d>(&self, data: &'d [T], what: &str) -> Result<Upload<'d>> {
        if data.len() > self.len {
            return Err(device_error(
                format!("copying {what} to the device"),
                format!("{} elements into a buffer of {}", data.len(), self.len),
            ));
        }
        Ok(Upload {
            dst: self.mem(),
            data: plain_bytes(data),
        })
    }

    /// The first `out.len()` elements of this buffer, to be copied into `out`.
    pub(crate) fn download_into<'o>(&self, out: &'o mut [T], what: &str) -> Result<Download<'o>> {
        self.download_from(0, out, what)
    }

    /// Elements `at..at + out.len()` of this buffer, to be copied into `out`: so that values
    /// from the middle of several buffers come back in one [`Queue::read_all`].
    pub(crate) fn download_from<'o>(
        &self,
        at: usize,
        out: &'o mut [T],
        what: &str,
    ) -> Result<Download<'o>> {
        if at.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return Err(device_error(
                format!("reading {what}"),
                format!(
                    "{} elements from element {at} of a buffer of {}",
                    out.len(),
                    self.len
                ),
            ));
        }
        // SAFETY: T is plain data (Plain), so any bytes written are valid values; only
        // initialised bytes are written.
        let out = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), std::mem::size_of_val(out))
        };
        Ok(Download {
            src: self.mem(),
            offset: at * std::mem::size_of::<T>(),
            out,
        })
    }
}

/// How often a wait for the device looks at the run's cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(5);

/// Set by an event's completion callback, with a condition variable to wake the waiter.
#[derive(Default)]
struct Completion {
    done: Mutex<bool>,
    woken: Condvar,
}

/// The completion callback of [`Queue::finish_or_cancel`]'s marker.
extern "C" fn signal_completion(
    _event: opencl3::types::cl_event,
    _status: opencl3::types::cl_int,
    user_data: *mut c_void,
) {
    // SAFETY: `user_data` is a reference to a `Completion` leaked with `Arc::into_raw` for
    // this callback, which OpenCL calls exactly once (at completion or on an error).
    let completion = unsafe { Arc::from_raw(user_data as *const Completion) };
    *completion.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
    completion.woken.notify_all();
}

impl Queue<'_> {
    /// Waits for every command queued so far, as [`finish`](Self::finish) does, but returns
    /// [`Error::Cancelled`] as soon as `run` is cancelled (looked at every few milliseconds;
    /// the device's completion wakes the wait at once). The commands in flight then finish
    /// before the queue ends: callers queue long work in stages with a wait between them, so
    /// a cancel waits for one stage at most.
    pub(crate) fn finish_or_cancel(&self, run: &RunControl) -> Result<()> {
        run.checkpoint()?;
        // SAFETY: an empty wait list: the marker completes once every earlier command has.
        let marker = unsafe { self.queue.enqueue_marker_with_wait_list(&[]) }
            .map_err(|e| cl_error("queueing a marker", e))?;
        self.queue
            .flush()
            .map_err(|e| cl_error("submitting the queued work", e))?;
        let completion = Arc::new(Completion::default());
        let user_data = Arc::into_raw(Arc::clone(&completion)) as *mut c_void;
        if let Err(e) =
            marker.set_callback(opencl3::event::CL_COMPLETE, signal_completion, user_data)
        {
            // SAFETY: the callback was not registered, so the reference leaked for it is
            // taken back here, once.
            drop(unsafe { Arc::from_raw(user_data as *const Completion) });
            return Err(cl_error("waiting for the device", e));
        }
        let mut done = completion.done.lock().unwrap_or_else(|p| p.into_inner());
        while !*done {
            if run.is_cancelled() {
                return Err(Error::Cancelled);
            }
            done = completion
                .woken
                .wait_timeout(done, CANCEL_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        drop(done);
        let status = marker
            .command_execution_status()
            .map_err(|e| cl_error("waiting for the device", e))?;
        if status.0 < 0 {
            return Err(launch_error("the queued work", ClError(status.0)));
        }
        self.drained();
        Ok(())
    }
}

impl Queue<'_> {
    /// After a blocking read every earlier command has finished: retired buffers may go, and
    /// the kernels' device times are known.
    fn drained(&self) {
        self.retired.borrow_mut().clear();
        let mut timing = self.timing.get();
        for (kernel, event) in self.launched.borrow_mut().drain(..) {
            if let Some(ns) = device_ns(&event) {
                timing.kernel_ns += ns;
                tracing::debug!(target: KERNEL_TIMES, kernel, device_ns = ns);
            }
        }
        self.timing.set(timing);
        self.account_transfers();
    }

    /// Waits for every command queued so far (and accounts their times).
    pub(crate) fn finish(&self) -> Result<()> {
        self.queue
            .finish()
            .map_err(|e| cl_error("waiting for the device", e))?;
        self.drained();
        Ok(())
    }

    /// Bytes moved so far, and the device times of the commands that completed (zero unless
    /// the queue profiles: see [`DeviceState::timed_queue`]).
    pub(crate) fn timing(&self) -> Timing {
        self.timing.get()
    }

    fn count_bytes(&self, bytes: u64, h2d: bool) {
        let mut t = self.timing.get();
        if h2d {
            t.h2d_bytes += bytes;
        } else {
            t.d2h_bytes += bytes;
        }
        self.timing.set(t);
    }

    /// Keeps a transfer's event to read its device time once it completed.
    fn note_transfer(&self, e: opencl3::event::Event, h2d: bool) {
        if self.profile {
            self.transfers.borrow_mut().push((h2d, e));
        }
    }

    /// Adds the device times of the noted transfers, which have all completed.
    fn account_transfers(&self) {
        let mut t = self.timing.get();
        for (h2d, e) in self.transfers.borrow_mut().drain(..) {
            let ns = device_ns(&e).unwrap_or(0);
            if h2d {
                t.h2d_ns += ns;
            } else {
                t.d2h_ns += ns;
            }
        }
        self.timing.set(t);
    }

    /// An uninitialised buffer of `len` elements (at least one, as OpenCL refuses empty ones).
    pub(crate) fn alloc<T: Plain>(&self, len: usize, what: &str) -> Result<DeviceBuffer<T>> {
        self.alloc_in(len, what, true)
    }

    /// An uninitialised buffer of exactly `len` elements (at least one) outside the reuse
    /// pool: for what outlives the call (resident matrices), so that it holds no more memory
    /// than it needs.
    pub(crate) fn alloc_kept<T: Plain>(&self, len: usize, what: &str) -> Result<DeviceBuffer<T>> {
        self.alloc_in(len, what, false)
    }

    /// [`alloc`](Self::alloc) or [`alloc_kept`](Self::alloc_kept).
    pub(crate) fn alloc_in<T: Plain>(
        &self,
        len: usize,
        what: &str,
        pooled: bool,
    ) -> Result<DeviceBuffer<T>> {
        let _span = tracing::debug_span!("alloc", len).entered();
        let bytes = (len.max(1) as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        if let Some(recycled) = self.recycled {
            return self.alloc_on_stream(recycled, len, bytes, what);
        }
        let class = usize::try_from(bytes)
            .ok()
            .and_then(pool_class)
            .filter(|_| pooled);
        if let Some(class) = class {
            let reused = self
                .pool
                .lock()
                .map_err(|_| poisoned("buffer pool"))?
                .take(class);
            let buffer = match reused {
                Some(b) => b,
                // SAFETY: no host pointer is passed; the size is checked by the runtime.
                None => unsafe {
                    Buffer::<u8>::create(self.context, CL_MEM_READ_WRITE, class, ptr::null_mut())
                }
                .map_err(|e| alloc_error(what, class as u64, self.free_estimate, e))?,
            };
            // Three references to one cl_mem: the DeviceBuffer's, the queue's retired list's
            // (see `retired`), and the queue's pooled list's, which goes back to the pool.
            for _ in 0..2 {
                // SAFETY: a valid buffer; each retain is matched by the drop of a wrapper below.
                unsafe { opencl3::memory::retain_mem_object(buffer.get()) }
                    .map_err(|e| cl_error(format!("retaining {what}"), ClError(e)))?;
            }
            self.retired.borrow_mut().push(Buffer::new(buffer.get()));
            let typed = Buffer::<T>::new(buffer.get());
            self.pooled.borrow_mut().push((class, buffer));
            return Ok(DeviceBuffer {
                buffer: std::mem::ManuallyDrop::new(typed),
                len,
            });
        }
        // SAFETY: no host pointer is passed; the size is checked by the runtime.
        let buffer = unsafe {
            Buffer::<T>::create(self.context, CL_MEM_READ_WRITE, len.max(1), ptr::null_mut())
        }
        .map_err(|e| alloc_error(what, bytes, self.free_estimate, e))?;
        // SAFETY: a valid buffer; the matching release is the drop of the wrapper pushed here.
        unsafe { opencl3::memory::retain_mem_object(buffer.get()) }
            .map_err(|e| cl_error(format!("retaining {what}"), ClError(e)))?;
        self.retired.borrow_mut().push(Buffer::new(buffer.get()));
        Ok(DeviceBuffer {
            buffer: std::mem::ManuallyDrop::new(buffer),
            len,
        })
    }

    /// A buffer of the stream: a dropped result's of the same size, or a new one.
    fn alloc_on_stream<T: Plain>(
        &self,
        recycled: &RefCell<FreeBuffers>,
        len: usize,
        bytes: u64,
        what: &str,
    ) -> Result<DeviceBuffer<T>> {
        let reused = {
            let mut free = recycled.borrow_mut();
            let at = free.iter().position(|(n, _)| *n as u64 == bytes);
            at.map(|at| free.swap_remove(at).1)
        };
        let mem = match reused {
            Some(b) => {
                let mem = b.get();
                // The reference moves into the DeviceBuffer made below.
                std::mem::forget(b);
                mem
            }
            None => {
                let size = usize::try_from(bytes).map_err(|_| Error::TooLarge {
                    what: what.to_string(),
                    needed: bytes,
                    limit: usize::MAX as u64,
                    unit: "bytes",
                })?;
                // SAFETY: no host pointer is passed; the size is checked by the runtime.
                let b = unsafe {
                    Buffer::<u8>::create(self.context, CL_MEM_READ_WRITE, size, ptr::null_mut())
                }
                .map_err(|e| alloc_error(what, bytes, self.free_estimate, e))?;
                let mem = b.get();
                std::mem::forget(b);
                mem
            }
        };
        let buffer = DeviceBuffer {
            buffer: std::mem::ManuallyDrop::new(Buffer::<T>::new(mem)),
            len,
        };
        self.hold(&buffer)?;
        Ok(buffer)
    }

    /// Keeps a reference to `b` until the commands queued so far finished (see `retired`).
    pub(crate) fn hold<T>(&self, b: &DeviceBuffer<T>) -> Result<()> {
        // SAFETY: a valid buffer; the retain is matched by the drop of the wrapper pushed here.
        unsafe { opencl3::memory::retain_mem_object(b.mem()) }
            .map_err(|e| cl_error("retaining a buffer", ClError(e)))?;
        self.retired.borrow_mut().push(Buffer::new(b.mem()));
        Ok(())
    }

    /// A buffer holding a copy of `data` (the copy has completed on return).
    pub(crate) fn upload<T: Plain>(&self, data: &[T], what: &str) -> Result<DeviceBuffer<T>> {
        let b = self.alloc::<T>(data.len(), what)?;
        self.write_bytes(b.mem(), plain_bytes(data), what)?;
        Ok(b)
    }

    /// Copies `len` elements starting at element `offset` of `b` to the host.
    pub(crate) fn download_at<T: Plain + Default>(
        &self,
        b: &DeviceBuffer<T>,
        offset: usize,
        len: usize,
        what: &str,
    ) -> Result<Vec<T>> {
        if offset + len > b.len.max(1) {
            return Err(device_error(
                format!("reading {what}"),
                format!(
                    "elements {offset}..{} of a buffer of {}",
                    offset + len,
                    b.len
                ),
            ));
        }
        let mut out = vec![T::default(); len];
        // SAFETY: T is plain data (Plain), so any bytes written are valid values.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                out.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(&out[..]),
            )
        };
        self.read_bytes(b.mem(), offset * std::mem::size_of::<T>(), bytes, what)?;
        Ok(out)
    }

    /// Fills `out` from the start of the byte buffer `b`.
    pub(crate) fn download_bytes(
        &self,
        b: &DeviceBuffer<u8>,
        out: &mut [u8],
        what: &str,
    ) -> Result<()> {
        if out.len() > b.len.max(1) {
            return Err(device_error(
                format!("reading {what}"),
                format!("{} bytes from a buffer of {}", out.len(), b.len),
            ));
        }
        self.read_bytes(b.mem(), 0, out, what)
    }

    /// Host to device through the pinned staging slots. Returns once everything has arrived.
    fn write_bytes(&self, dst: cl_mem, data: &[u8], what: &str) -> Result<()> {
        self.write_all(&[Upload { dst, data }], what)
    }

    /// Copies every piece to its buffer in one pipeline: pieces are packed one after the other
    /// into the pinned staging slots (small arrays share one), each part goes out as soon as it
    /// is copied in, and filling a slot overlaps the transfers from the others. Returns once
    /// everything has arrived.
    pub(crate) fn write_all(&self, pieces: &[Upload<'_>], what: &str) -> Result<()> {
        if pieces.iter().all(|p| p.data.is_empty()) {
            return Ok(());
        }
        let _span = tracing::debug_span!("write", pieces = pieces.len()).entered();
        let fail =
            |e: opencl3::error_codes::ClError| cl_error(format!("copying {what} to the device"), e);
        let mut guard = self
            .staging
            .lock()
            .map_err(|_| poisoned("staging buffer"))?;
        let staging = Staging::get(&mut guard, self.context)?;
        // The last write out of each slot: in an in-order queue, once it completes the slot is
        // free again.
        let mut last: Vec<Option<opencl3::event::Event>> =
            (0..STAGING_SLOTS).map(|_| None).collect();
        let (mut h, mut cursor) = (0usize, 0usize);
        for piece in pieces {
            self.count_bytes(piece.data.len() as u64, true);
            let mut target = std::mem::ManuallyDrop::new(Buffer::<u8>::new(piece.dst));
            let mut done = 0;
            while done < piece.data.len() {
                if cursor == STAGING_SLOT {
                    h = (h + 1) % STAGING_SLOTS;
                    cursor = 0;
                    if let Some(e) = last[h].take() {
                        e.wait().map_err(fail)?;
                        self.note_transfer(e, true);
                    }
                }
                let n = (piece.data.len() - done).min(STAGING_SLOT - cursor);
                let stage = staging.range(h, cursor, n);
                parallel_copy(writable_bytes(stage), &piece.data[done..done + n]);
                // SAFETY: the destination holds the range (Upload::new checked it); this part
                // of the staging slot is not written again before the slot's last write ends.
                let event = unsafe {
                    self.queue.enqueue_write_buffer(
                        &mut target,
                        opencl3::types::CL_NON_BLOCKING,
                        done,
                        stage,
                        &[],
                    )
                }
                .map_err(fail)?;
                if let Some(earlier) = last[h].replace(event) {
                    self.note_transfer(earlier, true);
                }
                done += n;
                cursor += n;
            }
        }
        for e in last.into_iter().flatten() {
            e.wait().map_err(fail)?;
            self.note_transfer(e, true);
        }
        // Every write of this call has completed.
        self.account_transfers();
        Ok(())
    }

    /// Device to host through the pinned staging slots. Everything queued before has finished
    /// on return.
    fn read_bytes(&self, src: cl_mem, offset: usize, out: &mut [u8], what: &str) -> Result<()> {
        self.read_all(
            &mut [Download {
                src,
                offset,
                out: writable_bytes(out),
            }],
            what,
        )
    }

    /// Copies every piece to the host in one pipeline: reads are packed one after the other into
    /// the pinned staging slots, and while the device fills some the host copies the oldest
    /// out. Everything queued before has finished on return.
    pub(crate) fn read_all(&self, pieces: &mut [Download<'_>], what: &str) -> Result<()> {
        if pieces.iter().all(|p| p.out.is_empty()) {
            return Ok(());
        }
        let _span = tracing::debug_span!("read", pieces = pieces.len()).entered();
        let fail = |e: opencl3::error_codes::ClError| {
            cl_error(format!("copying {what} from the device"), e)
        };
        let mut guard = self
            .staging
            .lock()
            .map_err(|_| poisoned("staging buffer"))?;
        let staging = Staging::get(&mut guard, self.context)?;
        // Per slot: the last read into it and where each part it holds goes.
        struct Slot<'o> {
            last: Option<opencl3::event::Event>,
            parts: Vec<(usize, &'o mut [MaybeUninit<u8>])>,
        }
        let mut slots: Vec<Slot<'_>> = (0..STAGING_SLOTS)
            .map(|_| Slot {
                last: None,
                parts: Vec::new(),
            })
            .collect();
        let drain = |slot: &mut Slot<'_>, h: usize| -> Result<()> {
            if let Some(e) = slot.last.take() {
                e.wait().map_err(fail)?;
                self.note_transfer(e, false);
            }
            for (at, out) in slot.parts.drain(..) {
                parallel_copy(out, staging.range(h, at, out.len()));
            }
            Ok(())
        };
        let (mut h, mut cursor) = (0usize, 0usize);
        for piece in pieces.iter_mut() {
            // The results land in fresh memory: faulted in 4 KiB at a time, the copies out of
            // staging ran at about 7 GB/s on 8 threads (power law: 2.2 GB in 308 ms).
            hetsparse_core::advise_huge_pages(piece.out);
            self.count_bytes(piece.out.len() as u64, false);
            let source = std::mem::ManuallyDrop::new(Buffer::<u8>::new(piece.src));
            let mut rest: &mut [MaybeUninit<u8>] = piece.out;
            let mut offset = piece.offset;
            while !rest.is_empty() {
                if cursor == STAGING_SLOT {
                    // The next slot holds the oldest reads: copy them out while the device
                    // fills the others.
                    h = (h + 1) % STAGING_SLOTS;
                    cursor = 0;
                    drain(&mut slots[h], h)?;
                }
                let n = rest.len().min(STAGING_SLOT - cursor);
                let (now, later) = std::mem::take(&mut rest).split_at_mut(n);
                // SAFETY: the source holds the range (Download::new checked it); this part of
                // the staging slot is read only after the slot's last read completes.
                let event = unsafe {
                    self.queue.enqueue_read_buffer(
                        &source,
                        opencl3::types::CL_NON_BLOCKING,
                        offset,
                        staging.range(h, cursor, n),
                        &[],
                    )
                }
                .map_err(fail)?;
                if let Some(earlier) = slots[h].last.replace(event) {
                    self.note_transfer(earlier, false);
                }
                slots[h].parts.push((cursor, now));
                offset += n;
                cursor += n;
                rest = later;
            }
        }
        // Oldest first: the slots after the current one, then the current one.
        for k in 1..=STAGING_SLOTS {
            let slot = (h + k) % STAGING_SLOTS;
            drain(&mut slots[slot], slot)?;
        }
        self.drained();
        Ok(())
    }

    /// Sets every byte of `b` to zero.
    pub(crate) fn zero<T>(&self, b: &mut DeviceBuffer<T>, what: &str) -> Result<()> {
        let bytes = b.len * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: a byte pattern filling exactly the buffer's size. The fill is asked for on a
        // byte view of the same cl_mem.
        let mut bytes_view = std::mem::ManuallyDrop::new(Buffer::<u8>::new(b.buffer.get()));
        unsafe {
            self.queue
                .enqueue_fill_buffer(&mut bytes_view, &[0u8], 0, bytes, &[])
        }
        .map_err(|e| cl_error(format!("zeroing {what}"), e))?;
        Ok(())
    }

    /// Starts a launch of kernel `name` of `program`.
    pub(crate) fn kernel<'q>(
        &'q self,
        program: &Program,
        name: &'static str,
    ) -> Result<Launch<'q>> {
        let _span = tracing::debug_span!("kernel create", name).entered();
        let key = (program.get() as usize, name);
        let reused = self
            .idle_kernels
            .lock()
            .map_err(|_| poisoned("idle kernels"))?
            .get_mut(&key)
            .and_then(Vec::pop);
        let kernel = match reused {
            Some(k) => k,
            None => {
                Kernel::create(program, name).map_err(|e| cl_error(format!("kernel {name}"), e))?
            }
        };
        Ok(Launch {
            queue: self,
            kernel: std::mem::ManuallyDrop::new(kernel),
            key,
            name,
            next: 0,
        })
    }
}

/// Work-group size of one-dimensional launches that do not ask for one.
const DEFAULT_WG: usize = 128;

/// Kernel arguments set in order, checked against the kernel's declared count before running.
pub(crate) struct Launch<'q> {
    queue: &'q Queue<'q>,
    /// Taken back into the queue's `idle_kernels` under `key` when the launch ends.
    kernel: std::mem::ManuallyDrop<Kernel>,
    key: (usize, &'static str),
    name: &'static str,
    next: u32,
}

/// What may be passed as a kernel argument.
pub(crate) trait KernelArg {
    /// Pointer and size of the argument's value.
    fn raw(&self) -> (usize, *const c_void);
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            fn raw(&self) -> (usize, *const c_void) {
                (std::mem::size_of::<$t>(), self as *const $t as *const c_void)
            }
        }
    )*};
}
scalar_arg!(u32, u64);

/// A buffer argument: the cl_mem handle.
pub(crate) struct Mem(opencl3::types::cl_mem);

impl KernelArg for Mem {
    fn raw(&self) -> (usize, *const c_void) {
        (
            std::mem::size_of::<opencl3::types::cl_mem>(),
            &self.0 as *const _ as *const c_void,
        )
    }
}

impl<T> DeviceBuffer<T> {
    /// This buffer as a kernel argument.
    pub(crate) fn arg(&self) -> Mem {
        Mem(self.mem())
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used afterwards.
        let kernel = unsafe { std::mem::ManuallyDrop::take(&mut self.kernel) };
        if let Ok(mut idle) = self.queue.idle_kernels.lock() {
            let kept = idle.entry(self.key).or_default();
            if kept.len() < IDLE_OBJECTS {
                kept.push(kernel);
            }
        }
    }
}

impl Launch<'_> {
    /// Sets the next argument.
    pub(crate) fn arg(mut self, a: impl KernelArg) -> Result<Self> {
        let (size, ptr) = a.raw();
        // SAFETY: size and pointer describe a live value of the argument's type.
        let status =
            unsafe { opencl3::kernel::set_kernel_arg(self.kernel.get(), self.next, size, ptr) };
        status.map_err(|e| {
            cl_error(
                format!("argument {} of kernel {}", self.next, self.name),
                ClError(e),
            )
        })?;
        self.next += 1;
        Ok(self)
    }

    /// Runs over `global` work-items (rounded up to a multiple of `local` per dimension).
    pub(crate) fn run(self, global: &[usize], local: Option<&[usize]>) -> Result<()> {
        self.run_from(0, global, local)
    }

    /// [`run`](Self::run) with the first dimension's ids starting at `first` (OpenCL's global
    /// offset): the kernel sees `get_global_id(0)` from `first` on, and must bound it itself,
    /// as every kernel here does.
    pub(crate) fn run_from(
        self,
        first: usize,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<()> {
        let declared = self
            .kernel
            .num_args()
            .map_err(|e| cl_error(format!("kernel {}", self.name), e))?;
        if declared != self.next {
            return Err(Error::Internal {
                backend: BACKEND,
                what: format!(
                    "kernel {}: {} arguments set, the kernel declares {declared}",
                    self.name, self.next
                ),
            });
        }
        if global.contains(&0) {
            return Ok(());
        }
        // Without a work-group size NVIDIA's OpenCL picks a divisor of the global size, which
        // for a prime one is 1: esc_reduce over 8 386 817 entries took 5 ms instead of 0.1.
        // One-dimensional launches therefore get a fixed size and a rounded-up global size
        // (every kernel checks its index against its bounds).
        let default_local = [DEFAULT_WG];
        let local = match local {
            None if global.len() == 1 => Some(&default_local[..]),
            other => other,
        };
        let rounded: Vec<usize> = match local {
            Some(l) => global
                .iter()
                .zip(l)
                .map(|(&g, &l)| g.div_ceil(l) * l)
                .collect(),
            None => global.to_vec(),
        };
        let mut offsets = vec![0usize; rounded.len()];
        offsets[0] = first;
        // SAFETY: all arguments are set (checked above); sizes and offsets describe
        // `global.len()` dims.
        let event = unsafe {
            self.queue.queue.enqueue_nd_range_kernel(
                self.kernel.get(),
                rounded.len() as u32,
                offsets.as_ptr(),
                rounded.as_ptr(),
                local.map_or(ptr::null(), |l| l.as_ptr()),
                &[],
            )
        }
        .map_err(|e| launch_error(format!("launching kernel {}", self.name), e))?;
        if self.queue.profile {
            self.queue.launched.borrow_mut().push((self.name, event));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencl3::error_codes::{
        CL_INVALID_BUFFER_SIZE, CL_INVALID_COMMAND_QUEUE, CL_INVALID_KERNEL_ARGS,
        CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
    };

    fn fault(e: &Error) -> Option<DeviceFault> {
        match e {
            Error::Device { fault, source, .. } => {
                assert!(source.is_some(), "the OpenCL status is kept as the source");
                Some(*fault)
            }
            _ => None,
        }
    }

    #[test]
    fn opencl_statuses_map_to_fault_kinds() {
        let lost = cl_error("finishing", ClError(CL_INVALID_COMMAND_QUEUE));
        assert_eq!(fault(&lost), Some(DeviceFault::DeviceLost));
        assert!(lost.is_retryable());
        let launch = launch_error("launching", ClError(CL_INVALID_KERNEL_ARGS));
        assert_eq!(fault(&launch), Some(DeviceFault::LaunchFailed));
        assert!(
            launch.to_string().contains("CL_INVALID_KERNEL_ARGS"),
            "{launch}"
        );
        // A lost queue stays a lost device even during a launch.
        let launch_lost = launch_error("launching", ClError(CL_INVALID_COMMAND_QUEUE));
        assert_eq!(fault(&launch_lost), Some(DeviceFault::DeviceLost));
        let other = cl_error("reading", ClError(CL_INVALID_BUFFER_SIZE));
        assert_eq!(fault(&other), Some(DeviceFault::Other));
        assert!(!other.is_retryable());
        for code in [CL_OUT_OF_RESOURCES, CL_MEM_OBJECT_ALLOCATION_FAILURE] {
            match alloc_error("keys", 1 << 20, 4096, ClError(code)) {
                Error::OutOfMemory {
                    needed_bytes,
                    available_bytes,
                    what,
                    ..
                } => {
                    assert_eq!((needed_bytes, available_bytes), (1 << 20, 4096));
                    assert!(what.contains("keys"), "{what}");
                }
                e => panic!("{code}: expected OutOfMemory, got {e:?}"),
            }
        }
        let too_big = alloc_error("keys", 1 << 40, 0, ClError(CL_INVALID_BUFFER_SIZE));
        assert_eq!(fault(&too_big), Some(DeviceFault::Other));
    }

    #[test]
    fn pool_classes_are_powers_of_two_within_bounds() {
        assert_eq!(pool_class(1), Some(POOL_MIN_BUFFER));
        assert_eq!(pool_class(POOL_MIN_BUFFER + 1), Some(2 * POOL_MIN_BUFFER));
        assert_eq!(pool_class(3 << 20), Some(4 << 20));
        assert_eq!(pool_class(POOL_MAX_BUFFER), Some(POOL_MAX_BUFFER));
        assert_eq!(pool_class(POOL_MAX_BUFFER + 1), None);
        // Small devices keep less.
        assert_eq!(BufferPool::new(1 << 30).limit, 64 << 20);
        assert_eq!(BufferPool::new(80 << 30).limit, POOL_LIMIT);
    }
}

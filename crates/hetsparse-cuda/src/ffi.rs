//! The few CUDA driver entry points this crate calls directly.
//!
//! They return the driver's status as a plain integer: cust 0.3.2 turns codes its bindings do
//! not know (34, the link stub; 222, PTX too new for the driver) into `UnknownError`, and
//! converting an unknown code into its bindgen enum would be undefined behaviour. Everything
//! else (the primary context, pinned host memory) goes through cust.
#![allow(non_snake_case, non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

pub type CUresult = c_int;
pub type CUdeviceptr = u64;
pub type CUdevice = c_int;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmemoryPool = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;

pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: c_int = 8;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: c_int = 36;
pub const CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: c_int = 37;
pub const CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: c_int = 38;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_int = 115;
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub const CU_EVENT_DEFAULT: c_uint = 0;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;

pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const CU_MEMORYTYPE_HOST: c_uint = 1;

pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;

pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;

/// `cuMemHostRegister`: page-locked for every context, not only the current one.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;

pub const CU_JIT_ERROR_LOG_BUFFER: c_int = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

extern "C" {
    pub fn cuInit(flags: c_uint) -> CUresult;
    pub fn cuDeviceGetCount(count: *mut c_int) -> CUresult;
    pub fn cuDriverGetVersion(version: *mut c_int) -> CUresult;
    pub fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult;
    pub fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> CUresult;
    pub fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CUresult;
    pub fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: CUdevice) -> CUresult;
    pub fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult;
    pub fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult;
    pub fn cuCtxSynchronize() -> CUresult;
    pub fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult;
    pub fn cuMemHostRegister_v2(ptr: *mut c_void, bytes: usize, flags: c_uint) -> CUresult;
    pub fn cuMemHostUnregister(ptr: *mut c_void) -> CUresult;
    pub fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: CUdeviceptr)
        -> CUresult;

    pub fn cuModuleLoadDataEx(
        module: *mut CUmodule,
        image: *const c_void,
        num_options: c_uint,
        options: *mut c_int,
        option_values: *mut *mut c_void,
    ) -> CUresult;
    pub fn cuModuleUnload(module: CUmodule) -> CUresult;
    pub fn cuFuncSetAttribute(function: CUfunction, attribute: c_int, value: c_int) -> CUresult;
    pub fn cuModuleGetFunction(
        function: *mut CUfunction,
        module: CUmodule,
        name: *const c_char,
    ) -> CUresult;
    #[allow(clippy::too_many_arguments)]
    pub fn cuLaunchKernel(
        f: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CUresult;

    pub fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CUresult;
    pub fn cuMemFree_v2(ptr: CUdeviceptr) -> CUresult;
    pub fn cuMemAllocAsync(ptr: *mut CUdeviceptr, bytes: usize, stream: CUstream) -> CUresult;
    pub fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) -> CUresult;
    pub fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, device: CUdevice) -> CUresult;
    pub fn cuMemPoolSetAttribute(
        pool: CUmemoryPool,
        attribute: c_int,
        value: *mut c_void,
    ) -> CUresult;
    pub fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult;
    pub fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult;
    pub fn cuMemcpyHtoDAsync_v2(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: CUstream,
    ) -> CUresult;
    pub fn cuMemcpyDtoHAsync_v2(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> CUresult;
    pub fn cuMemcpyDtoDAsync_v2(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> CUresult;
    pub fn cuMemsetD8Async(dst: CUdeviceptr, value: u8, count: usize, stream: CUstream)
        -> CUresult;

    pub fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult;
    pub fn cuStreamDestroy_v2(stream: CUstream) -> CUresult;
    pub fn cuStreamSynchronize(stream: CUstream) -> CUresult;
    pub fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CUresult;
    pub fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult;
    pub fn cuEventDestroy_v2(event: CUevent) -> CUresult;
    pub fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult;
    pub fn cuEventSynchronize(event: CUevent) -> CUresult;
    pub fn cuEventQuery(event: CUevent) -> CUresult;
    pub fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult;
}

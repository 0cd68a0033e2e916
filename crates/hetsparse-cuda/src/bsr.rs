//! BSR × BSR SpGEMM on the device (kernel in `kernels-cuda/bsr.cu`).
//!
//! Symbolic phase: C's block pattern is the SpGEMM of A's and B's block patterns, computed by
//! the backend's own CSR SpGEMM on the patterns (a matrix with `r·c` times fewer entries than the
//! scalar product). Numeric phase: one thread block per block row of C computes its dense block
//! products, each output element summed in a register and written once.

use std::mem::size_of;

use hetsparse_core::backend::check;
use hetsparse_core::{Bsr, Csr, Result, Scalar};

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::memory::DeviceBuffer;
use crate::scalar::{as_device, from_device, kernel_name, DeviceScalar};
use crate::spmv::block_side;

/// Threads per block row of C.
const THREADS_PER_BLOCK_ROW: u32 = 128;

/// The block pattern of `m` as a CSR matrix of ones.
fn pattern<T: Scalar>(m: &Bsr<T>) -> Result<Csr<f32>> {
    Ok(Csr::try_new(
        m.block_rows(),
        m.block_cols(),
        m.row_offsets().to_vec(),
        m.col_indices().to_vec(),
        vec![1.0; m.col_indices().len()],
    )?)
}

/// `C = A·B` for block matrices; `symbolic` multiplies the block patterns (CSR SpGEMM).
pub(crate) fn bsr_spgemm<T: DeviceScalar>(
    gpu: &Gpu,
    a: &Bsr<T>,
    b: &Bsr<T>,
    symbolic: impl FnOnce(&Csr<f32>, &Csr<f32>) -> Result<Csr<f32>>,
) -> Result<Bsr<T>> {
    check::bsr_spgemm(a, b)?;
    let (r, m) = a.block_shape();
    let c = b.block_shape().1;
    let _span = tracing::debug_span!(
        "bsr_spgemm",
        block_rows = a.block_rows(),
        a_blocks = a.nnz_blocks(),
        b_blocks = b.nnz_blocks(),
        r,
        m,
        c
    )
    .entered();
    let c_pattern = {
        let _s = tracing::debug_span!("symbolic").entered();
        symbolic(&pattern(a)?, &pattern(b)?)?
    };
    let (_, _, c_offsets, c_cols, _) = c_pattern.into_parts();
    let c_len = c_cols.len() * r * c;
    gpu.bind()?;
    let stream = Stream::new()?;
    let mem = gpu.memory();
    let _h = tracing::debug_span!("H2D", c_blocks = c_cols.len()).entered();
    let a_off = DeviceBuffer::from_host(mem, &stream, a.row_offsets(), "BSR offsets of A")?;
    let a_cols = DeviceBuffer::from_host(mem, &stream, a.col_indices(), "BSR columns of A")?;
    let a_vals = DeviceBuffer::from_host(mem, &stream, as_device(a.values()), "BSR values of A")?;
    let b_off = DeviceBuffer::from_host(mem, &stream, b.row_offsets(), "BSR offsets of B")?;
    let b_cols = DeviceBuffer::from_host(mem, &stream, b.col_indices(), "BSR columns of B")?;
    let b_vals = DeviceBuffer::from_host(mem, &stream, as_device(b.values()), "BSR values of B")?;
    let c_off = DeviceBuffer::from_host(mem, &stream, &c_offsets, "BSR offsets of C")?;
    let c_cols_dev = DeviceBuffer::from_host(mem, &stream, &c_cols, "BSR columns of C")?;
    let mut c_vals = DeviceBuffer::<T::Device>::new(mem, &stream, c_len, "BSR values of C")?;
    drop(_h);
    {
        let _k = tracing::debug_span!("kernel", "numeric").entered();
        let f = gpu.function("bsr", kernel_name::<T>("bsr_spgemm"))?;
        let config = LaunchConfig {
            grid: a.block_rows().clamp(1, 1 << 20) as u32,
            block: THREADS_PER_BLOCK_ROW,
            shared_bytes: 0,
        };
        // SAFETY: the arguments of `bsr_spgemm` in `bsr.cu`, in order; the patterns are valid
        // BSR patterns (checked by their constructors) and C's values hold every output block.
        unsafe {
            gpu.launch(
                f,
                config,
                &stream,
                &[
                    Arg::U64(a.block_rows() as u64),
                    Arg::U32(block_side(r)?),
                    Arg::U32(block_side(m)?),
                    Arg::U32(block_side(c)?),
                    a_off.read(&stream)?.arg(),
                    a_cols.read(&stream)?.arg(),
                    a_vals.read(&stream)?.arg(),
                    b_off.read(&stream)?.arg(),
                    b_cols.read(&stream)?.arg(),
                    b_vals.read(&stream)?.arg(),
                    c_off.read(&stream)?.arg(),
                    c_cols_dev.read(&stream)?.arg(),
                    c_vals.write(&stream)?.arg_mut(),
                ],
            )?;
        }
    }
    let _d = tracing::debug_span!("D2H", bytes = c_len * size_of::<T>()).entered();
    let values = c_vals.read(&stream)?.to_vec(&stream)?;
    Ok(Bsr::try_new(
        (r, c),
        a.block_rows(),
        b.block_cols(),
        c_offsets,
        c_cols,
        from_device::<T>(&values).to_vec(),
    )?)
}

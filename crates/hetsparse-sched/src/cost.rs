//! The cost model: each device's time for a whole call predicted before anything is learned,
//! from what the product's analysis gives and what the device is ([`DeviceProfile`]); where
//! the device was measured on this machine (a calibration) or in this process (runs learned
//! from), the measurement corrects the model's numbers for that device and operation.
//!
//! For a device `d` and a call of `W` work units (intermediate products for SpGEMM, entries
//! of A times the dense operand's columns for SpMM and SpMV), with `I` bytes in (A and B, or
//! A and x) and `O` bytes out (C, estimated from a sample of rows, or y):
//!
//! ```text
//! t_d        = latency_d + transfer_d + compute_d
//! transfer_d = (I + O) / link_d                   (0 for a device in host memory)
//! SpGEMM:  compute_d = max((W - R) / (units_d · products_per_unit_d)
//!                            + R / (units_d · run_products_per_unit_d)
//!                            + C / (units_d · entries_per_unit_d),
//!                          (I + O + W · e · u_d(B)) / bandwidth_d)
//!                      · (1 + skew_penalty_d · ln(skew)) + G_d
//! SpMV:    compute_d = (I + O) / bandwidth_d + W / (units_d · multiply_adds_per_unit_d)
//!                      + G_d
//! SpMM:    compute_d = max((I + O) / bandwidth_d, W / (units_d · multiply_adds_per_unit_d))
//!                      + G_d
//! G_d      = misses_d · line / gather_bandwidth_d
//! ```
//!
//! where `C` is C's entries (estimated), `R` the products whose row of B is a run of
//! consecutive columns (vector adds on a CPU), `e` the bytes of an entry of B read per product,
//! `u_d(B)` the share of B's reads the device's cache does not serve ([`uncached`]) and `skew`
//! the longest row's products over the mean. Products and entries are apart because a
//! product that adds into an entry already there costs a multiply-add, one that makes an
//! entry a slot found and an entry written: a dense product (hundreds of products per entry)
//! runs tens of times more products per second than a uniformly random one. `G_d` is the
//! rows of B (or of the dense operand, or x) read out of order ([`Gathers`]): an entry of A
//! whose column is near one of the previous row's reads a row that the caches or the
//! prefetchers already bring (stencils, bands, grids, AMG's transfer operators), and so does
//! any read of an operand the device's cache holds; the others each miss, a cache line or
//! more at the device's rate of random reads. Without the term, a CPU's SpMM of a uniformly
//! random matrix was predicted at its streaming speed, where its misses made it several
//! times slower than a GPU's from host memory. A device measured ([`Measured`]: its per-call cost `p` and the
//! factor `f` by which the rest of a measured call took longer than the model said) is
//! predicted `t_d = p + f · (transfer_d + compute_d)`: the model keeps what differs between
//! products (how much is copied, how much is computed, how skewed), the measurement what the
//! device's numbers get wrong. A single speed per device would not: from host memory a GPU's
//! SpMM is bound by copying A on one matrix and by its kernels on another. Sharing a SpGEMM
//! over every device is predicted
//! `overhead / Σ_d 1/t_d`, with the overhead learned from shared runs, else
//! [`DEFAULT_SHARING_OVERHEAD`]. The least predicted time wins.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::{
    analysis, Csr, DeviceProfile, Error, Operation, Result, Scalar, SparseFormat, SpgemmAlgorithm,
};

use crate::learn::Kind;
use crate::Scheduler;

/// How much longer than its ideal (`W / Σ speeds`) a shared SpGEMM is assumed to take before
/// any shared run was timed: a first shared run pays every device's warm-up, the cut into
/// chunks and the assembly, and measured two to three and a half times the GPU alone, so
/// sharing is chosen from the model only where the devices are close and the product large.
pub const DEFAULT_SHARING_OVERHEAD: f64 = 2.0;

/// Rows of A whose result rows are counted to estimate the entries of C.
const SAMPLED_ROWS: usize = 256;

/// Entries of A up to which a SpGEMM's products are counted row by row (a pass over A);
/// beyond, from [`PRODUCT_SAMPLE_BLOCKS`] blocks of consecutive rows spread over A.
const EXACT_PRODUCT_ENTRIES: u64 = 1 << 16;

/// Blocks of consecutive rows whose products estimate a larger A's.
const PRODUCT_SAMPLE_BLOCKS: usize = 128;

/// The most rows in each block of the products' sample: consecutive rows are read as streams,
/// where rows spread one by one over A cost the memory's latency each (a strided sample of
/// 2^15 rows took as long as a small product's whole call).
const PRODUCT_BLOCK_ROWS: usize = 64;

/// Entries of A after which a block of the products' sample ends (at the end of a row), so
/// that the sample of a matrix of long rows reads a few of them, not 64 each.
const PRODUCT_BLOCK_ENTRIES: u64 = 128;

/// The most products the sampled rows hold between them (a first row holding more is sampled
/// from its start): the estimate costs a small fraction of any product large enough for the
/// choice to matter.
pub const SAMPLED_PRODUCTS: u64 = 1 << 14;

/// The most entries of A the gathers' sample looks at (pairs of consecutive rows spread over
/// A, up to [`SAMPLED_ROWS`] of them): a share known within a few percent, for a cost small
/// beside a SpMV of a few thousand rows.
const SAMPLED_GATHERS: u64 = 1 << 12;

/// Columns within which an entry of A counts as near one of the previous row's: its row of the
/// dense operand is then in cache, or next in a stream the prefetchers follow.
const NEAR_COLUMNS: u32 = 16;

/// Consecutive columns from which a row of B counts as a run (vector adds along it).
pub const RUN_COLUMNS: usize = 32;

/// Bytes a read from memory brings at least.
const CACHE_LINE: u64 = 64;

/// The operations the model and the calibration tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Sparse × sparse.
    Spgemm,
    /// Sparse × dense.
    Spmm,
    /// Sparse × vector.
    Spmv,
}

impl OpKind {
    /// Every operation, in the order above.
    pub const ALL: [OpKind; 3] = [OpKind::Spgemm, OpKind::Spmm, OpKind::Spmv];

    /// `spgemm`, `spmm` or `spmv`.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Spgemm => "spgemm",
            OpKind::Spmm => "spmm",
            OpKind::Spmv => "spmv",
        }
    }

    fn kind(self) -> Kind {
        match self {
            OpKind::Spgemm => Kind::Spgemm,
            OpKind::Spmm => Kind::Spmm,
            OpKind::Spmv => Kind::Spmv,
        }
    }

    /// The operation on CSR operands, as capabilities list it.
    pub fn operation(self) -> Operation {
        match self {
            OpKind::Spgemm => Operation::Spgemm(SpgemmAlgorithm::Auto),
            OpKind::Spmm => Operation::Spmm(SparseFormat::Csr),
            OpKind::Spmv => Operation::Spmv(SparseFormat::Csr),
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpKind {
    type Err = Error;
    /// [`Error::InvalidArgument`] for anything but the three names.
    fn from_str(s: &str) -> Result<Self> {
        OpKind::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::InvalidArgument(format!("`{s}` is not spgemm, spmm or spmv")))
    }
}

/// What a call costs, as the model needs it: its work, the bytes it moves, its skew.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The operation.
    pub op: OpKind,
    /// Work units: intermediate products (SpGEMM), entries of A times the dense operand's
    /// columns (SpMM, SpMV).
    pub work: u64,
    /// Bytes of the operands in host memory (A and B, or A and x).
    pub bytes_in: u64,
    /// Bytes of the result (C, estimated; or y).
    pub bytes_out: u64,
    /// Bytes read per work unit beyond the operands' streaming (an entry of B per product;
    /// none for SpMV and SpMM).
    pub bytes_per_unit: u64,
    /// The longest row's products over the mean (1 for even rows; SpGEMM only, else 1).
    pub skew: f64,
    /// Entries of C estimated from a sample of rows (SpGEMM; 0 otherwise).
    pub c_entries: u64,
    /// Products whose row of B is a run of at least [`RUN_COLUMNS`] consecutive columns,
    /// estimated from the same sample (SpGEMM; 0 otherwise).
    pub run_products: u64,
    /// Reads of the rows of B (SpGEMM) or of the dense operand (SpMM, SpMV).
    pub gathers: Gathers,
}

/// How a product's reads of its right operand's rows (one per entry of A) fall: in order,
/// where the caches and prefetchers serve them, or scattered, where each misses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gathers {
    /// Rows read: the entries of A.
    pub count: u64,
    /// Bytes a scattered read brings from memory: a row of the operand (its mean, for B of
    /// a SpGEMM), in whole cache lines.
    pub line_bytes: u64,
    /// Bytes of the dense operand.
    pub operand_bytes: u64,
    /// Of a sample of A's entries, the fraction whose column is not within 16 of a column of
    /// the row before (0: a band, a stencil; near 1: uniformly random columns).
    pub scattered: f64,
}

impl Gathers {
    /// A's reads of an operand of `a.ncols()` rows of `row_bytes` each (on average): the
    /// scattered fraction from up to [`SAMPLED_GATHERS`] entries of pairs of consecutive rows
    /// spread over A.
    fn of<T: Scalar>(a: &Csr<T>, row_bytes: u64, operand_bytes: u64) -> Self {
        let (mut sampled, mut scattered) = (0u64, 0u64);
        let step = (a.nrows() / SAMPLED_ROWS).max(1);
        for i in (1..a.nrows()).step_by(step) {
            if sampled >= SAMPLED_GATHERS {
                break;
            }
            let (before, _) = a.row(i - 1);
            let (row, _) = a.row(i);
            // A row longer than what is left of the sample is sampled from its start.
            let left = usize::try_from(SAMPLED_GATHERS - sampled).unwrap_or(usize::MAX);
            let row = &row[..row.len().min(left)];
            // Both rows' columns are sorted: the previous row's first column at or after
            // j - 16 moves forward with j, found by a walk along both rows, or by a binary
            // search for each j where the previous row is much the longer.
            let search = before.len() > 4 * row.len();
            let mut from = 0;
            for &j in row {
                let behind = |c: u32| c.saturating_add(NEAR_COLUMNS) < j;
                if search {
                    from = before.partition_point(|&c| behind(c));
                } else {
                    while before.get(from).is_some_and(|&c| behind(c)) {
                        from += 1;
                    }
                }
                let near = before
                    .get(from)
                    .is_some_and(|&c| c <= j.saturating_add(NEAR_COLUMNS));
                scattered += u64::from(!near);
                sampled += 1;
            }
        }
        Gathers {
            count: a.nnz(),
            line_bytes: row_bytes.div_ceil(CACHE_LINE).max(1) * CACHE_LINE,
            operand_bytes,
            scattered: if sampled == 0 {
                0.0
            } else {
                scattered as f64 / sampled as f64
            },
        }
    }

    /// Bytes read out of order on a device whose cache holds `cache_bytes`: the scattered
    /// reads that miss ([`uncached`]), a line or more each.
    pub fn missed_bytes(&self, cache_bytes: u64) -> f64 {
        self.count as f64
            * self.scattered.clamp(0.0, 1.0)
            * uncached(self.operand_bytes, cache_bytes)
            * self.line_bytes as f64
    }
}

/// The share of reads in no particular order of an operand of `operand_bytes` that a cache of
/// `cache_bytes` does not serve: none while the operand takes at most a quarter of the cache
/// (the rest holds what is streamed past it, and a random set of lines conflicts in the
/// cache's ways), beyond that all but the share a quarter of the cache holds.
pub fn uncached(operand_bytes: u64, cache_bytes: u64) -> f64 {
    if operand_bytes == 0 {
        return 0.0;
    }
    (1.0 - cache_bytes as f64 / (4.0 * operand_bytes as f64)).max(0.0)
}

impl Workload {
    /// `A · B`: products counted (a pass over A; where A has more than 2^16 entries,
    /// estimated from 128 blocks of consecutive rows spread over it, each of up to 64 rows
    /// or 128 entries, with the longest of those rows for the skew), C's entries estimated
    /// from up to 256 rows spread over A holding at most [`SAMPLED_PRODUCTS`] products between
    /// them (at least one row, whose start is taken where it alone holds more: their distinct
    /// columns over their products, times all products), bounded by `rows × cols`.
    /// [`Error::ShapeMismatch`] for operands that do not chain.
    pub fn spgemm<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<Self> {
        hetsparse_core::backend::check::spgemm(a, b)?;
        let row_products = |i: usize| analysis::row_product_count(a, b, i);
        // Products per row: every row's where A is small, else a sample's (a whole pass costs
        // a steady-state call on the GPU a quarter of its time on matrices of millions of
        // rows; the choice does not hang on the last percent).
        let (products, longest) = if a.nnz() <= EXACT_PRODUCT_ENTRIES {
            (0..a.nrows())
                .map(row_products)
                .fold((0u64, 0u64), |(sum, longest), p| {
                    (sum.saturating_add(p), longest.max(p))
                })
        } else {
            let (mut sum, mut longest, mut rows) = (0u64, 0u64, 0u64);
            let blocks = PRODUCT_SAMPLE_BLOCKS.min(a.nrows());
            for block in 0..blocks {
                let first = block * a.nrows() / blocks;
                let last = ((block + 1) * a.nrows() / blocks).min(first + PRODUCT_BLOCK_ROWS);
                let mut entries = 0u64;
                for i in first..last {
                    if entries >= PRODUCT_BLOCK_ENTRIES {
                        break;
                    }
                    let p = row_products(i);
                    sum = sum.saturating_add(p);
                    longest = longest.max(p);
                    rows += 1;
                    entries += a.row_nnz(i);
                }
            }
            let mean = sum as f64 / rows.max(1) as f64;
            ((mean * a.nrows() as f64).round() as u64, longest)
        };
        let mean = products as f64 / a.nrows().max(1) as f64;
        let skew = if mean > 0.0 {
            longest as f64 / mean
        } else {
            1.0
        };
        let value = std::mem::size_of::<T>();
        let mut sampled_products = 0u64;
        let mut sampled_entries = 0u64;
        let mut sampled_runs = 0u64;
        let step = (a.nrows() / SAMPLED_ROWS).max(1);
        // A bit per column of B: a row's distinct columns counted in one pass over its
        // products, the bits cleared again by a second.
        let mut seen = vec![0u64; b.ncols().div_ceil(64)];
        for i in (0..a.nrows()).step_by(step) {
            if sampled_products >= SAMPLED_PRODUCTS {
                break;
            }
            let row_products = row_products(i);
            if row_products == 0
                || (sampled_products > 0
                    && sampled_products.saturating_add(row_products) > SAMPLED_PRODUCTS)
            {
                continue;
            }
            // The row's entries of A up to the budget (all of them but for a first row that
            // alone holds more: its start, whose share of distinct columns is at least the
            // whole row's, so C is not under-estimated).
            let (columns_of_a, _) = a.row(i);
            let mut taken = 0;
            let mut taken_products = 0u64;
            for &k in columns_of_a {
                let n = b.row_nnz(k as usize);
                if taken > 0 && taken_products + n > SAMPLED_PRODUCTS {
                    break;
                }
                taken += 1;
                taken_products += n;
            }
            let columns_of_a = &columns_of_a[..taken];
            for &k in columns_of_a {
                for &j in b.row(k as usize).0 {
                    let (word, bit) = (j as usize / 64, 1u64 << (j % 64));
                    sampled_entries += u64::from(seen[word] & bit == 0);
                    seen[word] |= bit;
                }
            }
            for &k in columns_of_a {
                let (columns, _) = b.row(k as usize);
                for &j in columns {
                    seen[j as usize / 64] = 0;
                }
                if let (Some(&first), Some(&last)) = (columns.first(), columns.last()) {
                    let run = (last - first) as usize + 1 == columns.len();
                    if run && columns.len() >= RUN_COLUMNS {
                        sampled_runs += columns.len() as u64;
                    }
                }
            }
            sampled_products += taken_products;
        }
        let ratio = if sampled_products == 0 {
            1.0
        } else {
            sampled_entries as f64 / sampled_products as f64
        };
        let dense = (a.nrows() as u64).saturating_mul(b.ncols() as u64);
        let c_entries = ((products as f64 * ratio).ceil() as u64).min(dense);
        let run_share = if sampled_products == 0 {
            0.0
        } else {
            sampled_runs as f64 / sampled_products as f64
        };
        let run_products = ((products as f64 * run_share) as u64).min(products);
        Ok(Workload {
            op: OpKind::Spgemm,
            work: products,
            bytes_in: csr_bytes(a.nrows(), a.nnz(), value).saturating_add(csr_bytes(
                b.nrows(),
                b.nnz(),
                value,
            )),
            bytes_out: csr_bytes(a.nrows(), c_entries, value),
            bytes_per_unit: 4 + value as u64,
            skew: skew.max(1.0),
            c_entries,
            run_products,
            gathers: {
                let entry = 4 + value as u64;
                let b_bytes = b.nnz().saturating_mul(entry);
                Gathers::of(a, b_bytes / (b.nrows() as u64).max(1), b_bytes)
            },
        })
    }

    /// The model's prediction for this call on a device of `profile` at position `device`,
    /// uncorrected by any measurement.
    pub fn modelled_on(&self, device: usize, profile: &DeviceProfile) -> Prediction {
        model(device, profile, self)
    }

    /// `A · x`.
    pub fn spmv<T: Scalar>(a: &Csr<T>) -> Self {
        Self::dense_operand(OpKind::Spmv, a, 1)
    }

    /// `A · B` with a dense B of `columns` columns.
    pub fn spmm<T: Scalar>(a: &Csr<T>, columns: usize) -> Self {
        Self::dense_operand(OpKind::Spmm, a, columns)
    }

    fn dense_operand<T: Scalar>(op: OpKind, a: &Csr<T>, columns: usize) -> Self {
        let value = std::mem::size_of::<T>() as u64;
        let k = columns as u64;
        Workload {
            op,
            work: a.nnz().saturating_mul(k),
            bytes_in: csr_bytes(a.nrows(), a.nnz(), value as usize)
                .saturating_add((a.ncols() as u64).saturating_mul(k).saturating_mul(value)),
            bytes_out: (a.nrows() as u64).saturating_mul(k).saturating_mul(value),
            // The values of x (rows of B) are counted once, in `bytes_in`; the reads that
            // miss, in `gathers`.
            bytes_per_unit: 0,
            skew: 1.0,
            c_entries: 0,
            run_products: 0,
            gathers: Gathers::of(
                a,
                k.saturating_mul(value),
                (a.ncols() as u64).saturating_mul(k).saturating_mul(value),
            ),
        }
    }
}

/// How a device's whole calls of one operation from host memory measured against the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// The measured time of a call's copies and computing over the model's (1: as predicted;
    /// 2: twice as long).
    pub factor: f64,
    /// Seconds a call costs whatever its size.
    pub per_call: f64,
}

impl Measured {
    /// Whether both numbers are finite, the factor positive and the per-call cost not
    /// negative.
    pub fn is_valid(&self) -> bool {
        self.factor.is_finite()
            && self.factor > 0.0
            && self.per_call.is_finite()
            && self.per_call >= 0.0
    }

    /// What a call of `wall` seconds on `w` teaches, against `model` (the device's
    /// [`model`] prediction for `w`): the part the per-call cost does not explain (at least a
    /// tenth of `wall`) over the model's copies and computing. A call the per-call cost
    /// dominates teaches that cost instead (`wall` less the corrected rest). `None` where the
    /// model predicts nothing to copy or compute.
    pub fn from_run(&self, model: &Prediction, wall: f64) -> Option<Measured> {
        let rest = model.compute + model.transfer;
        if !(rest > 0.0 && rest.is_finite() && wall.is_finite() && wall >= 0.0) {
            return None;
        }
        let learned = if self.factor * rest >= self.per_call {
            Measured {
                factor: (wall - self.per_call).max(0.1 * wall) / rest,
                per_call: self.per_call,
            }
        } else {
            Measured {
                factor: self.factor,
                per_call: (wall - self.factor * rest).max(0.0),
            }
        };
        learned.is_valid().then_some(learned)
    }

    /// This measurement and a later one, weighed equally: the factors' geometric mean (they
    /// are ratios), the per-call costs' mean.
    pub fn blended(&self, later: &Measured) -> Measured {
        Measured {
            factor: (self.factor * later.factor).sqrt(),
            per_call: 0.5 * (self.per_call + later.per_call),
        }
    }
}

/// Where a device's prediction comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The model, from the device's profile.
    Model,
    /// A calibration (`Context::calibrate`, or a file it wrote).
    Calibrated,
    /// This scheduler's own runs.
    Learned,
    /// The device failed this operation in this scheduler: not chosen.
    Failed,
    /// The operands and the result do not fit half the device's memory: not chosen alone
    /// (the scheduler cuts such a product into chunks).
    DoesNotFit,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Model => "model",
            Source::Calibrated => "calibrated",
            Source::Learned => "learned",
            Source::Failed => "failed before",
            Source::DoesNotFit => "does not fit",
        })
    }
}

/// One device's predicted time for a whole call, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The backend's position in the scheduler.
    pub device: usize,
    /// Computing (for a measured device, the whole call's work over its speed, transfers
    /// included).
    pub compute: f64,
    /// Copying the operands there and the result back (0 in host memory; 0 for a measured
    /// device, whose speed includes it).
    pub transfer: f64,
    /// What a call costs whatever its size, with the device's cold start where it is not
    /// ready yet ([`DeviceProfile::cold_start`]).
    pub latency: f64,
    /// The sum: the time predicted.
    pub total: f64,
    /// Where the numbers come from.
    pub source: Source,
}

/// Who a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// One backend, by position, computes the whole call.
    Alone(usize),
    /// The scheduler shares it (its policy and what it learned decide how).
    Shared,
}

/// The model's decision for one call, with what it was decided on.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The workload predicted.
    pub workload: Workload,
    /// One per backend that runs the operation.
    pub predictions: Vec<Prediction>,
    /// Predicted seconds of sharing the call over them (SpGEMM of two or more devices only).
    pub shared: Option<f64>,
    /// The decision.
    pub chosen: Chosen,
}

impl Choice {
    /// The predicted seconds of the decision.
    pub fn predicted(&self) -> f64 {
        match self.chosen {
            Chosen::Alone(d) => self
                .predictions
                .iter()
                .find(|p| p.device == d)
                .map_or(f64::INFINITY, |p| p.total),
            Chosen::Shared => self.shared.unwrap_or(f64::INFINITY),
        }
    }
}

/// The model's prediction for a device of `profile` on `w`.
pub fn model(device: usize, profile: &DeviceProfile, w: &Workload) -> Prediction {
    let positive = |x: f64, fallback: f64| {
        if x.is_finite() && x > 0.0 {
            x
        } else {
            fallback
        }
    };
    let units = f64::from(profile.compute_units.max(1));
    let bandwidth = positive(profile.memory_bandwidth, 1e9);
    let streamed = w.bytes_in.saturating_add(w.bytes_out) as f64;
    let work = w.work as f64;
    let gathered = w.gathers.missed_bytes(profile.cache_bytes)
        / positive(profile.gather_bandwidth, bandwidth / 4.0);
    let compute = match w.op {
        OpKind::Spgemm => {
            let runs = w.run_products.min(w.work) as f64;
            let accumulate = (work - runs) / (units * positive(profile.products_per_unit, 1e6))
                + runs / (units * positive(profile.run_products_per_unit, 1e6))
                + w.c_entries as f64 / (units * positive(profile.entries_per_unit, 1e6));
            let b_reads = work
                * w.bytes_per_unit as f64
                * uncached(w.gathers.operand_bytes, profile.cache_bytes);
            let skew = 1.0 + profile.skew_penalty.max(0.0) * w.skew.max(1.0).ln();
            accumulate.max((streamed + b_reads) / bandwidth) * skew + gathered
        }
        OpKind::Spmv => {
            streamed / bandwidth
                + work / (units * positive(profile.multiply_adds_per_unit, 1e8))
                + gathered
        }
        OpKind::Spmm => {
            (streamed / bandwidth)
                .max(work / (units * positive(profile.multiply_adds_per_unit, 1e8)))
                + gathered
        }
    };
    let transfer = profile
        .link_bandwidth
        .map_or(0.0, |link| streamed / positive(link, 1e9));
    let latency = profile.call_latency.max(0.0) + profile.cold_start.max(0.0);
    Prediction {
        device,
        compute,
        transfer,
        latency,
        total: latency + transfer + compute,
        source: Source::Model,
    }
}

/// The model's prediction for a device of `profile` on `w`, corrected by a measurement.
pub fn measured(
    device: usize,
    profile: &DeviceProfile,
    m: &Measured,
    source: Source,
    w: &Workload,
) -> Prediction {
    let p = model(device, profile, w);
    let (compute, transfer) = (p.compute * m.factor, p.transfer * m.factor);
    let latency = m.per_call + profile.cold_start.max(0.0);
    Prediction {
        device,
        compute,
        transfer,
        latency,
        total: latency + transfer + compute,
        source,
    }
}

/// The share of a device's cold start that the next call is charged with after
/// `calls_before` calls of the same operation: all of it for a first or second call, then
/// `1 / calls_before`. A caller that has made n calls is expected to make about as many more
/// (an AMG setup, an iterative solver, a loop over a graph's levels), over which a device
/// whose later calls are quicker earns its cold start back; without this, a device not yet
/// used would carry its cold start in every prediction and never be tried.
pub fn cold_start_share(calls_before: u64) -> f64 {
    1.0 / calls_before.max(1) as f64
}

impl<T: Scalar> Scheduler<T> {
    /// The model's decision for `workload`: each backend that runs the operation predicted
    /// from its [`DeviceProfile`], corrected by what runs in this process taught of it
    /// (`learned`), else by a calibration (`calibrated`; both one entry per backend, `None`
    /// where there is none), with its [cold start](DeviceProfile::cold_start) unless `ran`
    /// says it has run a call in this process, spread over the `calls_before` calls of this
    /// operation the caller made before this one ([`cold_start_share`]); the least
    /// predicted time wins, sharing included for SpGEMM. [`Chosen::Shared`] under
    /// [`share_always`](Self::share_always). [`Error::InvalidArgument`] when a slice does
    /// not have one entry per backend.
    pub fn predict(
        &self,
        workload: &Workload,
        calibrated: &[Option<Measured>],
        learned: &[Option<Measured>],
        ran: &[bool],
        calls_before: u64,
    ) -> Result<Choice> {
        let n = self.backends.len();
        if calibrated.len() != n || learned.len() != n || ran.len() != n {
            return Err(Error::InvalidArgument(format!(
                "{} calibrations, {} learned measurements and {} run flags given for {n} \
                 backends",
                calibrated.len(),
                learned.len(),
                ran.len(),
            )));
        }
        let part = self.taking_part(workload.op.operation())?;
        let failed: Vec<bool> = {
            let l = self.learned(workload.op.kind());
            l.alone.iter().map(|s| *s == Some(0.0)).collect()
        };
        let predictions: Vec<Prediction> = (0..self.backends.len())
            .filter(|&d| part[d])
            .map(|d| {
                let mut profile = self.backends[d].profile();
                profile.cold_start *= if ran[d] {
                    0.0
                } else {
                    cold_start_share(calls_before)
                };
                let needed = workload.bytes_in.saturating_add(workload.bytes_out);
                let fits = profile.link_bandwidth.is_none()
                    || needed <= crate::memory_budget(self.backends[d].as_ref()) / 2;
                if failed[d] || !fits {
                    let mut p = model(d, &profile, workload);
                    p.total = f64::INFINITY;
                    p.source = if failed[d] {
                        Source::Failed
                    } else {
                        Source::DoesNotFit
                    };
                    return p;
                }
                match (
                    learned[d].filter(Measured::is_valid),
                    calibrated[d].filter(Measured::is_valid),
                ) {
                    (Some(l), _) => measured(d, &profile, &l, Source::Learned, workload),
                    (None, Some(c)) => measured(d, &profile, &c, Source::Calibrated, workload),
                    (None, None) => model(d, &profile, workload),
                }
            })
            .collect();
        let small = self.min_chunk_products.saturating_mul(2);
        let shared =
            (workload.op == OpKind::Spgemm && predictions.len() > 1 && workload.work >= small)
                .then(|| {
                    let overhead = self
                        .learned(Kind::Spgemm)
                        .overhead
                        .unwrap_or(DEFAULT_SHARING_OVERHEAD);
                    let rate: f64 = predictions
                        .iter()
                        .filter(|p| p.total.is_finite() && p.total > 0.0)
                        .map(|p| 1.0 / p.total)
                        .sum();
                    if rate > 0.0 {
                        overhead / rate
                    } else {
                        f64::INFINITY
                    }
                });
        let best = predictions
            .iter()
            .min_by(|x, y| x.total.total_cmp(&y.total))
            .map(|p| (p.device, p.total));
        let chosen = match (best, shared) {
            _ if self.share_always => Chosen::Shared,
            (Some((_, alone)), Some(s)) if s < alone => Chosen::Shared,
            (Some((d, alone)), _) if alone.is_finite() => Chosen::Alone(d),
            (Some(_), _) => Chosen::Shared,
            (None, _) => Chosen::Shared,
        };
        Ok(Choice {
            workload: workload.clone(),
            predictions,
            shared,
            chosen,
        })
    }

    /// Learns from a whole call of `work` units that backend `device` ran alone outside the
    /// scheduler (as a [`Choice`] sent it) in `wall`: its speed, or for a SpGEMM too small to
    /// share, what a call costs it. Out-of-range devices are ignored.
    pub fn record_alone_run(&self, op: OpKind, device: usize, work: u64, wall: Duration) {
        if device >= self.backends.len() {
            return;
        }
        let mut learned = self.learned(op.kind());
        if op == OpKind::Spgemm && work < self.min_chunk_products.saturating_mul(2) {
            learned.record_small(device, wall);
        } else {
            learned.record_alone(device, work, wall);
        }
    }

    /// Learns that backend `device` failed a whole call of `op` outside the scheduler: it is
    /// no longer chosen for it.
    pub fn record_alone_failure(&self, op: OpKind, device: usize) {
        if device < self.backends.len() {
            self.learned(op.kind()).record_failed(device);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::{generate, BackendKind, DeviceInfo, DeviceKind, MemorySpace};

    fn profile(kind: DeviceKind, units: u32, space: MemorySpace) -> DeviceProfile {
        let info = DeviceInfo {
            backend: BackendKind::Other("x"),
            name: "x".into(),
            kind,
            memory_bytes: 1 << 34,
            compute_units: units,
        };
        DeviceProfile::defaults(&info, &space)
    }

    fn h200_machine() -> (DeviceProfile, DeviceProfile) {
        let cpu = profile(DeviceKind::Cpu, 16, MemorySpace::Host);
        let mut gpu = profile(
            DeviceKind::Gpu,
            132,
            MemorySpace::Device {
                backend: BackendKind::Cuda,
                id: 0,
            },
        );
        gpu.memory_bandwidth = 4.8e12;
        gpu.gather_bandwidth = 1.2e12;
        gpu.cache_bytes = 60 << 20;
        gpu.cold_start = 0.0;
        (cpu, gpu)
    }

    #[test]
    fn spgemm_from_host_goes_to_the_gpu_and_spmv_to_the_cpu() {
        let (cpu, gpu) = h200_machine();
        let mut large = 0;
        for class in generate::MatrixClass::ALL {
            let (a, b) = generate::product_operands::<f64>(class, 60_000, 3);
            let w = Workload::spgemm(&a, &b).unwrap();
            let (c, g) = (model(0, &cpu, &w), model(1, &gpu, &w));
            if class == generate::MatrixClass::Dense {
                // Hundreds of products per entry of C, B's rows dense: the CPU's dense
                // accumulators, vector adds along those rows, keep up with the GPU's whole
                // call (on the H200 3.4 ms against 3.9).
                let ratio = c.total / g.total;
                assert!(
                    (0.3..2.0).contains(&ratio),
                    "dense: CPU over GPU {ratio:.2}"
                );
                continue;
            }
            // Products of millions and more, as in the H200 measurements (whole SpGEMM calls
            // from host memory 1.65-3.4 times faster on the GPU there).
            if w.work >= 5_000_000 {
                large += 1;
                let ratio = c.total / g.total;
                assert!(
                    (1.05..8.0).contains(&ratio),
                    "{class}: SpGEMM of {} products predicted {:.2e} s on the GPU, {:.2e} s on the CPU",
                    w.work,
                    g.total,
                    c.total
                );
            }
            let w = Workload::spmv(&a);
            let (c, g) = (model(0, &cpu, &w), model(1, &gpu, &w));
            assert!(
                c.total < g.total,
                "{class}: SpMV predicted {:.2e} s on the CPU, {:.2e} s on the GPU",
                c.total,
                g.total
            );
            assert!(
                g.transfer > g.compute,
                "{class}: SpMV from host is transfer-bound"
            );
        }
        assert!(large >= 4, "only {large} classes with large products");
        // A small product goes to the CPU: the GPU's call and copies cost more than it.
        let small: Csr<f64> = generate::uniform(2_000, 2_000, 4, 1);
        let w = Workload::spgemm(&small, &small).unwrap();
        assert!(model(0, &cpu, &w).total < model(1, &gpu, &w).total);
    }

    #[test]
    fn c_is_estimated_between_its_entries_and_the_products() {
        let a: Csr<f64> = generate::uniform(3000, 3000, 6, 1);
        let w = Workload::spgemm(&a, &a).unwrap();
        let exact = analysis::analyze(&a, &a).unwrap();
        assert_eq!(w.work, exact.total_products);
        let ratio = w.c_entries as f64 / exact.nnz as f64;
        assert!(
            (0.9..1.1).contains(&ratio),
            "estimated {} for {}",
            w.c_entries,
            exact.nnz
        );
        assert!(w.skew >= 1.0);
        // No row of a uniform B is a run of consecutive columns; every row of a dense one is.
        assert_eq!(w.run_products, 0);
        let (dense, _) = generate::product_operands::<f64>(generate::MatrixClass::Dense, 300, 1);
        let wd = Workload::spgemm(&dense, &dense).unwrap();
        assert!(wd.run_products as f64 >= 0.99 * wd.work as f64, "{wd:?}");
        // A first sampled row holding more products than the sample is taken from its start:
        // C is not under-estimated (here it is dense, every entry).
        let full: Csr<f64> = generate::dense(600, 600, 2);
        let wf = Workload::spgemm(&full, &full).unwrap();
        assert_eq!(wf.work, 600 * 600 * 600);
        assert_eq!(wf.c_entries, 600 * 600, "{wf:?}");
        let tall: Csr<f64> = generate::uniform(3000, 2, 2, 1);
        let wide: Csr<f64> = generate::uniform(2, 3000, 2, 1);
        let dense = Workload::spgemm(&tall, &wide).unwrap();
        assert!(dense.c_entries <= 3000 * 3000);
        assert!(Workload::spgemm(&a, &tall).is_ok());
        assert!(matches!(
            Workload::spgemm(&tall, &a),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn a_long_a_has_its_products_estimated_from_a_sample() {
        let a: Csr<f64> = generate::uniform(400_000, 400_000, 6, 3);
        let w = Workload::spgemm(&a, &a).unwrap();
        let exact = analysis::analyze(&a, &a).unwrap().total_products;
        let ratio = w.work as f64 / exact as f64;
        assert!((0.97..1.03).contains(&ratio), "{} for {exact}", w.work);
        assert!(w.skew >= 1.0 && w.skew < 10.0, "{}", w.skew);
        let tall: Csr<f64> = generate::uniform(400_000, 2, 2, 1);
        assert!(matches!(
            Workload::spgemm(&tall, &a),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn a_measurement_corrects_the_model_and_keeps_its_shape() {
        let (_, gpu) = h200_machine();
        let a: Csr<f64> = generate::uniform(50_000, 50_000, 12, 1);
        let w = Workload::spmm(&a, 8);
        let p = model(1, &gpu, &w);
        let rest = p.compute + p.transfer;
        // Calls took twice the model's copies and computing, beside their per-call cost.
        let before = Measured {
            factor: 1.0,
            per_call: 2e-4,
        };
        let m = before.from_run(&p, 2e-4 + 2.0 * rest).unwrap();
        assert!((m.factor - 2.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.per_call, 2e-4);
        let again = measured(1, &gpu, &m, Source::Calibrated, &w);
        assert!((again.total - (2e-4 + 2.0 * rest)).abs() < 1e-12);
        assert_eq!(again.source, Source::Calibrated);
        // On another matrix the correction scales that matrix's prediction: a banded A whose
        // copies weigh differently against its computing is not predicted from a's speed.
        let (band, _) = generate::product_operands::<f64>(generate::MatrixClass::Banded, 80_000, 1);
        let wb = Workload::spmm(&band, 8);
        let pb = model(1, &gpu, &wb);
        let corrected = measured(1, &gpu, &m, Source::Learned, &wb);
        let expected = 2e-4 + 2.0 * (pb.compute + pb.transfer);
        assert!((corrected.total - expected).abs() <= 1e-12 * expected);
        // A call its per-call cost dominates teaches that cost, not a factor.
        let tiny: Csr<f64> = generate::uniform(20, 20, 2, 1);
        let wt = Workload::spmv(&tiny);
        let pt = model(1, &gpu, &wt);
        let slow = Measured {
            factor: 1.0,
            per_call: 1.0,
        }
        .from_run(&pt, 0.5)
        .unwrap();
        assert_eq!(slow.factor, 1.0);
        assert!((slow.per_call - (0.5 - pt.compute - pt.transfer)).abs() < 1e-12);
        // Two measurements weigh equally: factors by their geometric mean.
        let blended = Measured {
            factor: 4.0,
            per_call: 1e-3,
        }
        .blended(&Measured {
            factor: 1.0,
            per_call: 3e-3,
        });
        assert!((blended.factor - 2.0).abs() < 1e-12);
        assert!((blended.per_call - 2e-3).abs() < 1e-15);
        // Nothing to learn from a call the model predicts nothing for, or a time that is not.
        let nothing = Prediction {
            compute: 0.0,
            transfer: 0.0,
            ..pt.clone()
        };
        assert_eq!(before.from_run(&nothing, 1.0), None);
        assert_eq!(before.from_run(&pt, f64::NAN), None);
    }

    #[test]
    fn scattered_reads_are_told_from_reads_in_order() {
        let uniform: Csr<f64> = generate::uniform(200_000, 200_000, 8, 1);
        let (banded, _) =
            generate::product_operands::<f64>(generate::MatrixClass::Banded, 200_000, 1);
        let (stencil, _) =
            generate::product_operands::<f64>(generate::MatrixClass::Stencil3d, 20_000, 1);
        let wu = Workload::spmm(&uniform, 8);
        assert!(wu.gathers.scattered > 0.95, "{:?}", wu.gathers);
        assert_eq!(wu.gathers.count, uniform.nnz());
        assert_eq!(wu.gathers.line_bytes, 64);
        assert_eq!(wu.gathers.operand_bytes, 200_000 * 64);
        for a in [&banded, &stencil] {
            let g = Workload::spmv(a).gathers;
            assert!(g.scattered < 0.2, "{g:?}");
            assert_eq!(g.line_bytes, 64);
        }
        // An operand a quarter of the cache or less is read from cache in any order.
        assert_eq!(uncached(1 << 20, 4 << 20), 0.0);
        assert!((uncached(4 << 20, 4 << 20) - 0.75).abs() < 1e-12);
        assert_eq!(uncached(0, 0), 0.0);
        assert_eq!(wu.gathers.missed_bytes(u64::MAX / 8), 0.0);
        assert!(wu.gathers.missed_bytes(1 << 20) > 0.9 * uniform.nnz() as f64 * 64.0);
    }

    #[test]
    fn spmm_of_scattered_columns_goes_to_the_gpu_and_of_a_band_to_the_cpu() {
        // The H200 machine's host: 300 MiB of last-level cache. Uniform SpMM (8 columns,
        // 4·10^6 rows) measured 91 ms on its 16 threads against 35.5 on the GPU from host
        // memory; a stencil's 5.1 against 6.7.
        let (mut cpu, gpu) = h200_machine();
        cpu.cache_bytes = 300 << 20;
        let uniform: Csr<f64> = generate::uniform(4_000_000, 4_000_000, 8, 1);
        let w = Workload::spmm(&uniform, 8);
        let (c, g) = (model(0, &cpu, &w), model(1, &gpu, &w));
        assert!(
            g.total < c.total,
            "uniform SpMM: GPU {:.2e} s, CPU {:.2e} s",
            g.total,
            c.total
        );
        let (banded, _) =
            generate::product_operands::<f64>(generate::MatrixClass::Banded, 1_000_000, 1);
        let w = Workload::spmm(&banded, 8);
        let (c, g) = (model(0, &cpu, &w), model(1, &gpu, &w));
        assert!(
            c.total < g.total,
            "banded SpMM: GPU {:.2e} s, CPU {:.2e} s",
            g.total,
            c.total
        );
        // The same vector operand fits the cache: SpMV of the uniform matrix stays on the CPU.
        let w = Workload::spmv(&uniform);
        assert!(model(0, &cpu, &w).total < model(1, &gpu, &w).total);
    }

    #[test]
    fn a_device_not_ready_pays_its_cold_start_in_the_prediction() {
        let (cpu, mut gpu) = h200_machine();
        let a: Csr<f64> = generate::uniform(300_000, 300_000, 6, 1);
        let w = Workload::spgemm(&a, &a).unwrap();
        let warm = model(1, &gpu, &w);
        assert!(warm.total < model(0, &cpu, &w).total);
        gpu.cold_start = 1.0;
        let cold = model(1, &gpu, &w);
        assert!((cold.total - warm.total - 1.0).abs() < 1e-9);
        assert!(cold.total > model(0, &cpu, &w).total);
        let m = Measured {
            factor: 1.0,
            per_call: 1e-3,
        };
        let corrected = measured(1, &gpu, &m, Source::Calibrated, &w);
        assert!((corrected.latency - 1.001).abs() < 1e-9);
    }

    #[test]
    fn op_names_parse_back() {
        for op in OpKind::ALL {
            assert_eq!(op.name().parse::<OpKind>().unwrap(), op);
        }
        assert!("gemm".parse::<OpKind>().is_err());
    }
}

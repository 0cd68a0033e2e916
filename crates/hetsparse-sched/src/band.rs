//! DIA × DIA over several backends: Matam et al.'s row split for band matrices (§IV.C).
//!
//! Rows `r0..r1` of `C = A · B` need rows `r0..r1` of A and the rows of B that A's band reaches
//! there ([`hetsparse_core::DiaRowBlock`]). C is allocated once, and each backend writes its rows
//! of every diagonal where they lie ([`Backend::dia_spgemm_rows`]).
//!
//! How many rows each backend takes comes from a cost model per backend,
//! `fixed + per_product · R + per_output · S` seconds, where `R` is the product's multiply-adds
//! (`rows · Ad · Bd` for full bands) and `S` its output slots (`rows · (Ad + Bd − 1)`), both
//! counted exactly from the offsets. With Matam's CPU (`α·R`) and GPU (`β·R + γ·S`, the copy of
//! C back included) the rows where both finish together are the CPU's share
//! `t = (βR + γS) / ((α + β)R + γS)`, the paper's equation; the model also lets every backend
//! pay for its own output and a fixed cost per call, and balances any number of backends the
//! same way.
//!
//! The model times each backend alone. Side by side, backends share the host's memory and
//! cores, which the model does not see, so every run's measured time is compared with its
//! prediction: the last shared run's ratio corrects the split's predicted time, each backend's
//! last run alone corrects its own, and a product is split only while the corrected split
//! beats the fastest backend alone (unless [`Scheduler::share_always`]). A backend the model
//! puts within twice the fastest but never run alone runs one whole product, to learn its own.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::time::{Duration, Instant};

use hetsparse_core::backend::check;
use hetsparse_core::host::try_with_capacity;
use hetsparse_core::{Backend, Dia, Error, Operation, Result, RunControl, Scalar};

use crate::executor::{self, Call, Job, Plan, RowTask};
use crate::guard;
use crate::policy::{self, Policy};
use crate::report::{DeviceReport, RunReport};
use crate::Scheduler;

/// Rows of the calibration products made when a product needs a cost model that is missing:
/// enough for a band product to leave the caches, as the products it predicts do.
const AUTO_CALIBRATION_ROWS: usize = 1 << 20;

/// Band widths (diagonals of A, diagonals of B) of the calibration products: products and
/// output slots in different ratios, so that the two can be told apart.
const CALIBRATION_WIDTHS: [(usize, usize); 4] = [(1, 1), (3, 3), (9, 9), (3, 27)];

/// What a DIA × DIA product costs one backend, in seconds:
/// `fixed_secs + secs_per_product · R + secs_per_output · S` (see [`BandWork`]).
///
/// [`Scheduler::calibrate_band`] fits it on the machine; Matam et al.'s α is a CPU's
/// `secs_per_product`, β and γ a GPU's `secs_per_product` and `secs_per_output`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandCost {
    /// Cost of a call, whatever its size.
    pub fixed_secs: f64,
    /// Cost of one multiply-add.
    pub secs_per_product: f64,
    /// Cost of one slot of C (writing it, and bringing it back from a device).
    pub secs_per_output: f64,
}

impl BandCost {
    /// The predicted seconds for `work`.
    pub fn secs(&self, work: BandWork) -> f64 {
        self.fixed_secs
            + self.secs_per_product * work.products as f64
            + self.secs_per_output * work.outputs as f64
    }

    fn check(&self) -> Result<()> {
        let terms = [self.fixed_secs, self.secs_per_product, self.secs_per_output];
        if terms.iter().any(|t| !t.is_finite() || *t < 0.0) {
            return Err(Error::InvalidArgument(format!(
                "band cost {self:?}: every term must be a finite non-negative number"
            )));
        }
        if self.secs_per_product == 0.0 && self.secs_per_output == 0.0 {
            return Err(Error::InvalidArgument(format!(
                "band cost {self:?}: a product must cost something per multiply-add or per output slot"
            )));
        }
        Ok(())
    }
}

/// The work of a DIA × DIA product, as the cost model counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BandWork {
    /// Multiply-adds: for each pair of diagonals, the rows where both meet inside the matrices
    /// (Matam's `R = rows · Ad · Bd` for full bands).
    pub products: u64,
    /// Slots of C: rows times C's diagonals (Matam's `S = rows · (Ad + Bd − 1)`).
    pub outputs: u64,
}

impl BandWork {
    /// The work of `A · B`; the shapes must chain.
    pub fn of<T: Scalar>(a: &Dia<T>, b: &Dia<T>) -> Result<Self> {
        check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
        Ok(Self::of_rows(
            a,
            b,
            0..a.nrows(),
            a.product_offsets(b).len(),
        ))
    }

    /// The work of rows `rows` of `A · B`, whose C has `diagonals` diagonals.
    fn of_rows<T: Scalar>(a: &Dia<T>, b: &Dia<T>, rows: Range<usize>, diagonals: usize) -> Self {
        let (k, n) = (a.ncols() as i64, b.ncols() as i64);
        let (r0, r1) = (rows.start as i64, rows.end as i64);
        let mut products = 0u64;
        for &oa in a.offsets() {
            for &ob in b.offsets() {
                // Rows i with r0 <= i < r1, 0 <= i + oa < k and 0 <= i + oa + ob < n.
                let first = r0.max(-oa).max(-oa - ob);
                let last = r1.min(k - oa).min(n - oa - ob);
                products += (last - first).max(0) as u64;
            }
        }
        BandWork {
            products,
            outputs: (rows.len() as u64).saturating_mul(diagonals as u64),
        }
    }
}

/// One timed product of a calibration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub work: BandWork,
    pub secs: f64,
}

/// The least-squares fit of `secs ≈ fixed + α·R + γ·S` with no negative term: the best fit over
/// the subsets of the three terms (each with α or γ) whose coefficients all come out
/// non-negative (a negative cost would predict that more work takes less time). `None` without
/// a usable sample.
pub(crate) fn fit(samples: &[Sample]) -> Option<BandCost> {
    let rows: Vec<([f64; 3], f64)> = samples
        .iter()
        .filter(|s| s.secs.is_finite() && s.secs >= 0.0)
        .map(|s| ([1.0, s.work.products as f64, s.work.outputs as f64], s.secs))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut best: Option<(f64, [f64; 3])> = None;
    // Every fit keeps a cost per unit of work (bit 1 or 2): a model where work were free would
    // send every row to one backend.
    for mask in (2u32..8).filter(|m| m & 0b110 != 0) {
        let terms: Vec<usize> = (0..3).filter(|t| mask & (1 << t) != 0).collect();
        let Some(coefficients) = least_squares(&rows, &terms) else {
            continue;
        };
        if coefficients.iter().any(|c| *c < 0.0 || !c.is_finite()) {
            continue;
        }
        let mut full = [0.0; 3];
        for (&t, &c) in terms.iter().zip(&coefficients) {
            full[t] = c;
        }
        let residual: f64 = rows
            .iter()
            .map(|(x, y)| {
                let e = y - (0..3).map(|t| x[t] * full[t]).sum::<f64>();
                e * e
            })
            .sum();
        // A fit with more terms must be better by more than rounding to be taken.
        if best.is_none_or(|(r, _)| residual < r * (1.0 - 1e-9)) {
            best = Some((residual, full));
        }
    }
    let (_, [fixed_secs, secs_per_product, secs_per_output]) = best?;
    let cost = BandCost {
        fixed_secs,
        secs_per_product,
        secs_per_output,
    };
    cost.check().is_ok().then_some(cost)
}

/// Least squares on the columns `terms` of `rows` (normal equations on columns scaled to 1,
/// Gaussian elimination with partial pivoting); `None` when the columns are dependent.
fn least_squares(rows: &[([f64; 3], f64)], terms: &[usize]) -> Option<Vec<f64>> {
    let n = terms.len();
    let scale: Vec<f64> = terms
        .iter()
        .map(|&t| rows.iter().map(|(x, _)| x[t].abs()).fold(0.0, f64::max))
        .collect();
    if scale.contains(&0.0) {
        return None;
    }
    // [XᵀX | Xᵀy] on the scaled columns.
    let mut m = vec![vec![0.0; n + 1]; n];
    for (x, y) in rows {
        let xs: Vec<f64> = terms.iter().zip(&scale).map(|(&t, s)| x[t] / s).collect();
        for i in 0..n {
            for j in 0..n {
                m[i][j] += xs[i] * xs[j];
            }
            m[i][n] += xs[i] * y;
        }
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 * rows.len() as f64 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (row, line) in m.iter_mut().enumerate() {
            if row != col {
                let f = line[col] / pivot_row[col];
                for (x, p) in line.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i] / scale[i]).collect())
}

/// Rows per device so that all finish together: device `d` takes `r_d` rows for
/// `fixed_d + r_d · per_row_d` seconds (`costs[d] = (fixed_d, per_row_d)`). Devices whose
/// fixed cost alone exceeds the common finishing time take none. Fractional rows, summing to
/// `rows`.
pub(crate) fn balance(costs: &[(f64, f64)], rows: usize) -> Vec<f64> {
    let mut shares = vec![0.0; costs.len()];
    if rows == 0 || costs.is_empty() {
        return shares;
    }
    let per_row = |d: usize| costs[d].1.max(f64::MIN_POSITIVE);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&x, &y| costs[x].0.total_cmp(&costs[y].0));
    // The cheapest-to-start k devices share the rows and finish at `finish`; the best k is the
    // one with the earliest finish in which no device starts after it.
    let mut best: Option<(f64, usize)> = None;
    let (mut inverse, mut weighted) = (0.0, 0.0);
    for (k, &d) in order.iter().enumerate() {
        inverse += 1.0 / per_row(d);
        weighted += costs[d].0 / per_row(d);
        let finish = (rows as f64 + weighted) / inverse;
        if finish >= costs[d].0 && best.is_none_or(|(f, _)| finish < f) {
            best = Some((finish, k + 1));
        }
    }
    let (finish, used) = best.unwrap_or((0.0, 1));
    if best.is_none() {
        shares[order[0]] = rows as f64;
        return shares;
    }
    for &d in &order[..used] {
        shares[d] = ((finish - costs[d].0) / per_row(d)).max(0.0);
    }
    shares
}

/// Cuts `rows` into consecutive ranges, one per share (in order), each as near its share of
/// the rows as whole rows allow.
pub(crate) fn cut_rows(shares: &[f64], rows: usize) -> Vec<Range<usize>> {
    let total: f64 = shares.iter().sum();
    let mut ranges = Vec::with_capacity(shares.len());
    let (mut start, mut cumulative) = (0usize, 0.0);
    for (i, share) in shares.iter().enumerate() {
        cumulative += share;
        let end = if i + 1 == shares.len() {
            rows
        } else if total <= 0.0 {
            start
        } else {
            ((cumulative / total * rows as f64).round() as usize).clamp(start, rows)
        };
        ranges.push(start..end);
        start = end;
    }
    ranges
}

/// Out slots of C: for each diagonal, the rows one part writes.
type Slots<'c, T> = Vec<&'c mut [MaybeUninit<T>]>;

/// Rows of a band product, as the executor runs them: each task owns its rows of every
/// diagonal of C and writes them in place.
struct BandRows<'a, 'c, T: Scalar> {
    a: &'a Dia<T>,
    b: &'a Dia<T>,
    offsets: &'a [i64],
    /// The tasks' slots borrow C for `'c`.
    _slots: PhantomData<&'c ()>,
}

impl<'c, T: Scalar> BandRows<'_, 'c, T> {
    /// The task of `rows`, owning `slots` (its rows of each diagonal).
    fn task(&self, rows: Range<usize>, slots: Slots<'c, T>) -> RowTask<Slots<'c, T>> {
        let work = BandWork::of_rows(self.a, self.b, rows.clone(), self.offsets.len());
        RowTask::new(rows, work.products, slots)
    }
}

impl<'c, T: Scalar> Job<T> for BandRows<'_, 'c, T> {
    type Task = RowTask<Slots<'c, T>>;
    type Output = ();
    type Placement = ();

    fn place(&self, _device: &dyn Backend<T>, _d: usize) -> Result<()> {
        Ok(())
    }

    /// Halves a task of more than one row, and its slots with it.
    fn split(&self, task: Self::Task) -> std::result::Result<Vec<Self::Task>, Self::Task> {
        let units = |rows: Range<usize>| self.task(rows, Vec::new()).units;
        let split_slots = |slots: Slots<'c, T>, half: usize| {
            slots
                .into_iter()
                .map(|slot| slot.split_at_mut(half))
                .unzip()
        };
        task.halve(units, split_slots).map(Vec::from)
    }

    /// Each task's rows of `A · B`, written into its slots (every slot of its rows of every
    /// diagonal, [`Backend::dia_spgemm_rows`]'s contract).
    fn compute(
        &self,
        device: &dyn Backend<T>,
        _placement: &(),
        batch: &mut [Self::Task],
        call: &mut Call<'_, ()>,
    ) -> Result<()> {
        for (i, task) in batch.iter_mut().enumerate() {
            let _s = tracing::debug_span!("band_part", rows = ?task.rows).entered();
            call.begin(std::slice::from_ref(task), i);
            let rows = task.rows.clone();
            let done = device.dia_spgemm_rows(self.a, self.b, rows, self.offsets, &mut task.slots);
            if done.is_ok() {
                call.count_done(0);
            }
            call.end();
            done?;
            call.finish(i, None);
        }
        Ok(())
    }
}

/// A band matrix of `rows × rows` with `width` diagonals around the main one, for calibration.
fn calibration_band<T: Scalar>(rows: usize, width: usize, seed: u64) -> Result<Dia<T>> {
    let low = -((width / 2) as i64);
    let offsets: Vec<i64> = (0..width as i64)
        .map(|d| low + d)
        .filter(|o| o.unsigned_abs() < rows as u64)
        .collect();
    hetsparse_core::generate::band_dia(rows, rows, &offsets, seed)
}

/// What a scheduler knows of band products: each backend's cost model and how far runs
/// strayed from it.
#[derive(Debug, Default)]
pub(crate) struct BandState {
    costs: Vec<Option<BandCost>>,
    /// The last shared run's measured time over its predicted time.
    shared_factor: Option<f64>,
    /// Per backend, its last run alone's measured time over its predicted time.
    alone_factor: Vec<Option<f64>>,
}

/// What a band product's plan expects.
#[derive(Clone, Copy, Debug)]
struct Prediction {
    /// Split between backends, or run by `device` alone.
    shared: bool,
    device: usize,
    secs: f64,
}

impl<T: Scalar> Scheduler<T> {
    /// Fits each backend's [`BandCost`] on the machine (Matam et al.'s α, β and γ): DIA × DIA
    /// products of band matrices of `rows` and `rows / 8` rows, in four band widths, timed on
    /// each backend alone, in turn (the better of two calls each). Returns the costs, `None` for
    /// a backend that cannot run them, and keeps them for later DIA products.
    pub fn calibrate_band(&self, rows: usize) -> Result<Vec<Option<BandCost>>> {
        if self.backends.is_empty() {
            return Err(self.no_device());
        }
        let _span = tracing::info_span!("calibrate_band", rows).entered();
        let rows = rows.max(8);
        let mut products = Vec::new();
        for size in [rows, rows / 8] {
            for (k, &(wa, wb)) in CALIBRATION_WIDTHS.iter().enumerate() {
                let a = calibration_band::<T>(size, wa, k as u64)?;
                let b = calibration_band::<T>(size, wb, k as u64 + 1)?;
                let work = BandWork::of(&a, &b)?;
                products.push((a, b, work));
            }
        }
        let mut costs = Vec::with_capacity(self.backends.len());
        for backend in &self.backends {
            if !backend
                .capabilities()
                .supports(Operation::DiaSpgemm, T::TYPE)
            {
                costs.push(None);
                continue;
            }
            let mut samples = Vec::with_capacity(products.len());
            // A first call outside the samples: module loads and first touches.
            // A panic is the backend's failure, as in a product (nothing is learned of it).
            let run = RunControl::unwatched();
            let product = |a: &Dia<T>, b: &Dia<T>| {
                crate::guard::device_call(backend.as_ref(), &run, || backend.dia_spgemm(a, b))
            };
            let first_failed = products
                .first()
                .is_some_and(|(a, b, _)| product(a, b).is_err());
            for (a, b, work) in &products {
                if first_failed {
                    break;
                }
                let mut best = f64::INFINITY;
                for _ in 0..2 {
                    let start = Instant::now();
                    if product(a, b).is_ok() {
                        best = best.min(start.elapsed().as_secs_f64());
                    }
                }
                samples.push(Sample {
                    work: *work,
                    secs: best,
                });
            }
            costs.push(fit(&samples));
        }
        *self.band.lock().unwrap_or_else(|p| p.into_inner()) = BandState {
            costs: costs.clone(),
            ..BandState::default()
        };
        Ok(costs)
    }

    /// Sets each backend's [`BandCost`] (one per backend), as DIA × DIA products split by them.
    pub fn with_band_costs(self, costs: &[BandCost]) -> Result<Self> {
        if costs.len() != self.backends.len() {
            return Err(Error::InvalidArgument(format!(
                "{} band costs given for {} backends",
                costs.len(),
                self.backends.len()
            )));
        }
        for cost in costs {
            cost.check()?;
        }
        *self.band.lock().unwrap_or_else(|p| p.into_inner()) = BandState {
            costs: costs.iter().copied().map(Some).collect(),
            ..BandState::default()
        };
        Ok(self)
    }

    /// Each backend's [`BandCost`], where calibrated or given.
    pub fn band_costs(&self) -> Vec<Option<BandCost>> {
        let band = self.band.lock().unwrap_or_else(|p| p.into_inner());
        (0..self.backends.len())
            .map(|d| band.costs.get(d).copied().flatten())
            .collect()
    }

    /// `A · B` for band matrices, its rows split between the backends (see the module docs).
    /// C is allocated once and each backend writes its rows of every diagonal in place.
    pub(crate) fn dia_scheduled(&self, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
        let started = Instant::now();
        self.policy.validate(self.backends.len())?;
        let part = self.taking_part(Operation::DiaSpgemm)?;
        check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
        let (m, n) = (a.nrows(), b.ncols());
        let offsets = a.product_offsets(b);
        if offsets.is_empty() {
            return Ok(Dia::try_new(m, n, Vec::new(), Vec::new())?);
        }
        let work = BandWork::of_rows(a, b, 0..m, offsets.len());
        let participants: Vec<usize> = (0..self.backends.len()).filter(|&d| part[d]).collect();
        let _span = tracing::info_span!(
            "dia_spgemm",
            rows = m,
            products = work.products,
            outputs = work.outputs,
            backends = participants.len()
        )
        .entered();
        let (shares, prediction) = self.band_shares(&participants, work, m)?;
        let planned = Instant::now();
        let ranges = cut_rows(&shares, m);
        let whole: Vec<usize> = (0..ranges.len())
            .filter(|&k| !ranges[k].is_empty())
            .map(|k| participants[k])
            .collect();
        if let [d] = whole[..] {
            return self.dia_on_one(a, b, d, &participants, work, prediction, planned, started);
        }
        let len = m
            .checked_mul(offsets.len())
            .ok_or_else(|| Error::InvalidArgument("DIA×DIA SpGEMM: C's size overflows".into()))?;
        let mut data: Vec<T> = try_with_capacity(len, "DIA×DIA result")?;
        hetsparse_core::advise_huge_pages(data.spare_capacity_mut());
        // Each part's rows of every diagonal: disjoint slices of C's one allocation.
        let mut slots: Vec<Slots<'_, T>> = ranges
            .iter()
            .map(|_| Vec::with_capacity(offsets.len()))
            .collect();
        for diagonal in data.spare_capacity_mut()[..len].chunks_mut(m) {
            let mut rest = diagonal;
            for (k, rows) in ranges.iter().enumerate() {
                let (head, tail) = rest.split_at_mut(rows.len());
                slots[k].push(head);
                rest = tail;
            }
        }
        let job = BandRows {
            a,
            b,
            offsets: &offsets,
            _slots: PhantomData,
        };
        // Each participant's rows; a part whose backend fails goes to the others.
        let own = (0..self.backends.len())
            .map(|d| {
                participants
                    .iter()
                    .position(|&p| p == d)
                    .map(|k| (ranges[k].clone(), std::mem::take(&mut slots[k])))
                    .filter(|(rows, _)| !rows.is_empty())
                    .map(|(rows, c)| job.task(rows, c))
                    .into_iter()
                    .collect()
            })
            .collect();
        let plan = Plan {
            devices: &self.backends,
            taking_part: part,
            own,
            shared: Vec::new(),
            speeds: vec![None; self.backends.len()],
        };
        let reports = executor::run(&job, plan, &RunControl::new())?.reports;
        // SAFETY: the parts cover rows 0..m and the executor returned without error, so every
        // part (or every piece it was split into) was computed by a backend, which writes every
        // slot of its rows of every diagonal (`dia_spgemm_rows`'s contract).
        unsafe { data.set_len(len) };
        let c = Dia::try_new(m, n, offsets, data)?;
        if reports.iter().all(|r| r.failure.is_none()) {
            self.learn_band(prediction, planned.elapsed().as_secs_f64());
        }
        self.record_report(RunReport {
            devices: reports,
            chunks_planned: ranges.iter().filter(|r| !r.is_empty()).count(),
            wall: started.elapsed(),
            counting: Duration::ZERO,
            assembly: Duration::ZERO,
        });
        Ok(c)
    }

    /// The whole product on backend `d` (its own `dia_spgemm`, on the calling thread: no
    /// split, so nothing to gain from writing into a shared C), and on failure on the others,
    /// cheapest first.
    #[allow(clippy::too_many_arguments)]
    fn dia_on_one(
        &self,
        a: &Dia<T>,
        b: &Dia<T>,
        d: usize,
        participants: &[usize],
        work: BandWork,
        prediction: Option<Prediction>,
        planned: Instant,
        started: Instant,
    ) -> Result<Dia<T>> {
        let mut reports: Vec<DeviceReport> = self
            .backends
            .iter()
            .map(|d| DeviceReport::new(d.info().name))
            .collect();
        let mut dead = vec![false; self.backends.len()];
        let mut last = None;
        let mut candidates = vec![d];
        while let Some(&next) = candidates.first() {
            candidates.remove(0);
            let start = Instant::now();
            let backend = self.backends[next].as_ref();
            // A panic is this backend's failure, as in every other call into a backend.
            let done = guard::device_call(backend, &RunControl::new(), || backend.dia_spgemm(a, b));
            match done {
                Ok(c) => {
                    record(&mut reports[next], work, start.elapsed());
                    if last.is_none() {
                        self.learn_band(prediction, planned.elapsed().as_secs_f64());
                    }
                    self.record_report(RunReport {
                        devices: reports,
                        chunks_planned: 1,
                        wall: started.elapsed(),
                        counting: Duration::ZERO,
                        assembly: Duration::ZERO,
                    });
                    return Ok(c);
                }
                Err(e) => {
                    tracing::warn!(device = next, error = %e, "a band product failed; rerunning it");
                    reports[next].failure = Some(e.to_string());
                    dead[next] = true;
                    last = Some(e);
                    if candidates.is_empty() {
                        candidates = self.rescue_order(participants, &dead, work);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| self.no_device()))
    }

    /// Each participant's share of the rows under the policy: the assumed speeds for
    /// [`Policy::RowSplitAssumed`], else the band costs (calibrated first where missing).
    /// Products too small to cut run whole on the backend predicted fastest.
    fn band_shares(
        &self,
        participants: &[usize],
        work: BandWork,
        rows: usize,
    ) -> Result<(Vec<f64>, Option<Prediction>)> {
        if let Policy::RowSplitAssumed(speeds) = &self.policy {
            let speeds: Vec<f64> = participants.iter().map(|&d| speeds[d]).collect();
            return Ok((policy::shares(&speeds), None));
        }
        let mut costs = self.band_costs();
        if participants.iter().any(|&d| costs[d].is_none()) && participants.len() > 1 {
            costs = self.calibrate_band(rows.min(AUTO_CALIBRATION_ROWS))?;
        }
        let per_row = |cost: &BandCost| {
            (cost.secs_per_product * work.products as f64
                + cost.secs_per_output * work.outputs as f64)
                / rows.max(1) as f64
        };
        let model: Vec<(f64, f64)> = participants
            .iter()
            .map(|&d| match &costs[d] {
                Some(c) => (c.fixed_secs, per_row(c)),
                // A backend that failed its calibration takes nothing.
                None => (f64::INFINITY, f64::INFINITY),
            })
            .collect();
        let (shared_factor, alone_factor) = {
            let band = self.band.lock().unwrap_or_else(|p| p.into_inner());
            (band.shared_factor, band.alone_factor.clone())
        };
        // Each backend alone: the model's time, corrected by what its last run alone took.
        let alone = |i: usize| {
            let (fixed, per_row) = model[i];
            (fixed + per_row * rows as f64)
                * alone_factor
                    .get(participants[i])
                    .copied()
                    .flatten()
                    .unwrap_or(1.0)
        };
        let fastest = (0..model.len())
            .min_by(|&x, &y| alone(x).total_cmp(&alone(y)))
            .unwrap_or(0);
        // A backend never run alone has only the model's word for it. One the model puts
        // within twice the fastest's (corrected) time runs the next whole product, once, so
        // that a model wrong about which backend is faster is found out.
        let untried = (0..model.len())
            .filter(|&i| {
                i != fastest
                    && alone_factor
                        .get(participants[i])
                        .copied()
                        .flatten()
                        .is_none()
                    && alone(i) <= 2.0 * alone(fastest)
            })
            .min_by(|&x, &y| alone(x).total_cmp(&alone(y)));
        let whole = || {
            let chosen = untried.unwrap_or(fastest);
            let mut shares = vec![0.0; model.len()];
            shares[chosen] = 1.0;
            let prediction = Prediction {
                shared: false,
                device: participants[chosen],
                secs: model[chosen].0 + model[chosen].1 * rows as f64,
            };
            (shares, Some(prediction))
        };
        let small = work.products < self.min_chunk_products && !self.share_always;
        if small || participants.len() == 1 {
            return Ok(whole());
        }
        // Backends without a cost (their calibration failed) take nothing.
        let costed: Vec<usize> = (0..model.len())
            .filter(|&i| model[i].0.is_finite() && model[i].1.is_finite())
            .collect();
        if costed.is_empty() {
            return Ok((vec![1.0 / model.len() as f64; model.len()], None));
        }
        let rows_each = balance(&costed.iter().map(|&i| model[i]).collect::<Vec<_>>(), rows);
        let mut shares = vec![0.0; model.len()];
        let mut finish: f64 = 0.0;
        for (&i, r) in costed.iter().zip(rows_each) {
            shares[i] = r;
            if r > 0.0 {
                finish = finish.max(model[i].0 + model[i].1 * r);
            }
        }
        // The model knows each backend alone; side by side they share the host's memory and
        // cores. What the last shared run took against its prediction corrects the split's
        // time, and the split is made only where it still beats the fastest backend alone.
        if !self.share_always && finish * shared_factor.unwrap_or(1.0) >= alone(fastest) {
            return Ok(whole());
        }
        let prediction = Prediction {
            shared: true,
            device: participants[fastest],
            secs: finish,
        };
        Ok((shares, Some(prediction)))
    }

    /// Learns from a run that `prediction` planned: the measured time over the predicted one,
    /// for a shared run or for the backend that ran alone.
    fn learn_band(&self, prediction: Option<Prediction>, secs: f64) {
        let Some(p) = prediction.filter(|p| p.secs.is_finite() && p.secs > 0.0 && secs > 0.0)
        else {
            return;
        };
        let factor = secs / p.secs;
        let mut band = self.band.lock().unwrap_or_else(|p| p.into_inner());
        if p.shared {
            band.shared_factor = Some(factor);
        } else {
            if band.alone_factor.len() <= p.device {
                band.alone_factor.resize(p.device + 1, None);
            }
            band.alone_factor[p.device] = Some(factor);
        }
    }

    /// Live participants, cheapest first for `work` where costs are known.
    fn rescue_order(&self, participants: &[usize], dead: &[bool], work: BandWork) -> Vec<usize> {
        let costs = self.band_costs();
        let mut order: Vec<usize> = participants.iter().copied().filter(|&d| !dead[d]).collect();
        let predicted = |d: usize| costs[d].map_or(f64::INFINITY, |c| c.secs(work));
        order.sort_by(|&x, &y| predicted(x).total_cmp(&predicted(y)));
        order
    }
}

/// Adds a computed part to its backend's report.
fn record(report: &mut DeviceReport, work: BandWork, busy: Duration) {
    report.chunks += 1;
    report.busy += busy;
    // The unit of the SpGEMM reports, intermediate products: here the part's multiply-adds.
    report.products += work.products;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(rows: usize, cols: usize, offsets: &[i64], seed: u64) -> Dia<f64> {
        hetsparse_core::generate::band_dia(rows, cols, offsets, seed).expect("band")
    }

    #[test]
    fn work_counts_products_and_output_slots() {
        // Tridiagonal × tridiagonal, 10 × 10: 9 pairs, C has 5 diagonals.
        let a = band(10, 10, &[-1, 0, 1], 1);
        let w = BandWork::of(&a, &a).unwrap();
        assert_eq!(w.outputs, 50);
        // Row i gets A[i, i+oa]·A[i+oa, i+oa+ob] where both columns lie in 0..10.
        let mut expected = 0;
        for i in 0..10i64 {
            for oa in -1..=1 {
                for ob in -1..=1 {
                    if (0..10).contains(&(i + oa)) && (0..10).contains(&(i + oa + ob)) {
                        expected += 1;
                    }
                }
            }
        }
        assert_eq!(w.products, expected);
    }

    #[test]
    fn the_fit_finds_the_costs_it_was_made_from() {
        let truth = BandCost {
            fixed_secs: 2e-4,
            secs_per_product: 3e-10,
            secs_per_output: 5e-9,
        };
        let samples: Vec<Sample> = [
            (100u64, 50u64),
            (9_000, 5_000),
            (81_000, 17_000),
            (300_000, 29_000),
            (1_000, 1_000),
        ]
        .iter()
        .map(|&(p, o)| {
            let work = BandWork {
                products: p,
                outputs: o,
            };
            Sample {
                work,
                secs: truth.secs(work),
            }
        })
        .collect();
        let cost = fit(&samples).expect("a fit");
        assert!((cost.fixed_secs - truth.fixed_secs).abs() < 1e-9);
        assert!((cost.secs_per_product / truth.secs_per_product - 1.0).abs() < 1e-6);
        assert!((cost.secs_per_output / truth.secs_per_output - 1.0).abs() < 1e-6);
        // Times that fall with work would need a negative cost: the fit keeps every term >= 0.
        let falling: Vec<Sample> = samples
            .iter()
            .map(|s| Sample {
                work: s.work,
                secs: 1.0 / (1.0 + s.work.products as f64),
            })
            .collect();
        let cost = fit(&falling).expect("a fit");
        assert!(
            cost.fixed_secs >= 0.0 && cost.secs_per_product >= 0.0 && cost.secs_per_output >= 0.0
        );
        assert!(fit(&[]).is_none());
    }

    #[test]
    fn balance_gives_matams_share_without_fixed_costs() {
        // Matam §IV.C: CPU αR, GPU βR + γS; the CPU's share t = (βR+γS)/((α+β)R+γS).
        let (alpha, beta, gamma, r, s) = (4e-9, 1e-9, 6e-9, 9.0e6, 5.0e6);
        let rows = 1_000_000;
        let cpu = (0.0, alpha * r / rows as f64);
        let gpu = (0.0, (beta * r + gamma * s) / rows as f64);
        let shares = balance(&[cpu, gpu], rows);
        let t = (beta * r + gamma * s) / ((alpha + beta) * r + gamma * s);
        assert!(
            (shares[0] / rows as f64 - t).abs() < 1e-12,
            "{shares:?} vs {t}"
        );
        assert!((shares[0] + shares[1] - rows as f64).abs() < 1e-6);
    }

    #[test]
    fn balance_leaves_out_devices_too_slow_to_start() {
        // Equal speeds, no fixed costs: halves.
        assert_eq!(balance(&[(0.0, 1.0), (0.0, 1.0)], 10), vec![5.0, 5.0]);
        // A fixed cost longer than the whole product elsewhere: that device takes nothing.
        assert_eq!(balance(&[(0.0, 1.0), (100.0, 1.0)], 10), vec![10.0, 0.0]);
        // A fixed cost of 4 rows' time: both finish at 7.
        let s = balance(&[(0.0, 1.0), (4.0, 1.0)], 10);
        assert!(
            (s[0] - 7.0).abs() < 1e-12 && (s[1] - 3.0).abs() < 1e-12,
            "{s:?}"
        );
        assert_eq!(balance(&[(0.0, 1.0)], 0), vec![0.0]);
    }

    #[test]
    fn cut_rows_follows_the_shares() {
        assert_eq!(cut_rows(&[1.0, 3.0], 8), vec![0..2, 2..8]);
        assert_eq!(cut_rows(&[0.0, 1.0], 8), vec![0..0, 0..8]);
        assert_eq!(cut_rows(&[1.0, 0.0], 8), vec![0..8, 8..8]);
        assert_eq!(cut_rows(&[0.0, 0.0], 8), vec![0..0, 0..8]);
    }
}

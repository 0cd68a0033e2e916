//! What each backend did in a run.

use std::time::Duration;

/// What one backend did in a run of the scheduler.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DeviceReport {
    /// The device's name.
    pub name: String,
    /// Chunks it computed.
    pub chunks: usize,
    /// Intermediate products of those chunks.
    pub products: u64,
    /// Time it spent uploading operands and computing.
    pub busy: Duration,
    /// Why it dropped out of the run, if it did.
    pub failure: Option<String>,
}

impl DeviceReport {
    pub(crate) fn new(name: String) -> Self {
        DeviceReport {
            name,
            ..Self::default()
        }
    }

    /// Products per second while busy, if it computed any.
    pub fn speed(&self) -> Option<f64> {
        let secs = self.busy.as_secs_f64();
        (self.products > 0 && secs > 0.0).then(|| self.products as f64 / secs)
    }
}

/// What a run of the scheduler did: each backend's share and time.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RunReport {
    /// One entry per backend, in the scheduler's order (backends that did not take part have
    /// no chunks).
    pub devices: Vec<DeviceReport>,
    /// Chunks the product was cut into before any split.
    pub chunks_planned: usize,
    /// The whole call, from its start to C assembled.
    pub wall: Duration,
    /// Of which counting C's entries (every row in every panel of B) and allocating C, before
    /// any chunk ran, where C was written in place ([`Scheduler::host_memory`](crate::Scheduler::host_memory)).
    pub counting: Duration,
    /// Of which putting C together once every chunk was done: laying the chunks into C and
    /// checking it, or checking C written in place.
    pub assembly: Duration,
}

impl RunReport {
    /// Each backend's share of the products computed (zeros when nothing was).
    pub fn shares(&self) -> Vec<f64> {
        let total: u64 = self.devices.iter().map(|d| d.products).sum();
        self.devices
            .iter()
            .map(|d| {
                if total == 0 {
                    0.0
                } else {
                    d.products as f64 / total as f64
                }
            })
            .collect()
    }
}

//! How the work of a product is divided between devices: the policies and the shares of
//! products each device gets.

use hetsparse_core::{Error, Result};

/// How a [`Scheduler`](crate::Scheduler) divides a product between its backends.
///
/// Every policy cuts the product into chunks (row panels of A × column panels of B) weighed by
/// their intermediate products, and returns the same canonical result as a single backend.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Policy {
    /// Dynamic work stealing: chunks wait in one queue in row order; a free device takes the
    /// next batch (a share of what is left, so batches shrink towards the end; the fastest
    /// device from the first rows, the others from the last), and a device that finishes early
    /// takes more. The default.
    #[default]
    WorkStealing,
    /// Matam et al.'s Heuristic I: one contiguous row range per backend, in the order given,
    /// cut where each backend's share of the products is reached; the shares come from assumed
    /// relative speeds, one per backend (Matam: a GPU 3× the CPU, so the CPU takes 25 %).
    RowSplitAssumed(Vec<f64>),
    /// Matam et al.'s Heuristic II: the same row split, with shares from measured speeds — for
    /// a CPU and a GPU, the CPU's share is `t = t_g / (t_c + t_g)`. Speeds are learned from the
    /// backends' earlier runs in this scheduler, or measured first on a sample of the product's
    /// rows (see [`Scheduler::calibrate`](crate::Scheduler::calibrate)).
    RowSplitMeasured,
    /// Xia et al.'s Algorithm 4 for any number of devices: chunks ordered by products, the
    /// fastest backend takes the chunks with the most products until its share of all products
    /// is reached, the next fastest the following ones, and so on. Shares come from measured
    /// speeds (Xia fixes the GPU's at 65 %).
    DensestFirst,
}

impl Policy {
    /// Whether chunks are handed out while the run goes (rather than assigned before it).
    pub(crate) fn is_dynamic(&self) -> bool {
        matches!(self, Policy::WorkStealing)
    }

    /// Checks the policy against the number of backends.
    pub(crate) fn validate(&self, backends: usize) -> Result<()> {
        if let Policy::RowSplitAssumed(speeds) = self {
            if speeds.len() != backends {
                return Err(Error::InvalidArgument(format!(
                    "Policy::RowSplitAssumed: {} speeds given for {backends} backends",
                    speeds.len()
                )));
            }
            if let Some(bad) = speeds.iter().find(|s| !s.is_finite() || **s < 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "Policy::RowSplitAssumed: speed {bad} is not a finite non-negative number"
                )));
            }
            if speeds.iter().all(|s| *s == 0.0) {
                return Err(Error::InvalidArgument(
                    "Policy::RowSplitAssumed: every speed is zero".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Shares proportional to `speeds` (summing to 1); equal shares when none is positive.
pub(crate) fn shares(speeds: &[f64]) -> Vec<f64> {
    let total: f64 = speeds.iter().filter(|s| s.is_finite() && **s > 0.0).sum();
    if total <= 0.0 {
        return vec![1.0 / speeds.len().max(1) as f64; speeds.len()];
    }
    speeds
        .iter()
        .map(|&s| {
            if s.is_finite() && s > 0.0 {
                s / total
            } else {
                0.0
            }
        })
        .collect()
}

/// Matam's row split generalised to several devices: the boundaries `r_0 = 0 ≤ r_1 ≤ … ≤
/// r_n = rows` such that rows `r_i..r_{i+1}` hold (as nearly as a row boundary allows) share
/// `i` of the products. `prefix` holds the products before each row (`rows + 1` entries).
pub(crate) fn row_split(prefix: &[u64], shares: &[f64]) -> Vec<usize> {
    let rows = prefix.len() - 1;
    let total = prefix[rows] as f64;
    let mut cuts = Vec::with_capacity(shares.len() + 1);
    cuts.push(0);
    let mut cumulative = 0.0;
    for (i, share) in shares.iter().enumerate() {
        if i + 1 == shares.len() {
            cuts.push(rows);
            break;
        }
        cumulative += share;
        let target = (cumulative * total).round() as u64;
        // The row boundary nearest the target.
        let mut cut = prefix.partition_point(|&p| p < target).min(rows);
        if cut > 0 && target - prefix[cut - 1] < prefix[cut].saturating_sub(target) {
            cut -= 1;
        }
        let previous = *cuts.last().unwrap_or(&0);
        cuts.push(cut.max(previous));
    }
    cuts
}

/// Xia's assignment: `costs` sorted most first; returns for each chunk (in that order) the
/// position in `order` of the device it goes to. `order` lists devices fastest first, with
/// their shares.
pub(crate) fn densest_first(costs: &[u64], order: &[(usize, f64)]) -> Vec<usize> {
    let total: u64 = costs.iter().sum();
    let mut owner = Vec::with_capacity(costs.len());
    let mut device = 0;
    let mut taken = 0u64;
    let mut quota = order.first().map(|d| d.1).unwrap_or(1.0);
    for &cost in costs {
        // Move on once this device's share is reached (Xia Alg. 4, lines 18–23), keeping the
        // last device for whatever remains.
        while device + 1 < order.len() && taken as f64 >= quota * total as f64 {
            device += 1;
            quota += order[device].1;
        }
        owner.push(order[device].0);
        taken += cost;
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_speeds() {
        assert_eq!(shares(&[1.0, 3.0]), vec![0.25, 0.75]);
        assert_eq!(shares(&[0.0, 0.0]), vec![0.5, 0.5]);
        assert_eq!(shares(&[f64::NAN, 2.0]), vec![0.0, 1.0]);
    }

    #[test]
    fn row_split_cuts_at_the_products_share() {
        // Products per row 1, 1, 1, 1, 4, 4: prefix 0 1 2 3 4 8 12.
        let prefix = [0, 1, 2, 3, 4, 8, 12];
        assert_eq!(row_split(&prefix, &[0.25, 0.75]), vec![0, 3, 6]);
        assert_eq!(row_split(&prefix, &[1.0 / 3.0, 2.0 / 3.0]), vec![0, 4, 6]);
        assert_eq!(row_split(&prefix, &[0.0, 1.0]), vec![0, 0, 6]);
        assert_eq!(row_split(&prefix, &[1.0, 0.0]), vec![0, 6, 6]);
        assert_eq!(row_split(&prefix, &[0.5, 0.25, 0.25]), vec![0, 5, 5, 6]);
        assert_eq!(row_split(&[0], &[0.5, 0.5]), vec![0, 0, 0]);
    }

    #[test]
    fn densest_chunks_go_to_the_fastest_until_its_share() {
        let costs = [40, 30, 10, 10, 5, 5];
        // Device 1 fastest with 65 %: takes 40 + 30 = 70 ≥ 65; device 0 the rest.
        assert_eq!(
            densest_first(&costs, &[(1, 0.65), (0, 0.35)]),
            vec![1, 1, 0, 0, 0, 0]
        );
        assert_eq!(densest_first(&costs, &[(0, 1.0)]), vec![0; 6]);
        assert_eq!(densest_first(&costs, &[(2, 0.0), (0, 1.0)]), vec![0; 6]);
    }

    #[test]
    fn assumed_speeds_are_checked() {
        assert!(Policy::RowSplitAssumed(vec![1.0]).validate(2).is_err());
        assert!(Policy::RowSplitAssumed(vec![0.0, 0.0]).validate(2).is_err());
        assert!(Policy::RowSplitAssumed(vec![-1.0, 2.0])
            .validate(2)
            .is_err());
        assert!(Policy::RowSplitAssumed(vec![1.0, 3.0]).validate(2).is_ok());
        assert!(Policy::WorkStealing.validate(0).is_ok());
    }
}

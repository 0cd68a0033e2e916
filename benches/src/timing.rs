//! Wall-clock timing for the table of `cargo xtask bench`: the median of repeated runs after a
//! warm-up. The peers' script (`benches/peers/peers.py`) follows the same rules, so both sides
//! of a ratio are measured alike. Criterion (`cargo bench`) does its own statistics.

use std::time::{Duration, Instant};

use hetsparse_core::Result;

use crate::cases::Scale;

/// How long to keep repeating a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Runs at least this many times.
    pub min_runs: usize,
    /// ... and at least this long in total, ...
    pub min_time: Duration,
    /// ... but never more than this many times.
    pub max_runs: usize,
    /// Untimed runs repeat until this long after the checked warm-up run started: memory a
    /// run touches for the first time can stay slow for a second or two on virtual machines
    /// (the host backs it lazily), which would otherwise bias whichever variant runs first.
    pub warm_up: Duration,
}

impl Budget {
    /// The budget of each scale: full runs repeat at least 5 times and 2 s, quick runs 3 times
    /// and 0.2 s; short operations (SpMV) repeat up to 200 (quick: 1000) times, enough to
    /// average out scheduler noise without running for ever.
    pub fn for_scale(scale: Scale) -> Budget {
        match scale {
            Scale::Full => Budget {
                min_runs: 5,
                min_time: Duration::from_secs(2),
                max_runs: 200,
                warm_up: Duration::from_secs(1),
            },
            Scale::Quick => Budget {
                min_runs: 3,
                min_time: Duration::from_millis(200),
                max_runs: 1000,
                warm_up: Duration::from_millis(100),
            },
        }
    }
}

/// Timings of the repeated runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Seconds of each timed run, in the order they ran.
    pub seconds: Vec<f64>,
}

impl Sample {
    /// The median run time in seconds (the mean of the two middle ones for an even count).
    pub fn median(&self) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => s[n / 2],
            _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }
}

/// Calls `warm_up` once and `run` untimed until `budget.warm_up` has passed, then `run`
/// repeatedly within `budget`, timing each call. The first error stops the measurement and is
/// returned.
pub fn measure(
    budget: Budget,
    warm_up: impl FnOnce() -> Result<()>,
    mut run: impl FnMut() -> Result<()>,
) -> Result<Sample> {
    let warming = Instant::now();
    warm_up()?;
    while warming.elapsed() < budget.warm_up {
        run()?;
    }
    let mut seconds = Vec::new();
    let started = Instant::now();
    while seconds.len() < budget.max_runs.max(1)
        && (seconds.len() < budget.min_runs || started.elapsed() < budget.min_time)
    {
        let t = Instant::now();
        run()?;
        seconds.push(t.elapsed().as_secs_f64());
    }
    Ok(Sample { seconds })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::Error;

    #[test]
    fn median_of_odd_and_even_counts() {
        let odd = Sample {
            seconds: vec![3.0, 1.0, 2.0],
        };
        assert_eq!(odd.median(), 2.0);
        let even = Sample {
            seconds: vec![4.0, 1.0, 3.0, 2.0],
        };
        assert_eq!(even.median(), 2.5);
        assert!(Sample { seconds: vec![] }.median().is_nan());
    }

    #[test]
    fn respects_run_counts() {
        let budget = Budget {
            min_runs: 4,
            min_time: Duration::ZERO,
            max_runs: 10,
            warm_up: Duration::ZERO,
        };
        let mut calls = 0;
        let s = measure(
            budget,
            || Ok(()),
            || {
                calls += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((s.seconds.len(), calls), (4, 4));

        let capped = Budget {
            min_runs: 1,
            min_time: Duration::from_secs(3600),
            max_runs: 7,
            warm_up: Duration::ZERO,
        };
        assert_eq!(
            measure(capped, || Ok(()), || Ok(())).unwrap().seconds.len(),
            7
        );
    }

    #[test]
    fn errors_stop_the_measurement() {
        let budget = Budget::for_scale(Scale::Quick);
        let e = measure(
            budget,
            || Err(Error::InvalidArgument("warm".into())),
            || Ok(()),
        );
        assert!(e.is_err());
        let e = measure(
            budget,
            || Ok(()),
            || Err(Error::InvalidArgument("run".into())),
        );
        assert_eq!(e.unwrap_err().to_string(), "run");
    }
}

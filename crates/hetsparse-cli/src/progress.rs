//! Progress bars that appear only for stages that take more than a second.

use std::cell::Cell;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a stage runs before its bar is drawn.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// What a stage's bar counts.
#[derive(Clone, Copy, Debug)]
pub enum Unit {
    /// Bytes of a file.
    Bytes,
    /// Intermediate products of a multiplication.
    Products,
}

/// One stage of the command (reading, multiplying, writing): its time and its bar.
///
/// The bar is hidden until the stage has run for a second, so quick stages print nothing;
/// indicatif draws nothing when standard error is not a terminal.
pub struct Stage {
    bar: ProgressBar,
    start: Instant,
    shown: Cell<bool>,
    enabled: bool,
}

impl Stage {
    /// A stage called `label`, counting `unit`s up to `total` (`None`: not known).
    pub fn new(label: &str, unit: Unit, total: Option<u64>, enabled: bool) -> Self {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = match (unit, total.is_some()) {
            (Unit::Bytes, true) => {
                "{prefix:>9} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
            }
            (Unit::Bytes, false) => "{prefix:>9} {spinner} {bytes} ({bytes_per_sec})",
            (Unit::Products, _) => "{prefix:>9} [{bar:40}] {percent:>3}% of {len} products ({eta})",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        Stage {
            bar,
            start: Instant::now(),
            shown: Cell::new(false),
            enabled,
        }
    }

    /// Sets how far the stage is, drawing the bar once the stage has run a second.
    pub fn set(&self, position: u64) {
        self.bar.set_position(position);
        self.show_if_slow();
    }

    /// Sets the total once it is known.
    pub fn set_total(&self, total: u64) {
        self.bar.set_length(total);
    }

    fn show_if_slow(&self) {
        if self.enabled && !self.shown.get() && self.start.elapsed() >= SHOW_AFTER {
            self.shown.set(true);
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
        }
    }

    /// Ends the stage, clearing its bar, and returns how long it took.
    pub fn finish(self) -> Duration {
        let elapsed = self.start.elapsed();
        self.bar.finish_and_clear();
        elapsed
    }
}

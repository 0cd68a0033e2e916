//! hetsparse sched (work in progress).
#![warn(missing_docs)]

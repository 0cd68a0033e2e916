//! hetsparse opencl (work in progress).
#![warn(missing_docs)]

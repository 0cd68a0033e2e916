//! hetsparse cuda (work in progress).
#![warn(missing_docs)]

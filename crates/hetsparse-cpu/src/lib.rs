//! hetsparse cpu (work in progress).
#![warn(missing_docs)]

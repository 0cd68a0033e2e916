//! Product analysis: intermediate products, exact nnz(C), compression ratio.

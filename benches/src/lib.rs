//! Benchmarks live in benches/benches/*.rs.

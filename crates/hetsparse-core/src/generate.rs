//! Deterministic, seeded generators for the benchmark matrix classes.

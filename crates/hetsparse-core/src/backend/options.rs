//! Options of each operation: one value per operation, so that new settings (a semiring, a mask,
//! unsorted results) can be added without changing the trait again.

use super::SpgemmAlgorithm;

/// How to run a SpGEMM.
///
/// ```
/// use hetsparse_core::{SpgemmAlgorithm, SpgemmOptions};
/// let options = SpgemmOptions::new().with_algorithm(SpgemmAlgorithm::RowRow);
/// assert_eq!(options.algorithm, SpgemmAlgorithm::RowRow);
/// assert_eq!(SpgemmOptions::from(SpgemmAlgorithm::Esc).algorithm, SpgemmAlgorithm::Esc);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpgemmOptions {
    /// The algorithm; [`SpgemmAlgorithm::Auto`] lets the backend choose.
    pub algorithm: SpgemmAlgorithm,
}

impl Default for SpgemmOptions {
    fn default() -> Self {
        SpgemmOptions {
            algorithm: SpgemmAlgorithm::Auto,
        }
    }
}

impl SpgemmOptions {
    /// The defaults: the backend's choice of algorithm.
    pub fn new() -> Self {
        Self::default()
    }
    /// These options with `algorithm`.
    pub fn with_algorithm(mut self, algorithm: SpgemmAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }
}

impl From<SpgemmAlgorithm> for SpgemmOptions {
    fn from(algorithm: SpgemmAlgorithm) -> Self {
        SpgemmOptions::new().with_algorithm(algorithm)
    }
}

/// How to run a SpMV. Nothing to choose yet: the backend picks its kernel per format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpmvOptions {}

impl SpmvOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
}

/// How to run a SpMM. Nothing to choose yet: the backend picks its kernel per format.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SpmmOptions {}

impl SpmmOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
}

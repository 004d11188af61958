//! Volume-weighted error norms of a cell field, as the case runner and the
//! validation studies report them.

/// Volume-weighted norms of the error T − T_exact over the cells.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorNorms {
    /// Σ V|e| / Σ V.
    pub l1: f64,
    /// sqrt(Σ V e² / Σ V).
    pub l2: f64,
    /// max |e|.
    pub linf: f64,
}

impl ErrorNorms {
    pub fn new(error: &[f64], volumes: &[f64]) -> Self {
        let total: f64 = volumes.iter().sum();
        let (l1, l2) = error
            .iter()
            .zip(volumes)
            .fold((0.0, 0.0), |(l1, l2), (e, v)| {
                (l1 + v * e.abs(), l2 + v * e * e)
            });
        Self {
            l1: l1 / total,
            l2: (l2 / total).sqrt(),
            linf: error.iter().fold(0.0, |m, e| m.max(e.abs())),
        }
    }
}

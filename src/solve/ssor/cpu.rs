//! SSOR's sweeps on the CPU, in a given row order (see the module docs).

use crate::solve::colouring::Colouring;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// The SSOR preconditioner of a square matrix with a positive diagonal:
/// its strictly lower and upper parts in the row order, ω / a_ii per row.
pub struct Ssor {
    /// Rows in the order the forward sweep visits them.
    order: Vec<u32>,
    /// Entries of each row that come before it in `order`.
    lower: Csr,
    /// Entries of each row that come after it in `order`.
    upper: Csr,
    /// ω / a_ii.
    pub(crate) scaled_inverse_diagonal: Vec<f64>,
    /// (2 − ω) / ω, the backward sweep's scale.
    pub(crate) backward_scale: f64,
}

impl Ssor {
    /// SSOR in natural row order.
    pub fn new(a: &Csr, omega: f64) -> Result<Self, SolveError> {
        let n = a.n_rows() as u32;
        Self::in_order(a, omega, (0..n).collect())
    }

    /// SSOR in the order of `colouring`: colour by colour (rows of one
    /// colour are not neighbours, so their order within it does not matter).
    pub fn in_colours(a: &Csr, omega: f64, colouring: &Colouring) -> Result<Self, SolveError> {
        Self::in_order(a, omega, colouring.rows().to_vec())
    }

    /// SSOR sweeping the rows in `order` (a permutation of 0..n).
    pub fn in_order(a: &Csr, omega: f64, order: Vec<u32>) -> Result<Self, SolveError> {
        let n = a.n_rows();
        if a.n_cols() != n {
            return Err(SolveError::InvalidControls(format!(
                "SSOR needs a square matrix, got {n} x {}",
                a.n_cols()
            )));
        }
        let mut rank = vec![u32::MAX; n];
        for (k, &i) in order.iter().enumerate() {
            rank[i as usize] = k as u32;
        }
        if order.len() != n || rank.contains(&u32::MAX) {
            return Err(SolveError::InvalidControls(
                "SSOR's row order must hold every row once".into(),
            ));
        }
        let (mut lower, mut upper) = (Triangle::default(), Triangle::default());
        let mut scaled_inverse_diagonal = vec![0.0; n];
        for i in 0..n {
            let (cols, vals) = a.row(i);
            let mut diagonal = 0.0;
            for (&j, &v) in cols.iter().zip(vals) {
                let j = j as usize;
                if j == i {
                    diagonal += v;
                } else if rank[j] < rank[i] {
                    lower.push(j, v);
                } else {
                    upper.push(j, v);
                }
            }
            lower.end_row();
            upper.end_row();
            if !(diagonal > 0.0 && diagonal.is_finite()) {
                return Err(SolveError::InvalidControls(format!(
                    "SSOR needs a positive diagonal: row {i} has {diagonal}"
                )));
            }
            scaled_inverse_diagonal[i] = omega / diagonal;
        }
        Ok(Self {
            order,
            lower: lower.into_csr(n)?,
            upper: upper.into_csr(n)?,
            scaled_inverse_diagonal,
            backward_scale: (2.0 - omega) / omega,
        })
    }

    /// Rows in the forward sweep's order.
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// The entries of each row before it in the order.
    pub fn lower(&self) -> &Csr {
        &self.lower
    }

    /// The entries of each row after it in the order.
    pub fn upper(&self) -> &Csr {
        &self.upper
    }

    /// Σ_k vals_k x_{cols_k} over row i of `part`.
    fn row_sum(part: &Csr, i: usize, x: &[f64]) -> f64 {
        let (cols, vals) = part.row(i);
        cols.iter()
            .zip(vals)
            .map(|(&j, &v)| v * x[j as usize])
            .sum()
    }
}

/// A triangle of the matrix gathered row by row (columns stay ascending).
struct Triangle {
    row_ptr: Vec<usize>,
    cols: Vec<u32>,
    vals: Vec<f64>,
}

impl Default for Triangle {
    fn default() -> Self {
        Self {
            row_ptr: vec![0],
            cols: Vec::new(),
            vals: Vec::new(),
        }
    }
}

impl Triangle {
    fn push(&mut self, col: usize, val: f64) {
        self.cols.push(col as u32);
        self.vals.push(val);
    }

    fn end_row(&mut self) {
        self.row_ptr.push(self.cols.len());
    }

    fn into_csr(self, n: usize) -> Result<Csr, SolveError> {
        Csr::new(n, self.row_ptr, self.cols, self.vals)
            .map_err(|e| SolveError::InvalidControls(format!("SSOR: {e}")))
    }
}

impl LinearOperator for Ssor {
    fn n(&self) -> usize {
        self.order.len()
    }

    /// Forward y_i = w_i r_i − w_i Σ_lower a_ij y_j, then backward
    /// z_i = s y_i − w_i Σ_upper a_ij z_j (w_i = ω / a_ii, s = (2 − ω)/ω):
    /// the expressions the device kernel evaluates.
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let w = &self.scaled_inverse_diagonal;
        let mut y = vec![0.0; r.len()];
        for &i in &self.order {
            let i = i as usize;
            y[i] = w[i] * r[i] - w[i] * Self::row_sum(&self.lower, i, &y);
        }
        for &i in self.order.iter().rev() {
            let i = i as usize;
            z[i] = self.backward_scale * y[i] - w[i] * Self::row_sum(&self.upper, i, z);
        }
    }
}

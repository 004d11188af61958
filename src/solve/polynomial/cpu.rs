//! The polynomial preconditioner on the CPU (see the module docs of
//! `solve::polynomial`): the recurrence's steps in f64, or in f32 on an f32
//! copy of the matrix (mixed precision), with the GPU kernel's operation order.

use rayon::prelude::*;

use super::{PolynomialSettings, Recurrence};
use crate::solve::scalar::Precision;
use crate::solve::triangles::Triangles;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// Real numbers the recurrence runs in (f64, or f32 for mixed precision).
pub trait Real:
    Copy
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + 'static
{
    const ZERO: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

/// The matrix the recurrence reads, in T: diagonal, 1/a_ii (computed in f64,
/// then rounded), off-diagonals of each row by ascending column (mod-SELL's
/// slot order, so that row sums are added as on the GPU).
struct SplitMatrix<T> {
    diag: Vec<T>,
    inv_diag: Vec<T>,
    row_ptr: Vec<usize>,
    cols: Vec<u32>,
    values: Vec<T>,
}

impl<T: Real> SplitMatrix<T> {
    fn new(a: &Csr) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "polynomial")?;
        let mut row_ptr = vec![0];
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        for r in 0..t.n() {
            for s in t.off_diagonal(r) {
                cols.push(t.col(s) as u32);
                values.push(T::from_f64(t.value(s)));
            }
            row_ptr.push(cols.len());
        }
        Ok(Self {
            diag: (0..t.n()).map(|r| T::from_f64(t.diag(r))).collect(),
            inv_diag: (0..t.n()).map(|r| T::from_f64(1.0 / t.diag(r))).collect(),
            row_ptr,
            cols,
            values,
        })
    }

    /// (A x)_i: the diagonal term first, then the off-diagonals by column.
    fn row_product(&self, i: usize, x: &[T]) -> T {
        (self.row_ptr[i]..self.row_ptr[i + 1]).fold(self.diag[i] * x[i], |acc, s| {
            acc + self.values[s] * x[self.cols[s] as usize]
        })
    }
}

/// z = M⁻¹ r with the polynomial in T (the CPU reference of the GPU kernels).
struct Evaluator<T> {
    matrix: SplitMatrix<T>,
    steps: Vec<[T; 5]>,
}

impl<T: Real> Evaluator<T> {
    fn new(a: &Csr, recurrence: &Recurrence) -> Result<Self, SolveError> {
        Ok(Self {
            matrix: SplitMatrix::new(a)?,
            steps: recurrence
                .steps
                .iter()
                .map(|s| [s.mat, s.id, s.old, s.d_in, s.d_out].map(T::from_f64))
                .collect(),
        })
    }

    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let m = &self.matrix;
        let n = m.diag.len();
        // t_0 = D⁻¹ r in T (`poly_start`).
        let mut t_in: Vec<T> = r
            .par_iter()
            .zip(&m.inv_diag)
            .map(|(r, d)| *d * T::from_f64(*r))
            .collect();
        let mut t_io = vec![T::ZERO; n];
        let mut acc = vec![T::ZERO; n];
        let last = self.steps.len() - 1;
        for (j, &[mat, id, old, d_in, d_out]) in self.steps.iter().enumerate() {
            let first = j == 0;
            let t_in_ref = &t_in;
            let out: Vec<(T, T)> = (0..n)
                .into_par_iter()
                .map(|i| {
                    let y = m.inv_diag[i] * m.row_product(i, t_in_ref);
                    let t_old = if first { T::ZERO } else { t_io[i] };
                    let t = mat * y + id * t_in_ref[i] - old * t_old;
                    let a = if first { d_in * t_in_ref[i] } else { acc[i] };
                    (t, a + d_out * t)
                })
                .collect();
            for (i, (t, a)) in out.into_iter().enumerate() {
                t_io[i] = t;
                acc[i] = a;
            }
            if j == last {
                break;
            }
            std::mem::swap(&mut t_in, &mut t_io);
        }
        z.par_iter_mut()
            .zip(&acc)
            .for_each(|(z, a)| *z = a.to_f64());
    }
}

enum Evaluation {
    Double(Evaluator<f64>),
    Mixed(Evaluator<f32>),
}

/// z = s(D⁻¹A) D⁻¹ r as a `LinearOperator` (PCG's preconditioner).
pub struct PolynomialPreconditioner {
    settings: PolynomialSettings,
    recurrence: Recurrence,
    evaluation: Evaluation,
}

impl PolynomialPreconditioner {
    /// For `a` (square, symmetric, positive diagonal), bound from `settings`.
    pub fn new(a: &Csr, settings: &PolynomialSettings) -> Result<Self, SolveError> {
        settings.validate().map_err(SolveError::InvalidControls)?;
        let upper = settings.upper_bound(a)?;
        Self::with_upper_bound(a, settings, upper)
    }

    /// For `a` with the upper eigenvalue bound `upper` given (e.g. the one a
    /// GPU preconditioner used).
    pub fn with_upper_bound(
        a: &Csr,
        settings: &PolynomialSettings,
        upper: f64,
    ) -> Result<Self, SolveError> {
        let recurrence = settings
            .checked_recurrence(upper)
            .map_err(SolveError::InvalidControls)?;
        let evaluation = match settings.precision {
            Precision::Double => Evaluation::Double(Evaluator::new(a, &recurrence)?),
            Precision::Mixed => Evaluation::Mixed(Evaluator::new(a, &recurrence)?),
        };
        Ok(Self {
            settings: *settings,
            recurrence,
            evaluation,
        })
    }

    pub fn settings(&self) -> &PolynomialSettings {
        &self.settings
    }
    pub fn recurrence(&self) -> &Recurrence {
        &self.recurrence
    }
}

impl LinearOperator for PolynomialPreconditioner {
    fn n(&self) -> usize {
        match &self.evaluation {
            Evaluation::Double(e) => e.matrix.diag.len(),
            Evaluation::Mixed(e) => e.matrix.diag.len(),
        }
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        match &self.evaluation {
            Evaluation::Double(e) => e.apply(r, z),
            Evaluation::Mixed(e) => e.apply(r, z),
        }
    }
}

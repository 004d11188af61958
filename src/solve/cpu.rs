//! The CPU (rayon) PCG backend: the reference the GPU backends are tested
//! against. Reductions use `reduce`'s fixed chunking, so results are the same
//! bits for any thread count; row products follow OpenFOAM's operation order,
//! so on systems of at most `reduce::CHUNK` rows (sequential reductions) the
//! iterates equal OpenFOAM's bit for bit (tests/solve_openfoam.rs). On an
//! equilibrated system (`equilibrate`) the backend works on Â = S A S and
//! measures residuals in the original system (r = S⁻¹ r̂).

use rayon::prelude::*;

use super::equilibrate::Equilibration;
use super::ic::DicFactor;
use super::pcg::NORM_FACTOR_SMALL;
use super::reduce::{chunked_sums, dot, ordered_sum, sum_abs, sum_by, CHUNK};
use super::split::SplitMatrix;
use super::{CgBackend, Executor, InitialNorms, LinearOperator, SolveError};
use crate::sparse::Csr;

// The checks, the row sums and the entry points, kept at their old paths
// (they live in `checks`, `row_sums` and `entry`).
pub(crate) use super::checks::square_size;
pub use super::checks::{check_inputs, check_symmetric, check_system};
pub use super::entry::{solve_pcg, solve_pcg_scaled};
pub use super::row_sums::openfoam_row_sums;

/// A preconditioner the backend borrows, or one it was handed once the
/// initial residual showed that the solve iterates ([`CpuBackend::preconditioned`]),
/// or DIC's or DILU's factor, which sweeps the backend's own split rows
/// ([`CpuBackend::dic`], [`CpuBackend::dilu`]).
enum Preconditioning<'a> {
    Borrowed(&'a dyn LinearOperator),
    Owned(Box<dyn LinearOperator + 'a>),
    SplitFactor(DicFactor),
}

impl Preconditioning<'_> {
    fn n(&self) -> usize {
        match self {
            Preconditioning::Borrowed(p) => p.n(),
            Preconditioning::Owned(p) => p.n(),
            Preconditioning::SplitFactor(f) => f.n(),
        }
    }

    fn is_linear(&self) -> bool {
        match self {
            Preconditioning::Borrowed(p) => p.is_linear(),
            Preconditioning::Owned(p) => p.is_linear(),
            Preconditioning::SplitFactor(_) => true,
        }
    }
}

/// The split rows a backend made of its matrix, or those it was lent
/// ([`CpuBackend::on_split`]).
enum Split<'a> {
    Owned(SplitMatrix),
    Borrowed(&'a SplitMatrix),
}

impl std::ops::Deref for Split<'_> {
    type Target = SplitMatrix;
    fn deref(&self) -> &SplitMatrix {
        match self {
            Split::Owned(s) => s,
            Split::Borrowed(s) => s,
        }
    }
}

/// PCG steps on host vectors with a CSR matrix and any preconditioner.
pub struct CpuBackend<'a> {
    precond: Preconditioning<'a>,
    /// The matrix split as the row kernels read it (same products, same
    /// order): the backend reads no other copy of it.
    split: Split<'a>,
    /// rowSum of the original matrix where `a` is equilibrated; otherwise
    /// each row's sum is formed from the split rows when the initial
    /// residual needs it (one read, and no vector kept through the solve).
    row_sums: Option<Vec<f64>>,
    /// Flexible PCG: the preconditioner is not a fixed linear operator
    /// (its `is_linear`), or [`Self::flexible`] asked for it.
    flexible: bool,
    /// The scaling `a` was built with: residuals are weighted back to the
    /// original system.
    equilibration: Option<&'a Equilibration>,
    /// The preconditioner's name in the log line (`DIC` of `DICPCG`), known
    /// before it is built ([`Self::named`]) so that a solve which does not
    /// iterate names it too, as OpenFOAM's log does.
    name: Option<&'static str>,
}

impl<'a> CpuBackend<'a> {
    /// `a` must be square; `precond` must have the same size.
    pub fn new(a: &'a Csr, precond: &'a dyn LinearOperator) -> Self {
        Self::build(a, Preconditioning::Borrowed(precond), None)
    }

    /// The backend of `a` without a preconditioner (M = I): what the initial
    /// residual needs. [`Self::preconditioned`] then hands it the
    /// preconditioner, built (on [`Self::split`]) only where the solve
    /// iterates ([`pcg_set_up_on_demand`](super::pcg::pcg_set_up_on_demand)).
    pub fn unpreconditioned(a: &'a Csr) -> Self {
        let identity = super::jacobi::Identity(a.n_rows());
        Self::build(a, Preconditioning::Owned(Box::new(identity)), None)
    }

    /// [`Self::unpreconditioned`] on rows split already, which it borrows:
    /// the caller keeps them (and may lend the CSR's values out meanwhile,
    /// [`solve_pcg_in_place`](super::entry::solve_pcg_in_place)).
    pub fn on_split(split: &'a SplitMatrix) -> Self {
        let identity = super::jacobi::Identity(split.n());
        Self {
            flexible: false,
            precond: Preconditioning::Owned(Box::new(identity)),
            row_sums: None,
            split: Split::Borrowed(split),
            equilibration: None,
            name: None,
        }
    }

    /// This backend, its preconditioner named `name` in the log line.
    pub fn named(self, name: Option<&'static str>) -> Self {
        Self { name, ..self }
    }

    /// This backend (its split matrix and row sums kept) with `precond`.
    pub fn preconditioned(self, precond: Box<dyn LinearOperator + 'a>) -> Self {
        assert_eq!(
            precond.n(),
            self.split.n(),
            "CpuBackend: preconditioner size"
        );
        Self {
            flexible: !precond.is_linear(),
            precond: Preconditioning::Owned(precond),
            ..self
        }
    }

    /// This backend with OpenFOAM's DIC of its split rows: the factor keeps
    /// 1/d* alone and the sweeps form each a_ij / d*_i from the split rows
    /// the product reads ([`DicFactor::sweeps_dot`]: the bits of a
    /// [`Dic`](super::ic::Dic)'s stored scaled triangles), so the solve
    /// holds the matrix's off-diagonal entries once besides `a`. Errors as
    /// [`DicFactor::of_split`]'s.
    pub fn dic(self) -> Result<Self, SolveError> {
        let factor = DicFactor::of_split(&self.split)?;
        Ok(self.with_split_factor(factor))
    }

    /// This backend with OpenFOAM's DILU of its split rows
    /// ([`dilu_factor`](super::ilu::dilu_factor)): as [`Self::dic`], 1/d*
    /// alone, the sweeps reading the rows the product reads. For the Krylov
    /// methods ([`CpuKrylovBackend::on_backend`](super::krylov::CpuKrylovBackend::on_backend)):
    /// the momentum equations' PBiCGStab-DILU sets up in one pass over the
    /// rows. Errors as [`dilu_factor`](super::ilu::dilu_factor)'s.
    pub fn dilu(self) -> Result<Self, SolveError> {
        let factor = super::ilu::dilu_factor(&self.split)?;
        Ok(self.with_split_factor(factor))
    }

    /// This backend preconditioned by `factor` of its split rows.
    fn with_split_factor(self, factor: DicFactor) -> Self {
        Self {
            flexible: false,
            precond: Preconditioning::SplitFactor(factor),
            ..self
        }
    }

    /// z = M⁻¹ r with this backend's preconditioner, without PCG's r · z
    /// ([`CgBackend::precondition`]): the Krylov methods' step.
    pub(super) fn apply_preconditioner(&self, r: &[f64], z: &mut [f64]) {
        match &self.precond {
            Preconditioning::Borrowed(p) => p.apply(r, z),
            Preconditioning::Owned(p) => p.apply(r, z),
            Preconditioning::SplitFactor(f) => f.sweeps(&self.split, r, z),
        }
    }

    /// PCG on the scaled matrix `scaled` = S A S of `equilibration` with the
    /// convergence test of the original system (`equilibrate` module docs).
    pub fn equilibrated(
        scaled: &'a Csr,
        precond: &'a dyn LinearOperator,
        equilibration: &'a Equilibration,
    ) -> Self {
        assert_eq!(
            equilibration.n(),
            scaled.n_rows(),
            "CpuBackend: scaling size"
        );
        Self::build(
            scaled,
            Preconditioning::Borrowed(precond),
            Some(equilibration),
        )
    }

    fn build(
        a: &'a Csr,
        precond: Preconditioning<'a>,
        equilibration: Option<&'a Equilibration>,
    ) -> Self {
        assert_eq!(a.n_rows(), a.n_cols(), "CpuBackend: matrix not square");
        let split = SplitMatrix::new(a);
        assert_eq!(precond.n(), a.n_rows(), "CpuBackend: preconditioner size");
        Self {
            // Flexible PCG where the preconditioner says it is not a fixed
            // linear map (`Precondition::is_linear`).
            flexible: !precond.is_linear(),
            precond,
            row_sums: equilibration.map(|e| e.row_sums().to_vec()),
            split: Split::Owned(split),
            equilibration,
            name: None,
        }
    }

    /// Runs flexible PCG (see `solve::pcg`) or not, whatever the
    /// preconditioner's `is_linear` says (by default PCG is flexible exactly
    /// for preconditioners that are not a fixed linear map, e.g. block
    /// smoothers with an inner CG).
    pub fn flexible(mut self, flexible: bool) -> Self {
        self.flexible = flexible;
        self
    }

    /// (A x)_r in OpenFOAM's row order.
    /// The matrix as the row kernels read it.
    pub(crate) fn split(&self) -> &SplitMatrix {
        &self.split
    }

    #[inline]
    pub(crate) fn row_times(&self, r: usize, x: &[f64]) -> f64 {
        self.split.row_times(r, x)
    }
}

impl Executor for CpuBackend<'_> {
    type Vector = Vec<f64>;

    fn n(&self) -> usize {
        self.split.n()
    }

    fn new_vector(&self) -> Vec<f64> {
        vec![0.0; self.n()]
    }

    /// Equilibrated: x = S y, A x = S⁻¹ Â y, b = S⁻¹ b̂ and r = S⁻¹ r̂, with
    /// the original row sums (kernels/pcg.cu `cg_initial_residual` likewise).
    fn initialize(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> InitialNorms {
        let n = self.n();
        let eq = self.equilibration;
        let x_mean = match eq {
            Some(e) => sum_by(n, |i| e.scale()[i] * x[i]),
            None => sum_by(n, |i| x[i]),
        } / n.max(1) as f64;
        let (residual_sum, norm) = chunked_sums(r, |i, r| {
            let ax = self.row_times(i, x);
            // rowSum in OpenFOAM's order (`openfoam_row_sums`' bits), from
            // the split rows: no search for the diagonal.
            let row_sum = match &self.row_sums {
                Some(sums) => sums[i],
                None => self.split.row_sum(i),
            };
            let a_xbar = row_sum * x_mean;
            *r = b[i] - ax;
            let (ax, b, r) = match eq {
                Some(e) => {
                    let w = e.unscale()[i];
                    (w * ax, w * b[i], w * *r)
                }
                None => (ax, b[i], *r),
            };
            (r.abs(), (ax - a_xbar).abs() + (b - a_xbar).abs())
        });
        InitialNorms {
            residual_sum,
            norm_factor: norm + NORM_FACTOR_SMALL,
        }
    }

    fn dot(&self, a: &Vec<f64>, b: &Vec<f64>) -> f64 {
        dot(a, b)
    }

    fn sum_abs(&self, v: &Vec<f64>) -> f64 {
        sum_abs(v)
    }
}

impl CgBackend for CpuBackend<'_> {
    fn precondition(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> f64 {
        match &self.precond {
            Preconditioning::Borrowed(p) => p.apply_dot(r, z),
            Preconditioning::Owned(p) => p.apply_dot(r, z),
            Preconditioning::SplitFactor(f) => f.sweeps_dot(&self.split, r, z),
        }
    }

    fn flexible_term(&self, z: &Vec<f64>, q: &Vec<f64>) -> Option<f64> {
        self.flexible.then(|| dot(z, q))
    }

    fn preconditioner_name(&self) -> Option<&'static str> {
        self.name
    }

    fn update_direction(&self, beta: f64, z: &Vec<f64>, p: &mut Vec<f64>) {
        if beta == 0.0 {
            p.copy_from_slice(z);
        } else {
            p.par_iter_mut()
                .zip(z.par_iter())
                .for_each(|(p, z)| *p = z + beta * *p);
        }
    }

    fn apply_operator(&self, p: &Vec<f64>, q: &mut Vec<f64>) -> f64 {
        self.split.apply_dot(p, q)
    }

    /// One pass where the product runs over the upper triangle
    /// ([`SplitMatrix::direction_apply_dot`]), else the two steps.
    fn direction_and_operator(
        &self,
        beta: f64,
        z: &Vec<f64>,
        p: &mut Vec<f64>,
        q: &mut Vec<f64>,
    ) -> f64 {
        match self.split.direction_apply_dot(beta, z, p, q) {
            Some(p_q) => p_q,
            None => {
                self.update_direction(beta, z, p);
                self.apply_operator(p, q)
            }
        }
    }

    fn update_solution(
        &self,
        alpha: f64,
        p: &Vec<f64>,
        q: &Vec<f64>,
        x: &mut Vec<f64>,
        r: &mut Vec<f64>,
    ) -> f64 {
        let weights = self.equilibration.map(Equilibration::unscale);
        ordered_sum(
            x.par_chunks_mut(CHUNK)
                .zip(r.par_chunks_mut(CHUNK))
                .zip(p.par_chunks(CHUNK).zip(q.par_chunks(CHUNK)))
                .enumerate()
                .map(|(c, ((x, r), (p, q)))| {
                    x.iter_mut().zip(p).for_each(|(x, p)| *x += alpha * p);
                    let mut residual = 0.0;
                    match weights {
                        Some(w) => {
                            let w = &w[c * CHUNK..c * CHUNK + r.len()];
                            for ((r, q), w) in r.iter_mut().zip(q).zip(w) {
                                *r -= alpha * q;
                                residual += (w * *r).abs();
                            }
                        }
                        None => {
                            for (r, q) in r.iter_mut().zip(q) {
                                *r -= alpha * q;
                                residual += r.abs();
                            }
                        }
                    }
                    residual
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::bits;

    #[test]
    fn openfoam_residual_of_a_3x3_by_hand() {
        // A = [2 -1 0; -1 3 -1; 0 -1 2], x = (1, 2, 4), b = (1, 1, 1).
        let a = Csr::new(
            3,
            vec![0, 2, 5, 7],
            vec![0, 1, 0, 1, 2, 1, 2],
            vec![2., -1., -1., 3., -1., -1., 2.],
        )
        .unwrap();
        let identity = super::super::jacobi::Identity(3);
        let backend = CpuBackend::new(&a, &identity);
        let (b, x) = (vec![1.0, 1.0, 1.0], vec![1.0, 2.0, 4.0]);
        let mut r = backend.new_vector();
        let norms = backend.initialize(&b, &x, &mut r);
        // A x = (0, 1, 6); r = (1, 0, -5); Σ|r| = 6.
        // rowSum = (1, 1, 1), mean(x) = 7/3, A x̄ = (7/3, 7/3, 7/3).
        // Σ|Ax − Ax̄| = 7/3 + 4/3 + 11/3 = 22/3; Σ|b − Ax̄| = 3 · 4/3 = 4.
        assert_eq!(r, vec![1.0, 0.0, -5.0]);
        assert_eq!(norms.residual_sum, 6.0);
        assert!((norms.norm_factor - (22.0 / 3.0 + 4.0)).abs() < 1e-14);
    }

    #[test]
    fn dic_on_the_split_rows_runs_pcg_with_the_bits_of_the_stored_dic() {
        use crate::solve::ic::Dic;
        use crate::solve::pcg::{pcg, SolverControls};
        // More rows than one reduction chunk: r · w sums chunks.
        let a = crate::sparse::testing::grid_laplacian(18, 17, 16);
        let n = a.n_rows();
        let b: Vec<f64> = (0..n).map(|i| ((i * 53) % 97) as f64 / 9.0 - 5.0).collect();
        let controls = SolverControls {
            tolerance: 1e-12,
            ..SolverControls::default()
        };
        let split = SplitMatrix::new(&a);
        let stored = Dic::of_split(&split).unwrap();
        let (mut x_stored, mut x_formed) = (vec![0.0; n], vec![0.0; n]);
        let with_stored = pcg(
            &CpuBackend::new(&a, &stored),
            &b,
            &mut x_stored,
            &controls,
            "T",
        )
        .unwrap();
        let backend = CpuBackend::unpreconditioned(&a).dic().unwrap();
        let with_formed = pcg(&backend, &b, &mut x_formed, &controls, "T").unwrap();
        assert!(with_formed.iterations > 10 && with_formed.converged);
        assert_eq!(with_formed.iterations, with_stored.iterations);
        assert_eq!(bits(&with_formed.history), bits(&with_stored.history));
        assert_eq!(bits(&x_formed), bits(&x_stored));
        // The normalisation reads each row's sum as it goes: the bits of
        // the row sums' vector.
        let sums = split.row_sums();
        assert!((0..n).all(|i| split.row_sum(i).to_bits() == sums[i].to_bits()));
    }
}

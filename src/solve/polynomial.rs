//! Polynomial preconditioners (Zhang and Zhang 2013, §2.2–2.7): M⁻¹ = s(D⁻¹A) D⁻¹, a
//! polynomial s of degree m in the Jacobi-scaled matrix, applied with m
//! products by A. With Ã = D^-½ A D^-½ this is D^-½ s(Ã) D^-½: Zhang and
//! Zhang's polynomial on the symmetrically scaled system, without storing Ã.
//!
//! - Neumann series: s(t) = ω Σ_{k≤m} (1 − ωt)^k with ω = 1/b (§2.3).
//! - Chebyshev (minimax): 1 − t s(t) = T_{m+1}((θ−t)/δ) / T_{m+1}(θ/δ) on
//!   [a, b], θ = (a+b)/2, δ = (b−a)/2, a = b / `eigen_ratio` (§2.4).
//! - Least squares: the Chebyshev-weight least-squares polynomial on [0, b]
//!   (§2.5, Saad ch. 12.3), from its closed form in the Chebyshev basis.
//!
//! b ≥ λ_max(D⁻¹A) is Gershgorin's bound on D⁻¹A (max_i Σ_j |a_ij| / a_ii: 2
//! for a weakly diagonally dominant FVM matrix, guaranteed), or k Lanczos steps
//! on Ã with the Zhou–Saad safeguard θ_max(T_k) + ‖f‖ (§2.6), capped by
//! Gershgorin (both are upper bounds).
//!
//! Every kind is evaluated the same, numerically stable way (§2.5 "use the
//! Chebyshev basis"): s = Σ_j d_j T_j(X) with X = (2 D⁻¹A − (lo+hi)) / (hi−lo)
//! mapping [lo, hi] onto [−1, 1], by the three-term recurrence
//! t_0 = D⁻¹r, t_1 = X t_0, t_j = 2 X t_{j−1} − t_{j−2}, z = Σ d_j t_j. The d_j
//! come from interpolation at the m+1 Chebyshev points (exact for a degree-m
//! polynomial), except least squares, whose d_j are in closed form.
//! [`Step`] is one step of that recurrence; the GPU kernel
//! (`kernels/polynomial.cu`) runs the same steps in the same operation order.
//!
//! Mixed precision (§2.7, Zhang and Zhang's Algorithm 6): the whole polynomial runs
//! on an f32 copy of the matrix with f32 work vectors (r converted on entry,
//! z on exit), while PCG around it stays f64. The f32 evaluation is not
//! exactly the same linear map at every application; their Fletcher–Reeves
//! β works with it, as it does here (`tests` compare final accuracies).

use std::fmt;
use std::str::FromStr;

use nalgebra::{DMatrix, SymmetricEigen};
use rayon::prelude::*;

use super::reduce::dot;
use super::scalar::Precision;
use super::triangles::Triangles;
use super::{LinearOperator, SolveError};
use crate::foam::write::format_g;
use crate::sparse::Csr;

/// Which polynomial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolynomialKind {
    Neumann,
    Chebyshev,
    LeastSquares,
}

impl PolynomialKind {
    pub const ALL: [Self; 3] = [Self::Neumann, Self::Chebyshev, Self::LeastSquares];

    /// The preconditioner name in `case.toml` and `fvSolution`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Neumann => "Neumann",
            Self::Chebyshev => "Chebyshev",
            Self::LeastSquares => "leastSquares",
        }
    }

    /// The kind named `s` (case-insensitive), if it is one.
    pub fn named(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
    }
}

/// How the upper eigenvalue bound b of D⁻¹A is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EigenBound {
    /// max_i Σ_j |a_ij| / a_ii: always an upper bound, no products.
    Gershgorin,
    /// `steps` Lanczos steps on D^-½ A D^-½ plus the Zhou–Saad safeguard,
    /// capped by Gershgorin.
    Lanczos { steps: usize },
}

impl FromStr for EigenBound {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "gershgorin" => Ok(Self::Gershgorin),
            "lanczos" => Ok(Self::Lanczos {
                steps: DEFAULT_LANCZOS_STEPS,
            }),
            _ => Err(format!(
                "unknown eigenvalue bound '{s}' (choose one of Gershgorin, Lanczos)"
            )),
        }
    }
}

/// Lanczos steps when only `Lanczos` is named.
pub const DEFAULT_LANCZOS_STEPS: usize = 10;

/// Highest degree accepted (m products by A per application).
pub const MAX_DEGREE: usize = 32;

/// A polynomial preconditioner and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolynomialSettings {
    pub kind: PolynomialKind,
    /// m: products by A per application (Zhang and Zhang's (2013) "order").
    pub degree: usize,
    pub bound: EigenBound,
    /// Chebyshev only: the interval is [b / eigen_ratio, b].
    pub eigen_ratio: f64,
    pub precision: Precision,
}

impl PolynomialSettings {
    /// `kind` of `degree` with the Gershgorin bound, ratio 30, in f64.
    pub fn new(kind: PolynomialKind, degree: usize) -> Self {
        Self {
            kind,
            degree,
            bound: EigenBound::Gershgorin,
            eigen_ratio: 30.0,
            precision: Precision::Double,
        }
    }

    /// The default settings of a polynomial name (degree 4), if it is one.
    pub fn named(name: &str) -> Option<Self> {
        PolynomialKind::named(name).map(|k| Self::new(k, 4))
    }

    /// [`Self::validate`], and `upper` a usable upper eigenvalue bound of
    /// D⁻¹A (positive, finite).
    pub fn validate_with_upper_bound(&self, upper: f64) -> Result<(), String> {
        self.validate()?;
        if !(upper.is_finite() && upper > 0.0) {
            return Err(format!(
                "the polynomial preconditioner needs a positive finite upper eigenvalue bound, \
                 got {upper}"
            ));
        }
        Ok(())
    }

    /// Checks the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_DEGREE).contains(&self.degree) {
            return Err(format!(
                "degree must be between 1 and {MAX_DEGREE}, got {} (degree 0 is Jacobi: use \
                 preconditioner diagonal)",
                self.degree
            ));
        }
        if let EigenBound::Lanczos { steps } = self.bound {
            if steps == 0 {
                return Err("lanczosSteps must be at least 1".into());
            }
        }
        if self.kind == PolynomialKind::Chebyshev
            && !(self.eigen_ratio.is_finite() && self.eigen_ratio > 1.0)
        {
            return Err(format!(
                "eigenRatio (Chebyshev's interval is [b/eigenRatio, b]) must be a finite number \
                 > 1, got {}",
                self.eigen_ratio
            ));
        }
        Ok(())
    }

    /// E.g. `leastSquares (degree 4, Gershgorin bound, mixed precision)`.
    pub fn describe(&self) -> String {
        let bound = match self.bound {
            EigenBound::Gershgorin => "Gershgorin bound".to_string(),
            EigenBound::Lanczos { steps } => format!("{steps}-step Lanczos bound"),
        };
        let ratio = match self.kind {
            PolynomialKind::Chebyshev => format!(", eigenRatio {}", format_g(self.eigen_ratio)),
            _ => String::new(),
        };
        format!(
            "{} (degree {}, {bound}{ratio}, {} precision)",
            self.kind.name(),
            self.degree,
            self.precision.name()
        )
    }

    /// The upper bound b of the spectrum of D⁻¹A.
    pub fn upper_bound(&self, a: &Csr) -> Result<f64, SolveError> {
        let g = gershgorin_bound(a)?;
        Ok(match self.bound {
            EigenBound::Gershgorin => g,
            EigenBound::Lanczos { steps } => lanczos_bound(a, steps)?.min(g),
        })
    }

    /// The interval [lo, hi] the polynomial is built on, given b.
    pub fn interval(&self, upper: f64) -> (f64, f64) {
        match self.kind {
            PolynomialKind::Chebyshev => (upper / self.eigen_ratio, upper),
            _ => (0.0, upper),
        }
    }

    /// The recurrence for the upper bound b ([`Self::upper_bound`]).
    pub fn recurrence(&self, upper: f64) -> Recurrence {
        let (lo, hi) = self.interval(upper);
        let m = self.degree;
        let d = match self.kind {
            PolynomialKind::LeastSquares => least_squares_coefficients(m, hi),
            PolynomialKind::Neumann => {
                let omega = 1.0 / hi;
                chebyshev_coefficients(m, lo, hi, |t| {
                    // ω Σ_{k≤m} (1 − ωt)^k by Horner in g = 1 − ωt (exact at t = 0).
                    let g = 1.0 - omega * t;
                    (0..=m).fold(0.0, |acc, _| acc * g + omega)
                })
            }
            PolynomialKind::Chebyshev => {
                let (theta, delta) = ((hi + lo) / 2.0, (hi - lo) / 2.0);
                let t_sigma = chebyshev_t(m + 1, theta / delta);
                chebyshev_coefficients(m, lo, hi, |t| {
                    (1.0 - chebyshev_t(m + 1, (theta - t) / delta) / t_sigma) / t
                })
            }
        };
        Recurrence::new(lo, hi, &d)
    }
}

impl fmt::Display for PolynomialSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// T_k(y) by the three-term recurrence (any real y).
fn chebyshev_t(k: usize, y: f64) -> f64 {
    let (mut t0, mut t1) = (1.0, y);
    if k == 0 {
        return t0;
    }
    for _ in 1..k {
        (t0, t1) = (t1, 2.0 * y * t1 - t0);
    }
    t1
}

/// The coefficients d_0..d_m of the degree-m polynomial s in the Chebyshev
/// basis of [lo, hi] (s = Σ d_j T_j(y), y = (2t − lo − hi)/(hi − lo)), by
/// interpolation at the m+1 Chebyshev points (exact for degree ≤ m).
fn chebyshev_coefficients(m: usize, lo: f64, hi: f64, s: impl Fn(f64) -> f64) -> Vec<f64> {
    let n = (m + 1) as f64;
    let angle = |k: usize| std::f64::consts::PI * (k as f64 + 0.5) / n;
    let values: Vec<f64> = (0..=m)
        .map(|k| s(lo + (hi - lo) * (angle(k).cos() + 1.0) / 2.0))
        .collect();
    (0..=m)
        .map(|j| {
            let sum: f64 = (0..=m)
                .map(|k| values[k] * (j as f64 * angle(k)).cos())
                .sum();
            sum * if j == 0 { 1.0 } else { 2.0 } / n
        })
        .collect()
}

/// Least squares of degree m on [0, b] in the Chebyshev basis (closed
/// form after Zhang & Zhang 2013, §2.5, and Saad ch. 12.3): M⁻¹ = (4/b) s_m with
/// s_m = (1/(2m+3)) [(m+1)(m+2)/2 + Σ_j (−1)^j (m+1−j)(m+2−j) T_j(y)].
fn least_squares_coefficients(m: usize, b: f64) -> Vec<f64> {
    let scale = 4.0 / b / (2 * m + 3) as f64;
    (0..=m)
        .map(|j| {
            let w = ((m + 1 - j) * (m + 2 - j)) as f64;
            let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
            scale * if j == 0 { w / 2.0 } else { sign * w }
        })
        .collect()
}

/// One step of the recurrence on row i, with y = (D⁻¹A t_in)_i:
/// t_out = mat·y + id·t_in − old·t_old, z = (first: d_in·t_in, else z) + d_out·t_out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub mat: f64,
    pub id: f64,
    pub old: f64,
    pub d_in: f64,
    pub d_out: f64,
}

/// The steps of z = Σ_j d_j T_j(X) D⁻¹ r on [lo, hi].
#[derive(Clone, Debug, PartialEq)]
pub struct Recurrence {
    pub lo: f64,
    pub hi: f64,
    /// d_0..d_m.
    pub coefficients: Vec<f64>,
    /// Step j (j = 1..m) makes t_j; step 1 starts z = d_0 t_0.
    pub steps: Vec<Step>,
}

impl Recurrence {
    fn new(lo: f64, hi: f64, d: &[f64]) -> Self {
        // X t = c1 · D⁻¹A t + c0 · t.
        let (c1, c0) = (2.0 / (hi - lo), -(hi + lo) / (hi - lo));
        let steps = (1..d.len())
            .map(|j| {
                let f = if j == 1 { 1.0 } else { 2.0 };
                Step {
                    mat: f * c1,
                    id: f * c0,
                    old: if j == 1 { 0.0 } else { 1.0 },
                    d_in: if j == 1 { d[0] } else { 0.0 },
                    d_out: d[j],
                }
            })
            .collect();
        Self {
            lo,
            hi,
            coefficients: d.to_vec(),
            steps,
        }
    }

    /// s(t) = Σ d_j T_j(y), for tests and tables.
    pub fn eval(&self, t: f64) -> f64 {
        let y = (2.0 * t - self.lo - self.hi) / (self.hi - self.lo);
        self.coefficients
            .iter()
            .enumerate()
            .map(|(j, d)| d * chebyshev_t(j, y))
            .sum()
    }
}

/// max_i Σ_j |a_ij| / a_ii ≥ λ_max(D⁻¹A) (Gershgorin on the rows of D⁻¹A).
pub fn gershgorin_bound(a: &Csr) -> Result<f64, SolveError> {
    let t = Triangles::new(a, "polynomial")?;
    Ok((0..t.n())
        .into_par_iter()
        .map(|r| {
            t.off_diagonal(r)
                .fold(t.diag(r), |s, slot| s + t.value(slot).abs())
                / t.diag(r)
        })
        .reduce(|| 0.0, f64::max))
}

/// A reproducible start vector in [−1, 1) (splitmix64 of the index), the
/// same on every run and every device.
pub fn lanczos_start(n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let mut z = i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// `steps` Lanczos steps on Ã = D^-½ A D^-½ (no reorthogonalisation) from
/// [`lanczos_start`], and the Zhou–Saad upper bound θ_max(T_k) + ‖f_k‖
/// (Zhang and Zhang 2013, §2.6). Stops early (exact invariant subspace) when ‖f‖ vanishes.
/// Runs on the host (k CSR products) for the GPU solves too.
pub fn lanczos_bound(a: &Csr, steps: usize) -> Result<f64, SolveError> {
    let t = Triangles::new(a, "polynomial")?;
    let n = t.n();
    if n == 0 {
        return Ok(1.0);
    }
    let s: Vec<f64> = (0..n).map(|r| 1.0 / t.diag(r).sqrt()).collect();
    let op = |v: &[f64], out: &mut [f64]| {
        let u: Vec<f64> = v.iter().zip(&s).map(|(v, s)| v * s).collect();
        a.spmv(&u, out);
        out.iter_mut().zip(&s).for_each(|(o, s)| *o *= s);
    };
    // Deterministic sums (`solve::reduce`): the same bound on every run, so
    // that CPU and GPU solves precondition with the same polynomial.
    let norm = |v: &[f64]| dot(v, v).sqrt();
    let mut v = lanczos_start(n);
    let v_norm = norm(&v);
    v.iter_mut().for_each(|x| *x /= v_norm);
    let mut v_old = vec![0.0; n];
    let mut f = vec![0.0; n];
    let (mut alphas, mut betas) = (Vec::new(), Vec::new());
    let mut beta = 0.0;
    for _ in 0..steps {
        op(&v, &mut f);
        f.par_iter_mut()
            .zip(&v_old)
            .for_each(|(f, o)| *f -= beta * o);
        let alpha = dot(&f, &v);
        f.par_iter_mut().zip(&v).for_each(|(f, v)| *f -= alpha * v);
        alphas.push(alpha);
        beta = norm(&f);
        if !beta.is_finite() {
            return Err(SolveError::InvalidControls(
                "the Lanczos eigenvalue estimate broke down (non-finite matrix entries?)".into(),
            ));
        }
        if beta <= 1e-14 * alpha.abs() {
            break;
        }
        betas.push(beta);
        std::mem::swap(&mut v_old, &mut v);
        v.par_iter_mut().zip(&f).for_each(|(v, f)| *v = f / beta);
    }
    let k = alphas.len();
    let tri = DMatrix::from_fn(k, k, |i, j| match i.abs_diff(j) {
        0 => alphas[i],
        1 => betas[i.min(j)],
        _ => 0.0,
    });
    let theta_max = SymmetricEigen::new(tri)
        .eigenvalues
        .iter()
        .copied()
        .fold(f64::MIN, f64::max);
    Ok(theta_max + beta)
}

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
        settings
            .validate_with_upper_bound(upper)
            .map_err(SolveError::InvalidControls)?;
        let recurrence = settings.recurrence(upper);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, random_symmetric};
    use nalgebra::DVector;

    /// D⁻¹A and D⁻¹ densely.
    fn scaled(a: &Csr) -> (DMatrix<f64>, DMatrix<f64>) {
        let m = dense(a);
        let dinv = DMatrix::from_diagonal(&m.diagonal().map(|d| 1.0 / d));
        (&dinv * &m, dinv)
    }

    fn max_rel_diff(x: &[f64], y: &DVector<f64>) -> f64 {
        let scale = y.amax();
        x.iter()
            .zip(y.iter())
            .map(|(a, b)| (a - b).abs() / scale)
            .fold(0.0, f64::max)
    }

    /// Saad's table of the least-squares polynomials on [0, 4] (Saad ch. 12.3).
    const LS_TABLE: [&[f64]; 4] = [
        &[14., -7., 1.],
        &[55., -77., 44., -11., 1.],
        &[140., -378., 450., -275., 90., -15., 1.],
        &[285., -1254., 2508., -2717., 1729., -665., 152., -19., 1.],
    ];

    #[test]
    fn each_polynomial_equals_its_dense_definition() {
        let a = random_symmetric(60, 5, 3);
        let (x, dinv) = scaled(&a);
        let r: Vec<f64> = (0..60).map(|i| ((i * 29) % 13) as f64 - 6.0).collect();
        let w = &dinv * DVector::from_column_slice(&r);
        let id = DMatrix::<f64>::identity(60, 60);
        for m in [2usize, 4, 6, 8] {
            for kind in PolynomialKind::ALL {
                let s = PolynomialSettings::new(kind, m);
                let p = PolynomialPreconditioner::new(&a, &s).unwrap();
                let b = p.recurrence().hi;
                let expected = match kind {
                    // ω Σ_{k≤m} (I − ωX)^k w.
                    PolynomialKind::Neumann => {
                        let g = &id - &x / b;
                        let mut term = &w / b;
                        let mut sum = term.clone();
                        for _ in 0..m {
                            term = &g * term;
                            sum += &term;
                        }
                        sum
                    }
                    // Saad Alg. 12.1 (Zhang & Zhang 2013, §2.4): m+1 Chebyshev steps on X z = w from 0.
                    PolynomialKind::Chebyshev => {
                        let (lo, hi) = s.interval(b);
                        let (theta, delta) = ((hi + lo) / 2.0, (hi - lo) / 2.0);
                        let sigma = theta / delta;
                        let mut rho_prev = 1.0 / sigma;
                        let mut d = &w / theta;
                        let mut z = d.clone();
                        let mut res = &w - &x * &d;
                        for k in 1..=m {
                            let rho = 1.0 / (2.0 * sigma - rho_prev);
                            d = &d * (rho * rho_prev) + &res * (2.0 * rho / delta);
                            z += &d;
                            if k < m {
                                res -= &x * &d;
                            }
                            rho_prev = rho;
                        }
                        z
                    }
                    // (4/b)/(2m+3) Σ c_i (4X/b)^i w, the monomial table.
                    PolynomialKind::LeastSquares => {
                        let c = LS_TABLE[m / 2 - 1];
                        let tau = &x * (4.0 / b);
                        let mut acc = &w * c[m];
                        for i in (0..m).rev() {
                            acc = &tau * acc + &w * c[i];
                        }
                        acc * (4.0 / b / (2 * m + 3) as f64)
                    }
                };
                let mut z = vec![0.0; 60];
                p.apply(&r, &mut z);
                let diff = max_rel_diff(&z, &expected);
                assert!(diff < 1e-11, "{kind:?} degree {m}: {diff:e}");
            }
        }
    }

    #[test]
    fn least_squares_closed_form_equals_interpolation() {
        for m in 1..=12 {
            let d = least_squares_coefficients(m, 2.0);
            let table_free =
                chebyshev_coefficients(m, 0.0, 2.0, |t| Recurrence::new(0.0, 2.0, &d).eval(t));
            for (a, b) in d.iter().zip(&table_free) {
                assert!((a - b).abs() < 1e-12 * d[0].abs(), "m {m}: {a} vs {b}");
            }
            // t s(t) ≤ 1.25 on [0, b] (1.25 at m = 1, ~1.22 above) and s(0) = (4/b)(m+1)(m+2)/6 (§2.5).
            let r = Recurrence::new(0.0, 2.0, &d);
            let s0 = 2.0 * ((m + 1) * (m + 2)) as f64 / 6.0;
            assert!((r.eval(0.0) - s0).abs() < 1e-10 * s0, "m {m}");
            let peak = (0..=1000)
                .map(|i| 2.0 * i as f64 / 1000.0)
                .map(|t| t * r.eval(t))
                .fold(0.0, f64::max);
            assert!(peak > 1.0 && peak <= 1.25 + 1e-12, "m {m}: peak {peak}");
        }
    }

    #[test]
    fn every_kind_is_positive_on_its_interval() {
        // M⁻¹ SPD needs s > 0 on (0, b]; the PCG tests rely on it.
        for kind in PolynomialKind::ALL {
            for m in 1..=16 {
                let r = PolynomialSettings::new(kind, m).recurrence(2.0);
                for i in 1..=400 {
                    let t = 2.0 * i as f64 / 400.0;
                    assert!(r.eval(t) > 0.0, "{kind:?} m {m} t {t}: {}", r.eval(t));
                }
            }
        }
    }

    #[test]
    fn lanczos_and_gershgorin_bounds_are_safe() {
        for seed in 0..6 {
            let a = random_symmetric(200, 6, seed);
            // λ_max(D⁻¹A) = λ_max(D^-½ A D^-½), symmetric.
            let m = dense(&a);
            let s = m.diagonal().map(|d| 1.0 / d.sqrt());
            let sym = DMatrix::from_fn(200, 200, |i, j| s[i] * m[(i, j)] * s[j]);
            let exact = SymmetricEigen::new(sym).eigenvalues.max();
            let g = gershgorin_bound(&a).unwrap();
            for steps in [3, 5, 10, 20] {
                let l = lanczos_bound(&a, steps).unwrap();
                assert!(l >= exact, "seed {seed}, {steps} steps: {l} < {exact}");
            }
            assert!(g >= exact);
        }
    }

    #[test]
    fn mixed_precision_is_the_f32_polynomial() {
        let a = random_symmetric(300, 5, 9);
        let r: Vec<f64> = lanczos_start(300);
        for kind in PolynomialKind::ALL {
            let s = PolynomialSettings::new(kind, 6);
            let mut mixed = s;
            mixed.precision = Precision::Mixed;
            let (pd, pm) = (
                PolynomialPreconditioner::new(&a, &s).unwrap(),
                PolynomialPreconditioner::new(&a, &mixed).unwrap(),
            );
            let (mut zd, mut zm) = (vec![0.0; 300], vec![0.0; 300]);
            pd.apply(&r, &mut zd);
            pm.apply(&r, &mut zm);
            let diff = max_rel_diff(&zm, &DVector::from_column_slice(&zd));
            assert!(diff > 0.0 && diff < 1e-5, "{kind:?}: {diff:e}");
        }
    }

    #[test]
    fn settings_are_checked() {
        let mut s = PolynomialSettings::new(PolynomialKind::Chebyshev, 0);
        assert!(s.validate().unwrap_err().contains("degree"));
        s.degree = 4;
        s.eigen_ratio = 1.0;
        assert!(s.validate().unwrap_err().contains("eigenRatio"));
        s.eigen_ratio = 20.0;
        s.bound = EigenBound::Lanczos { steps: 0 };
        assert!(s.validate().unwrap_err().contains("lanczosSteps"));
        assert_eq!("lanczos".parse(), Ok(EigenBound::Lanczos { steps: 10 }));
        assert!("power"
            .parse::<EigenBound>()
            .unwrap_err()
            .contains("Gershgorin"));
        assert_eq!("Mixed".parse(), Ok(Precision::Mixed));
        assert_eq!(
            PolynomialSettings::named("leastsquares").map(|s| s.kind),
            Some(PolynomialKind::LeastSquares)
        );
        let bad = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, -1.0]).unwrap();
        assert!(matches!(
            PolynomialPreconditioner::new(
                &bad,
                &PolynomialSettings::new(PolynomialKind::Neumann, 2)
            ),
            Err(SolveError::NonPositiveDiagonal { row: 1, .. })
        ));
    }
}

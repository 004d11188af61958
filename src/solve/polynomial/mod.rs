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
//!
//! Layout: this folder is the algorithm's home. `mod.rs` holds the settings,
//! their one parser ([`PolynomialSettings::from_keys`], used by the command
//! line `Chebyshev:degree=6`, case.toml `preconditioner = { name =
//! "Chebyshev", degree = 6 }` and fvSolution `preconditioner { preconditioner
//! Chebyshev; degree 6; }`), the polynomials' coefficients, the recurrence
//! and the eigenvalue bounds, which both sides share, and these docs;
//! `cpu.rs` the CPU evaluation; `cuda.rs` the device preconditioner and
//! smoother (compiled as `gpu::polynomial`, so `solve` does not depend on
//! `gpu`) with its kernels in `kernels/polynomial.cu`; `tests.rs` the
//! tests. The settings stay `Preconditioner::Polynomial` (not a
//! `Registered` algorithm): the GPU defaults (`registry::GPU_DEFAULTS`), the
//! smoothers and the case's device paths match that value.

mod cpu;

use std::fmt;
use std::str::FromStr;

use nalgebra::{DMatrix, SymmetricEigen};
use rayon::prelude::*;

use super::algorithm::KeyValues;
use super::reduce::dot;
use super::scalar::Precision;
use super::triangles::Triangles;
use super::SolveError;
use crate::foam::write::format_g;
use crate::sparse::Csr;

pub use cpu::{PolynomialPreconditioner, Real};

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

    /// The keys [`Self::from_keys`] reads.
    pub const KEYS: &'static [&'static str] = &[
        "degree",
        "eigenBound",
        "lanczosSteps",
        "eigenRatio",
        "precision",
    ];

    /// The settings of the polynomial `name` (`Neumann`, `Chebyshev`,
    /// `leastSquares`: the name is the kind, so unlike
    /// `algorithm::Algorithm::from_keys` it is an argument) with `keys`
    /// (`degree`, `eigenBound`, `lanczosSteps`, `eigenRatio`, `precision`),
    /// validated: the one parser of every front end (`solve::registry`).
    pub fn from_keys(name: &str, keys: &KeyValues) -> Result<Self, String> {
        let mut p = Self::named(name).ok_or_else(|| format!("'{name}' is not a polynomial"))?;
        if let Some(v) = keys.parsed("degree", "a whole number")? {
            p.degree = v;
        }
        if let Some(v) = keys.get("eigenBound") {
            p.bound = v.parse()?;
        }
        if let Some(steps) = keys.parsed("lanczosSteps", "a whole number")? {
            p.bound = EigenBound::Lanczos { steps };
        }
        if let Some(v) = keys.parsed("eigenRatio", "a number")? {
            p.eigen_ratio = v;
        }
        if let Some(v) = keys.get("precision") {
            p.precision = v.parse()?;
        }
        p.validate()?;
        Ok(p)
    }

    /// [`Self::recurrence`] for `upper` after [`Self::validate`] and the check
    /// that `upper` is a usable upper eigenvalue bound of D⁻¹A (positive,
    /// finite): what every set-up from a bound starts with.
    pub fn checked_recurrence(&self, upper: f64) -> Result<Recurrence, String> {
        self.validate()?;
        if !(upper.is_finite() && upper > 0.0) {
            return Err(format!(
                "the polynomial preconditioner needs a positive finite upper eigenvalue bound, \
                 got {upper}"
            ));
        }
        Ok(self.recurrence(upper))
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

#[cfg(test)]
mod tests;

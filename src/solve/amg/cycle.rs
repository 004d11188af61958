//! The AMG cycle as a preconditioner z = M⁻¹ r (from z = 0 on every level).
//!
//! V(ν, ν): pre-smooth from 0, restrict the residual (R = Pᵀ: sums over the
//! aggregate), solve the coarse level by the cycle, x += θ P x_c (θ the
//! over-correction), post-smooth with the adjoint smoother. W: the coarse
//! cycle twice (the second on the remaining coarse residual). K (Notay &
//! Vassilevski 2008, §3; AGMG): two flexible-CG steps on each coarse level,
//! each preconditioned by the coarse cycle; the steps' coefficients depend
//! on the vector, so M is not linear and PCG must be flexible.
//!
//! The smoothers are the point smoothers of `solve::smoother` (the same row
//! formulas) written over a level's matrix, which the hierarchy owns:
//! weighted and L1-Jacobi (first sweep from 0: x = s ∘ b, no product),
//! Chebyshev in D⁻¹A (Adams, Brezina, Hu, Tuminaro 2003 §2; Saad, Iterative
//! Methods 2nd ed. Alg. 12.1) and multicolour Gauss–Seidel (forward before,
//! backward after the correction: the two are adjoint, so the cycle is
//! symmetric).

use std::sync::Mutex;

use rayon::prelude::*;

use super::super::colouring::Colouring;
use super::super::reduce::dot;
use super::super::smoother::l1_jacobi_scale;
use super::super::{LinearOperator, SolveError};
use super::{AmgSettings, AmgSmootherKind, CycleKind, Hierarchy};
use crate::sparse::Csr;

/// Rows per rayon task in the vector loops (coarse levels are small).
const MIN_LEN: usize = 1024;

/// λmin = λmax / CHEBYSHEV_RATIO: the upper part of the spectrum that the
/// smoother damps (the usual ratio of AmgX, hypre and MueLu).
const CHEBYSHEV_RATIO: f64 = 30.0;

/// A level's smoother, with what it precomputes from the level's matrix.
enum LevelSmoother {
    /// x_i ← x_i + s_i (b − A x)_i (weighted or L1-Jacobi), double-buffered.
    Jacobi { scale: Vec<f64> },
    /// Chebyshev polynomial in D⁻¹A on [λmax/30, λmax].
    Chebyshev { inv_diag: Vec<f64>, lambda_max: f64 },
    /// Multicolour Gauss–Seidel.
    GaussSeidel {
        diag: Vec<f64>,
        colouring: Colouring,
    },
}

/// The diagonal of `a`, positive in every row (else the error names the row).
fn diagonal(a: &Csr, level: usize) -> Result<Vec<f64>, SolveError> {
    (0..a.n_rows())
        .map(|r| match a.slot(r, r).map(|s| a.values()[s]) {
            Some(d) if d > 0.0 => Ok(d),
            found => Err(SolveError::InvalidControls(format!(
                "AMG: level {level} has diagonal {} in row {r}; every level needs a positive \
                 diagonal (is the matrix symmetric positive definite?)",
                found.unwrap_or(0.0)
            ))),
        })
        .collect()
}

/// (b − A x)_i, the row in stored order.
fn row_residual(a: &Csr, i: usize, b: &[f64], x: &[f64]) -> f64 {
    let (cols, vals) = a.row(i);
    let ax: f64 = cols
        .iter()
        .zip(vals)
        .map(|(&c, &v)| v * x[c as usize])
        .sum();
    b[i] - ax
}

/// r = b − A x.
fn residual(a: &Csr, b: &[f64], x: &[f64], r: &mut [f64]) {
    r.par_iter_mut()
        .enumerate()
        .with_min_len(MIN_LEN)
        .for_each(|(i, r)| *r = row_residual(a, i, b, x));
}

impl LevelSmoother {
    fn new(a: &Csr, level: usize, settings: &AmgSettings) -> Result<Self, SolveError> {
        let diag = diagonal(a, level)?;
        Ok(match settings.smoother {
            AmgSmootherKind::Jacobi => Self::Jacobi {
                scale: diag.iter().map(|d| settings.omega / d).collect(),
            },
            AmgSmootherKind::L1Jacobi => Self::Jacobi {
                scale: l1_jacobi_scale(a)?,
            },
            AmgSmootherKind::Chebyshev => {
                // Gershgorin: every eigenvalue of D⁻¹A is at most max_i Σ_j |a_ij| / a_ii.
                let lambda_max = (0..a.n_rows())
                    .into_par_iter()
                    .map(|i| a.row(i).1.iter().map(|v| v.abs()).sum::<f64>() / diag[i])
                    .reduce(|| 0.0, f64::max);
                Self::Chebyshev {
                    inv_diag: diag.iter().map(|d| 1.0 / d).collect(),
                    lambda_max,
                }
            }
            AmgSmootherKind::MulticolourGaussSeidel => Self::GaussSeidel {
                colouring: Colouring::jones_plassmann(a),
                diag,
            },
        })
    }

    /// `sweeps` sweeps on A x = b from x (from 0 when `from_zero`: x's
    /// contents are ignored); Gauss–Seidel sweeps forward if `forward`, else
    /// backward. `t` are two scratch vectors of the level's size.
    #[allow(clippy::too_many_arguments)]
    fn smooth(
        &self,
        a: &Csr,
        b: &[f64],
        x: &mut [f64],
        sweeps: usize,
        from_zero: bool,
        forward: bool,
        t: &mut [Vec<f64>; 2],
    ) {
        match self {
            Self::Jacobi { scale } => {
                let mut first = 0;
                if from_zero {
                    x.par_iter_mut()
                        .enumerate()
                        .with_min_len(MIN_LEN)
                        .for_each(|(i, x)| *x = scale[i] * b[i]);
                    first = 1;
                }
                let old = &mut t[0];
                for _ in first..sweeps {
                    old.copy_from_slice(x);
                    x.par_iter_mut()
                        .enumerate()
                        .with_min_len(MIN_LEN)
                        .for_each(|(i, x)| *x = old[i] + scale[i] * row_residual(a, i, b, old));
                }
            }
            Self::Chebyshev {
                inv_diag,
                lambda_max,
            } => chebyshev(a, inv_diag, *lambda_max, b, x, sweeps, from_zero, t),
            Self::GaussSeidel { diag, colouring } => {
                if from_zero {
                    x.fill(0.0);
                }
                let n_colours = colouring.n_colours();
                let new = &mut t[0];
                for _ in 0..sweeps {
                    for k in 0..n_colours {
                        let colour = if forward { k } else { n_colours - 1 - k };
                        let rows = colouring.rows_of(colour);
                        // x_i = (b_i − Σ_{j≠i} a_ij x_j) / a_ii = x_i + (b − A x)_i / a_ii.
                        new[..rows.len()]
                            .par_iter_mut()
                            .zip(rows.par_iter())
                            .with_min_len(MIN_LEN)
                            .for_each(|(v, &r)| {
                                let r = r as usize;
                                *v = x[r] + row_residual(a, r, b, x) / diag[r];
                            });
                        for (&r, &v) in rows.iter().zip(new.iter()) {
                            x[r as usize] = v;
                        }
                    }
                }
            }
        }
    }
}

/// Chebyshev smoothing of degree `degree` in D⁻¹A on [λmax/30, λmax]
/// (Saad Alg. 12.1 on the D⁻¹-preconditioned system): with θ, δ the centre
/// and half-width of the interval, σ = θ/δ, ρ₀ = 1/σ, d₀ = D⁻¹r₀/θ and
/// ρ_k = 1/(2σ − ρ_{k−1}), d_k = ρ_k ρ_{k−1} d_{k−1} + (2ρ_k/δ) D⁻¹ r_k;
/// x += d_k. One matrix product per degree (none for r₀ from x = 0).
#[allow(clippy::too_many_arguments)]
fn chebyshev(
    a: &Csr,
    inv_diag: &[f64],
    lambda_max: f64,
    b: &[f64],
    x: &mut [f64],
    degree: usize,
    from_zero: bool,
    t: &mut [Vec<f64>; 2],
) {
    let lambda_min = lambda_max / CHEBYSHEV_RATIO;
    let theta = 0.5 * (lambda_max + lambda_min);
    let delta = 0.5 * (lambda_max - lambda_min);
    let sigma = theta / delta;
    let [r, d] = t;
    if from_zero {
        r.copy_from_slice(b);
        x.fill(0.0);
    } else {
        residual(a, b, x, r);
    }
    let mut rho = 1.0 / sigma;
    d.par_iter_mut()
        .zip(x.par_iter_mut())
        .enumerate()
        .with_min_len(MIN_LEN)
        .for_each(|(i, (d, x))| {
            *d = inv_diag[i] * r[i] / theta;
            *x += *d;
        });
    for _ in 1..degree {
        // r ← r − A d keeps r = b − A x.
        r.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, r)| {
                let (cols, vals) = a.row(i);
                let ad: f64 = cols
                    .iter()
                    .zip(vals)
                    .map(|(&c, &v)| v * d[c as usize])
                    .sum();
                *r -= ad;
            });
        let rho_next = 1.0 / (2.0 * sigma - rho);
        let (keep, push) = (rho_next * rho, 2.0 * rho_next / delta);
        d.par_iter_mut()
            .zip(x.par_iter_mut())
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, (d, x))| {
                *d = keep * *d + push * inv_diag[i] * r[i];
                *x += *d;
            });
        rho = rho_next;
    }
}

/// Scratch vectors of one level l < L (the coarse ones of size n_{l+1}).
struct Work {
    /// Residual and smoother scratch, size n_l.
    r: Vec<f64>,
    t: [Vec<f64>; 2],
    /// Coarse right-hand side and correction.
    b_coarse: Vec<f64>,
    x_coarse: Vec<f64>,
    /// W- and K-cycle vectors on level l + 1 (empty for V).
    krylov: [Vec<f64>; 5],
}

/// The AMG preconditioner of a fine matrix: the hierarchy, the smoothers and
/// the cycle's scratch vectors (one application at a time).
pub struct Amg<'a> {
    fine: &'a Csr,
    hierarchy: Hierarchy,
    smoothers: Vec<LevelSmoother>,
    work: Mutex<Vec<Work>>,
}

impl<'a> Amg<'a> {
    /// Sets the hierarchy of `a` up ([`Hierarchy::setup`]).
    pub fn new(a: &'a Csr, settings: &AmgSettings) -> Result<Self, SolveError> {
        Self::with_hierarchy(a, Hierarchy::setup(a, settings)?)
    }

    /// The cycle over a hierarchy of `a` (set up, or updated, for `a`).
    pub fn with_hierarchy(a: &'a Csr, hierarchy: Hierarchy) -> Result<Self, SolveError> {
        assert_eq!(a.n_rows(), hierarchy.n, "Amg: hierarchy size");
        let settings = hierarchy.settings;
        let n_transfers = hierarchy.levels.len();
        let smoothers = (0..n_transfers)
            .map(|l| LevelSmoother::new(hierarchy.matrix(a, l), l, &settings))
            .collect::<Result<_, _>>()?;
        let size = |l: usize| hierarchy.matrix(a, l).n_rows();
        let work = (0..n_transfers)
            .map(|l| {
                let (n, nc) = (size(l), size(l + 1));
                let krylov_size = if settings.cycle == CycleKind::V {
                    0
                } else {
                    nc
                };
                Work {
                    r: vec![0.0; n],
                    t: [vec![0.0; n], vec![0.0; n]],
                    b_coarse: vec![0.0; nc],
                    x_coarse: vec![0.0; nc],
                    krylov: std::array::from_fn(|_| vec![0.0; krylov_size]),
                }
            })
            .collect();
        Ok(Self {
            fine: a,
            hierarchy,
            smoothers,
            work: Mutex::new(work),
        })
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// One cycle on level l: x ≈ A_l⁻¹ b from x = 0.
    fn cycle(&self, l: usize, b: &[f64], x: &mut [f64], work: &mut [Work]) {
        let h = &self.hierarchy;
        if l == h.levels.len() {
            h.coarsest.solve(b, x);
            return;
        }
        let s = &h.settings;
        let a = h.matrix(self.fine, l);
        let level = &h.levels[l];
        let (w, rest) = work.split_first_mut().expect("a work entry per level");
        let smoother = &self.smoothers[l];
        smoother.smooth(a, b, x, s.sweeps, true, true, &mut w.t);
        residual(a, b, x, &mut w.r);
        let members = &level.members;
        w.b_coarse
            .par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(c, bc)| *bc = members.of(c).iter().map(|&i| w.r[i as usize]).sum());
        self.coarse_solve(l + 1, &w.b_coarse, &mut w.x_coarse, &mut w.krylov, rest);
        let theta = match s.cycle {
            CycleKind::K => 1.0,
            CycleKind::V | CycleKind::W => s.over_correction,
        };
        let xc = &w.x_coarse;
        x.par_iter_mut()
            .zip(level.aggregate.par_iter())
            .with_min_len(MIN_LEN)
            .for_each(|(x, &c)| *x += theta * xc[c as usize]);
        smoother.smooth(a, b, x, s.sweeps, false, false, &mut w.t);
    }

    /// x ≈ A_l⁻¹ b on coarse level l (l ≥ 1) as the cycle kind asks.
    fn coarse_solve(
        &self,
        l: usize,
        b: &[f64],
        x: &mut [f64],
        krylov: &mut [Vec<f64>; 5],
        rest: &mut [Work],
    ) {
        let h = &self.hierarchy;
        if l == h.levels.len() {
            h.coarsest.solve(b, x);
            return;
        }
        let a = h.matrix(self.fine, l);
        match h.settings.cycle {
            CycleKind::V => self.cycle(l, b, x, rest),
            CycleKind::W => {
                let [r, e, ..] = krylov;
                self.cycle(l, b, x, rest);
                residual(a, b, x, r);
                self.cycle(l, r, e, rest);
                x.par_iter_mut()
                    .zip(e.par_iter())
                    .with_min_len(MIN_LEN)
                    .for_each(|(x, e)| *x += e);
            }
            CycleKind::K => self.k_step(l, a, b, x, krylov, rest),
        }
    }

    /// Two flexible-CG steps on A_l x = b from 0 with the cycle B as
    /// preconditioner: c = B b, v = A c, ρ₁ = c·v, α₁ = c·b; r = b − (α₁/ρ₁) v,
    /// d = B r, w = A d, γ = d·v, β = d·w, α₂ = d·r, ρ₂ = β − γ²/ρ₁;
    /// x = (α₁/ρ₁ − γα₂/(ρ₁ρ₂)) c + (α₂/ρ₂) d (Notay & Vassilevski 2008,
    /// Algorithm 3.2 without its residual test, so the work is fixed).
    fn k_step(
        &self,
        l: usize,
        a: &Csr,
        b: &[f64],
        x: &mut [f64],
        krylov: &mut [Vec<f64>; 5],
        rest: &mut [Work],
    ) {
        let [c, v, r, d, w] = krylov;
        self.cycle(l, b, c, rest);
        a.spmv(c, v);
        let (rho1, alpha1) = (dot(c, v), dot(c, b));
        // c·Ac = 0 (b = 0) or not a number: nothing to correct.
        if rho1.is_nan() || rho1 <= 0.0 {
            x.fill(0.0);
            return;
        }
        let step1 = alpha1 / rho1;
        r.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, r)| *r = b[i] - step1 * v[i]);
        self.cycle(l, r, d, rest);
        a.spmv(d, w);
        let (gamma, beta, alpha2) = (dot(d, v), dot(d, w), dot(d, r));
        let rho2 = beta - gamma * gamma / rho1;
        // d in the span of c (to round-off): the first step is all there is.
        let (cc, cd) = if rho2 > 1e-14 * beta {
            (step1 - gamma * alpha2 / (rho1 * rho2), alpha2 / rho2)
        } else {
            (step1, 0.0)
        };
        x.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, x)| *x = cc * c[i] + cd * d[i]);
    }
}

impl LinearOperator for Amg<'_> {
    fn n(&self) -> usize {
        self.hierarchy.n
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let mut work = self.work.lock().expect("AMG work vectors");
        self.cycle(0, r, z, &mut work);
    }
}

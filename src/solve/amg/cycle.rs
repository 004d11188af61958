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
//!
//! The cycle is generic over its arithmetic ([`CycleReal`]): f64, or f32 for
//! `precision mixed` (every level's matrix values rounded to f32, vectors and
//! smoother coefficients in f32, scalars of the K-cycle and the coarsest
//! solve in f64; r rounded to f32 on entry and z widened on exit), the CPU
//! reference of the GPU's mixed-precision cycle.

use std::sync::Mutex;

use rayon::prelude::*;

use super::super::colouring::Colouring;
use super::super::reduce::sum_by;
use super::super::scalar::Real;
use super::super::smoother::l1_jacobi_scale;
use super::super::{LinearOperator, SolveError};
use super::{AmgSettings, AmgSmootherKind, CycleKind, Hierarchy, Precision};
use crate::sparse::Csr;

/// Rows per rayon task in the vector loops (coarse levels are small).
const MIN_LEN: usize = 1024;

/// λmin = λmax / CHEBYSHEV_RATIO: the upper part of the spectrum that the
/// smoother damps (the usual ratio of AmgX, hypre and MueLu).
const CHEBYSHEV_RATIO: f64 = 30.0;

/// The arithmetic of a cycle: f64 (`precision double`) or f32 (`mixed`).
pub trait CycleReal: Real + 'static {
    /// `v` itself when it already has this type (f64: the hierarchy's own
    /// values are read, not copied).
    fn borrow(v: &[f64]) -> Option<&[Self]>;
}

impl CycleReal for f64 {
    fn borrow(v: &[f64]) -> Option<&[Self]> {
        Some(v)
    }
}

impl CycleReal for f32 {
    fn borrow(_: &[f64]) -> Option<&[Self]> {
        None
    }
}

/// Level matrix in the cycle's arithmetic: the pattern of the level's CSR
/// with its values in T.
#[derive(Clone, Copy)]
struct LevelMatrix<'m, T> {
    a: &'m Csr,
    values: &'m [T],
}

impl<'m, T: CycleReal> LevelMatrix<'m, T> {
    fn row(&self, i: usize) -> (&'m [u32], &'m [T]) {
        let (s, e) = (self.a.row_ptr()[i], self.a.row_ptr()[i + 1]);
        (&self.a.cols()[s..e], &self.values[s..e])
    }

    /// (A x)_i, the row in stored order, summed from zero.
    fn row_product(&self, i: usize, x: &[T]) -> T {
        let (cols, vals) = self.row(i);
        cols.iter()
            .zip(vals)
            .fold(T::ZERO, |acc, (&c, &v)| acc + v * x[c as usize])
    }

    /// (b − A x)_i.
    fn row_residual(&self, i: usize, b: &[T], x: &[T]) -> T {
        b[i] - self.row_product(i, x)
    }

    /// r = b − A x.
    fn residual(&self, b: &[T], x: &[T], r: &mut [T]) {
        r.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, r)| *r = self.row_residual(i, b, x));
    }

    /// y = A x.
    fn spmv(&self, x: &[T], y: &mut [T]) {
        y.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, y)| *y = self.row_product(i, x));
    }
}

/// a · b in f64 (fixed chunked order, `solve::reduce`).
fn dot<T: CycleReal>(a: &[T], b: &[T]) -> f64 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    sum_by(a.len(), |i| a[i].to_f64() * b[i].to_f64())
}

/// A level's smoother, with what it precomputes from the level's matrix
/// (computed in f64, then rounded to T).
enum LevelSmoother<T> {
    /// x_i ← x_i + s_i (b − A x)_i (weighted or L1-Jacobi), double-buffered.
    Jacobi { scale: Vec<T> },
    /// Chebyshev polynomial in D⁻¹A on [λmax/30, λmax].
    Chebyshev { inv_diag: Vec<T>, lambda_max: f64 },
    /// Multicolour Gauss–Seidel.
    GaussSeidel { diag: Vec<T>, colouring: Colouring },
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

fn rounded<T: CycleReal>(v: impl IntoIterator<Item = f64>) -> Vec<T> {
    v.into_iter().map(T::from_f64).collect()
}

impl<T: CycleReal> LevelSmoother<T> {
    fn new(a: &Csr, level: usize, settings: &AmgSettings) -> Result<Self, SolveError> {
        let diag = diagonal(a, level)?;
        Ok(match settings.smoother {
            AmgSmootherKind::Jacobi => Self::Jacobi {
                scale: rounded(diag.iter().map(|d| settings.omega / d)),
            },
            AmgSmootherKind::L1Jacobi => Self::Jacobi {
                scale: rounded(l1_jacobi_scale(a)?),
            },
            AmgSmootherKind::Chebyshev => {
                // Gershgorin: every eigenvalue of D⁻¹A is at most max_i Σ_j |a_ij| / a_ii.
                let lambda_max = (0..a.n_rows())
                    .into_par_iter()
                    .map(|i| a.row(i).1.iter().map(|v| v.abs()).sum::<f64>() / diag[i])
                    .reduce(|| 0.0, f64::max);
                Self::Chebyshev {
                    inv_diag: rounded(diag.iter().map(|d| 1.0 / d)),
                    lambda_max,
                }
            }
            AmgSmootherKind::MulticolourGaussSeidel => Self::GaussSeidel {
                colouring: Colouring::jones_plassmann(a),
                diag: rounded(diag),
            },
        })
    }

    /// `sweeps` sweeps on A x = b from x (from 0 when `from_zero`: x's
    /// contents are ignored); Gauss–Seidel sweeps forward if `forward`, else
    /// backward. `t` are two scratch vectors of the level's size.
    #[allow(clippy::too_many_arguments)]
    fn smooth(
        &self,
        a: LevelMatrix<'_, T>,
        b: &[T],
        x: &mut [T],
        sweeps: usize,
        from_zero: bool,
        forward: bool,
        t: &mut [Vec<T>; 2],
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
                        .for_each(|(i, x)| *x = old[i] + scale[i] * a.row_residual(i, b, old));
                }
            }
            Self::Chebyshev {
                inv_diag,
                lambda_max,
            } => chebyshev(a, inv_diag, *lambda_max, b, x, sweeps, from_zero, t),
            Self::GaussSeidel { diag, colouring } => {
                if from_zero {
                    x.fill(T::ZERO);
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
                                *v = x[r] + a.row_residual(r, b, x) / diag[r];
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
/// x += d_k. One matrix product per degree (none for r₀ from x = 0). The
/// coefficients are computed in f64 and rounded to T.
#[allow(clippy::too_many_arguments)]
fn chebyshev<T: CycleReal>(
    a: LevelMatrix<'_, T>,
    inv_diag: &[T],
    lambda_max: f64,
    b: &[T],
    x: &mut [T],
    degree: usize,
    from_zero: bool,
    t: &mut [Vec<T>; 2],
) {
    let lambda_min = lambda_max / CHEBYSHEV_RATIO;
    let theta = 0.5 * (lambda_max + lambda_min);
    let delta = 0.5 * (lambda_max - lambda_min);
    let sigma = theta / delta;
    let [r, d] = t;
    if from_zero {
        r.copy_from_slice(b);
        x.fill(T::ZERO);
    } else {
        a.residual(b, x, r);
    }
    let mut rho = 1.0 / sigma;
    let theta_t = T::from_f64(theta);
    d.par_iter_mut()
        .zip(x.par_iter_mut())
        .enumerate()
        .with_min_len(MIN_LEN)
        .for_each(|(i, (d, x))| {
            *d = inv_diag[i] * r[i] / theta_t;
            *x = *x + *d;
        });
    for _ in 1..degree {
        // r ← r − A d keeps r = b − A x.
        r.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, r)| *r = *r - a.row_product(i, d));
        let rho_next = 1.0 / (2.0 * sigma - rho);
        let (keep, push) = (
            T::from_f64(rho_next * rho),
            T::from_f64(2.0 * rho_next / delta),
        );
        d.par_iter_mut()
            .zip(x.par_iter_mut())
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, (d, x))| {
                *d = keep * *d + push * inv_diag[i] * r[i];
                *x = *x + *d;
            });
        rho = rho_next;
    }
}

/// Scratch vectors of one level l < L (the coarse ones of size n_{l+1}).
struct Work<T> {
    /// Residual and smoother scratch, size n_l.
    r: Vec<T>,
    t: [Vec<T>; 2],
    /// Coarse right-hand side and correction.
    b_coarse: Vec<T>,
    x_coarse: Vec<T>,
    /// W- and K-cycle vectors on level l + 1 (empty for V).
    krylov: [Vec<T>; 5],
}

/// The cycle in the arithmetic T: the level values (f32 copies; none for
/// f64, which reads the hierarchy's), the smoothers, the scratch vectors
/// (one application at a time) and, for f32, the fine level's b and x.
struct Cycle<T> {
    values: Vec<Vec<T>>,
    smoothers: Vec<LevelSmoother<T>>,
    work: Mutex<Scratch<T>>,
}

/// The per-level scratch vectors and the fine level's b and x in T (empty
/// for f64, which runs on r and z).
type Scratch<T> = (Vec<Work<T>>, [Vec<T>; 2]);

/// The AMG preconditioner of a fine matrix: the hierarchy and its cycle in
/// the precision of the settings.
pub struct Amg<'a> {
    fine: &'a Csr,
    hierarchy: Hierarchy,
    cycle: Arithmetic,
}

enum Arithmetic {
    Double(Cycle<f64>),
    Mixed(Cycle<f32>),
}

impl<T: CycleReal> Cycle<T> {
    fn new(a: &Csr, hierarchy: &Hierarchy) -> Result<Self, SolveError> {
        let settings = hierarchy.settings;
        let n_transfers = hierarchy.levels.len();
        let values = match T::borrow(a.values()) {
            Some(_) => Vec::new(),
            None => (0..=n_transfers)
                .map(|l| rounded(hierarchy.matrix(a, l).values().iter().copied()))
                .collect(),
        };
        let smoothers = (0..n_transfers)
            .map(|l| LevelSmoother::new(hierarchy.matrix(a, l), l, &settings))
            .collect::<Result<_, _>>()?;
        let size = |l: usize| hierarchy.matrix(a, l).n_rows();
        let zero = |n: usize| vec![T::ZERO; n];
        let work = (0..n_transfers)
            .map(|l| {
                let (n, nc) = (size(l), size(l + 1));
                let krylov_size = if settings.cycle == CycleKind::V {
                    0
                } else {
                    nc
                };
                Work {
                    r: zero(n),
                    t: [zero(n), zero(n)],
                    b_coarse: zero(nc),
                    x_coarse: zero(nc),
                    krylov: std::array::from_fn(|_| zero(krylov_size)),
                }
            })
            .collect();
        let fine = if values.is_empty() { 0 } else { a.n_rows() };
        Ok(Self {
            values,
            smoothers,
            work: Mutex::new((work, [zero(fine), zero(fine)])),
        })
    }
}

/// One cycle's context: the fine matrix, the hierarchy and the cycle in T.
struct Run<'r, T> {
    fine: &'r Csr,
    h: &'r Hierarchy,
    c: &'r Cycle<T>,
}

impl<'a> Amg<'a> {
    /// Sets the hierarchy of `a` up ([`Hierarchy::setup`]).
    pub fn new(a: &'a Csr, settings: &AmgSettings) -> Result<Self, SolveError> {
        Self::with_hierarchy(a, Hierarchy::setup(a, settings)?)
    }

    /// The cycle over a hierarchy of `a` (set up, or updated, for `a`), in
    /// the hierarchy's settings' precision.
    pub fn with_hierarchy(a: &'a Csr, hierarchy: Hierarchy) -> Result<Self, SolveError> {
        assert_eq!(a.n_rows(), hierarchy.n, "Amg: hierarchy size");
        let cycle = match hierarchy.settings.precision {
            Precision::Double => Arithmetic::Double(Cycle::new(a, &hierarchy)?),
            Precision::Mixed => Arithmetic::Mixed(Cycle::new(a, &hierarchy)?),
        };
        Ok(Self {
            fine: a,
            hierarchy,
            cycle,
        })
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }
}

impl<T: CycleReal> Run<'_, T> {
    /// Level l's matrix with its values in T.
    fn matrix(&self, l: usize) -> LevelMatrix<'_, T> {
        let a = self.h.matrix(self.fine, l);
        let values = T::borrow(a.values()).unwrap_or_else(|| &self.c.values[l]);
        LevelMatrix { a, values }
    }

    /// The coarsest level's solve in f64 (`CoarsestSolver`), b widened and
    /// x rounded to T.
    fn coarsest(&self, b: &[T], x: &mut [T]) {
        let b64: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
        let mut x64 = vec![0.0; x.len()];
        self.h.coarsest.solve(&b64, &mut x64);
        for (x, v) in x.iter_mut().zip(x64) {
            *x = T::from_f64(v);
        }
    }

    /// One cycle on level l: x ≈ A_l⁻¹ b from x = 0.
    fn cycle(&self, l: usize, b: &[T], x: &mut [T], work: &mut [Work<T>]) {
        let h = self.h;
        if l == h.levels.len() {
            self.coarsest(b, x);
            return;
        }
        let s = &h.settings;
        let a = self.matrix(l);
        let level = &h.levels[l];
        let (w, rest) = work.split_first_mut().expect("a work entry per level");
        let smoother = &self.c.smoothers[l];
        smoother.smooth(a, b, x, s.sweeps, true, true, &mut w.t);
        a.residual(b, x, &mut w.r);
        let members = &level.members;
        w.b_coarse
            .par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(c, bc)| {
                *bc = members
                    .of(c)
                    .iter()
                    .fold(T::ZERO, |s, &i| s + w.r[i as usize])
            });
        self.coarse_solve(l + 1, &w.b_coarse, &mut w.x_coarse, &mut w.krylov, rest);
        let theta = T::from_f64(match s.cycle {
            CycleKind::K => 1.0,
            CycleKind::V | CycleKind::W => s.over_correction,
        });
        let xc = &w.x_coarse;
        x.par_iter_mut()
            .zip(level.aggregate.par_iter())
            .with_min_len(MIN_LEN)
            .for_each(|(x, &c)| *x = *x + theta * xc[c as usize]);
        smoother.smooth(a, b, x, s.sweeps, false, false, &mut w.t);
    }

    /// x ≈ A_l⁻¹ b on coarse level l (l ≥ 1) as the cycle kind asks.
    fn coarse_solve(
        &self,
        l: usize,
        b: &[T],
        x: &mut [T],
        krylov: &mut [Vec<T>; 5],
        rest: &mut [Work<T>],
    ) {
        let h = self.h;
        if l == h.levels.len() {
            self.coarsest(b, x);
            return;
        }
        let a = self.matrix(l);
        match h.settings.cycle {
            CycleKind::V => self.cycle(l, b, x, rest),
            CycleKind::W => {
                let [r, e, ..] = krylov;
                self.cycle(l, b, x, rest);
                a.residual(b, x, r);
                self.cycle(l, r, e, rest);
                x.par_iter_mut()
                    .zip(e.par_iter())
                    .with_min_len(MIN_LEN)
                    .for_each(|(x, &e)| *x = *x + e);
            }
            CycleKind::K => self.k_step(l, a, b, x, krylov, rest),
        }
    }

    /// Two flexible-CG steps on A_l x = b from 0 with the cycle B as
    /// preconditioner: c = B b, v = A c, ρ₁ = c·v, α₁ = c·b; r = b − (α₁/ρ₁) v,
    /// d = B r, w = A d, γ = d·v, β = d·w, α₂ = d·r, ρ₂ = β − γ²/ρ₁;
    /// x = (α₁/ρ₁ − γα₂/(ρ₁ρ₂)) c + (α₂/ρ₂) d (Notay & Vassilevski 2008,
    /// Algorithm 3.2 without its residual test, so the work is fixed). The
    /// dot products and step lengths are f64, rounded to T where they scale
    /// a vector.
    fn k_step(
        &self,
        l: usize,
        a: LevelMatrix<'_, T>,
        b: &[T],
        x: &mut [T],
        krylov: &mut [Vec<T>; 5],
        rest: &mut [Work<T>],
    ) {
        let [c, v, r, d, w] = krylov;
        self.cycle(l, b, c, rest);
        a.spmv(c, v);
        let (rho1, alpha1) = (dot(c, v), dot(c, b));
        // c·Ac = 0 (b = 0) or not a number: nothing to correct.
        if rho1.is_nan() || rho1 <= 0.0 {
            x.fill(T::ZERO);
            return;
        }
        let step1 = alpha1 / rho1;
        let step1_t = T::from_f64(step1);
        r.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, r)| *r = b[i] - step1_t * v[i]);
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
        let (cc, cd) = (T::from_f64(cc), T::from_f64(cd));
        x.par_iter_mut()
            .enumerate()
            .with_min_len(MIN_LEN)
            .for_each(|(i, x)| *x = cc * c[i] + cd * d[i]);
    }

    /// z = cycle(r) with r rounded to T on entry and z widened on exit
    /// (mixed precision; [`Run::apply_f64`] runs the f64 cycle in place).
    fn apply_rounded(&self, r: &[f64], z: &mut [f64]) {
        let mut guard = self.c.work.lock().expect("AMG work vectors");
        let (work, [b, x]) = &mut *guard;
        b.par_iter_mut()
            .zip(r.par_iter())
            .with_min_len(MIN_LEN)
            .for_each(|(b, &r)| *b = T::from_f64(r));
        self.cycle(0, b, x, work);
        z.par_iter_mut()
            .zip(x.par_iter())
            .with_min_len(MIN_LEN)
            .for_each(|(z, x)| *z = x.to_f64());
    }
}

impl Run<'_, f64> {
    fn apply_f64(&self, r: &[f64], z: &mut [f64]) {
        let mut guard = self.c.work.lock().expect("AMG work vectors");
        self.cycle(0, r, z, &mut guard.0);
    }
}

impl LinearOperator for Amg<'_> {
    fn n(&self) -> usize {
        self.hierarchy.n
    }
    /// A K-cycle's inner Krylov steps make it nonlinear (`AmgSettings::is_linear`).
    fn is_linear(&self) -> bool {
        self.hierarchy.settings.is_linear()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let (fine, h) = (self.fine, &self.hierarchy);
        if h.levels.is_empty() {
            // One level: the coarsest solve alone, in f64 in either precision.
            h.coarsest.solve(r, z);
            return;
        }
        match &self.cycle {
            Arithmetic::Double(c) => Run { fine, h, c }.apply_f64(r, z),
            Arithmetic::Mixed(c) => Run { fine, h, c }.apply_rounded(r, z),
        }
    }
}

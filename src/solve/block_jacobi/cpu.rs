//! Block Jacobi on the CPU: the blocks' factors and the inner solves
//! (see the module docs of `solve::block_jacobi`).

use rayon::prelude::*;

use super::{BlockJacobiSettings, InnerSolver, WARP};
use crate::solve::ic::{Dic, Ic0};
use crate::solve::scalar::Real;
use crate::solve::triangles::Triangles;
use crate::solve::{LinearOperator, Smoother, SolveError};
use crate::sparse::blocks::block_diagonal;
use crate::sparse::Csr;

/// The block-Jacobi smoother on `a` in its given row order.
pub struct BlockJacobi<'a> {
    t: Triangles<'a>,
    settings: BlockJacobiSettings,
    /// Damping of the inner Jacobi steps.
    omega: f64,
    /// Block-IC: the factorisation of the block diagonal.
    factor: Option<BlockIc>,
}

/// DIC or IC(0) of the block-diagonal part of a matrix: block-IC's M.
pub enum BlockIc {
    Dic(Dic<'static>),
    Ic0(Ic0<'static>),
}

impl BlockIc {
    /// Factorises the blocks of `block_size` rows of `a` (square, symmetric)
    /// with `inner` (DIC or IC(0)). A breakdown names the row of `a`.
    pub fn new(a: &Csr, inner: InnerSolver, block_size: usize) -> Result<Self, SolveError> {
        let blocks = block_diagonal(a, block_size);
        match inner {
            InnerSolver::Dic => Ok(Self::Dic(Dic::owned(blocks, "block-DIC")?)),
            InnerSolver::Ic0 => Ok(Self::Ic0(Ic0::owned(blocks, "block-IC")?)),
            other => Err(SolveError::InvalidControls(format!(
                "block-IC factorises with DIC or IC0, not {}",
                other.name()
            ))),
        }
    }

    /// The factor as the GPU downloads it: DIC 1/d* per row; IC(0) L's
    /// strictly lower values in the block diagonal's slots, then its diagonal.
    pub fn factor(&self) -> Vec<f64> {
        match self {
            Self::Dic(d) => d.reciprocal_diagonal().to_vec(),
            Self::Ic0(l) => l.factor(),
        }
    }
}

impl LinearOperator for BlockIc {
    fn n(&self) -> usize {
        match self {
            Self::Dic(d) => d.n(),
            Self::Ic0(l) => l.n(),
        }
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        match self {
            Self::Dic(d) => d.apply(r, z),
            Self::Ic0(l) => l.apply(r, z),
        }
    }
}

/// One block's local system in precision T: right-hand side (the block
/// residual), diagonal, and the in-block off-diagonals of each local row
/// (local column, value) in column order. Padded to the full block size.
struct Local<T> {
    b: Vec<T>,
    d: Vec<T>,
    neighbours: Vec<Vec<(usize, T)>>,
}

impl<T: Real> Local<T> {
    /// Σ a_tj v_j over the in-block off-diagonals of row t, subtracted from
    /// `start` in column order.
    fn minus_off(&self, t: usize, start: T, v: &[T]) -> T {
        self.neighbours[t]
            .iter()
            .fold(start, |acc, &(j, a)| acc - a * v[j])
    }

    /// r = b − A_ll v: b_t − d_t v_t first, then the off-diagonals.
    fn residual(&self, v: &[T]) -> Vec<T> {
        (0..self.b.len())
            .map(|t| self.minus_off(t, self.b[t] - self.d[t] * v[t], v))
            .collect()
    }
}

/// Σ v², each square in T, summed in f64 (as the GPU's block reductions).
fn sum_squares<T: Real>(v: &[T]) -> f64 {
    v.iter().map(|&v| (v * v).to_f64()).sum()
}

impl<'a> BlockJacobi<'a> {
    /// `omega` damps the inner Jacobi steps (Wikberg's (2024) are undamped, ω = 1).
    pub fn new(a: &'a Csr, settings: BlockJacobiSettings, omega: f64) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "block-Jacobi smoother")?;
        let factor = match settings.inner.is_factorisation() {
            true => Some(BlockIc::new(a, settings.inner, settings.block_size)?),
            false => None,
        };
        Ok(Self {
            t,
            settings,
            omega,
            factor,
        })
    }

    /// Block-IC's factorisation (inner DIC or IC0).
    pub fn block_ic(&self) -> Option<&BlockIc> {
        self.factor.as_ref()
    }

    /// (b − A x)_r in the kernel's order: b_r − a_rr x_r, then the
    /// off-diagonals by column.
    fn residual(&self, r: usize, b: &[f64], x: &[f64]) -> f64 {
        let t = &self.t;
        t.off_diagonal(r).fold(b[r] - t.diag(r) * x[r], |res, s| {
            res - t.value(s) * x[t.col(s)]
        })
    }

    fn n_blocks(&self) -> usize {
        self.t.n().div_ceil(self.settings.block_size)
    }

    /// New x of block l's rows, reading x (the rows of other blocks and, at
    /// the block's start, its own), in precision T (the matrix and b
    /// rounded to T).
    fn block_update<T: Real>(&self, l: usize, b: &[f64], x: &[T]) -> Vec<T> {
        let t = &self.t;
        let h = self.settings.block_size;
        let first = l * h;
        let rows = first..(first + h).min(t.n());
        let mut local = Local {
            b: vec![T::ZERO; h],
            d: vec![T::ONE; h],
            neighbours: vec![Vec::new(); h],
        };
        for r in rows.clone() {
            let k = r - first;
            local.d[k] = T::from_f64(t.diag(r));
            let mut res = T::from_f64(b[r]) - local.d[k] * x[r];
            for s in t.off_diagonal(r) {
                let (c, v) = (t.col(s), T::from_f64(t.value(s)));
                res = res - v * x[c];
                if rows.contains(&c) {
                    local.neighbours[k].push((c - first, v));
                }
            }
            local.b[k] = res;
        }
        let r0 = sum_squares(&local.b);
        let y = if r0 > 0.0 {
            self.inner_solve(&local, r0)
        } else {
            vec![T::ZERO; h]
        };
        rows.map(|r| x[r] + y[r - first]).collect()
    }

    /// `sweeps` synchronous sweeps from x = 0 in precision T (f32: the
    /// mixed-precision preconditioner, `smooth_block_f32`). Block-IC and
    /// asynchronous sweeps are refused.
    pub fn sweeps_from_zero<T: Real>(
        &self,
        b: &[f64],
        sweeps: usize,
    ) -> Result<Vec<T>, SolveError> {
        if self.factor.is_some() || self.settings.asynchronous {
            return Err(SolveError::InvalidControls(
                "sweeps_from_zero runs synchronous block Jacobi with an iterative inner solver"
                    .into(),
            ));
        }
        let mut x = vec![T::ZERO; self.t.n()];
        for _ in 0..sweeps.max(1) {
            self.synchronous_sweep(b, &mut x);
        }
        Ok(x)
    }

    /// One synchronous sweep: every block reads the x of the sweep's start.
    fn synchronous_sweep<T: Real>(&self, b: &[f64], x: &mut [T]) {
        let old = x.to_vec();
        x.par_chunks_mut(self.settings.block_size)
            .enumerate()
            .for_each(|(l, xl)| xl.copy_from_slice(&self.block_update(l, b, &old)));
    }

    fn inner_solve<T: Real>(&self, local: &Local<T>, r0: f64) -> Vec<T> {
        let s = &self.settings;
        // Stop at ‖r‖² ≤ tol² ‖r⁰‖²; tolerance 0: no test (a fixed step count).
        let stop = s.inner_tolerance * s.inner_tolerance * r0;
        let converged = |rr: f64| stop > 0.0 && rr <= stop;
        let h = local.b.len();
        match s.inner {
            InnerSolver::Jacobi => {
                let omega = T::from_f64(self.omega);
                let mut y: Vec<T> = (0..h).map(|t| omega * local.b[t] / local.d[t]).collect();
                for _ in 1..s.inner_max_iter {
                    let res = local.residual(&y);
                    if stop > 0.0 && converged(sum_squares(&res)) {
                        break;
                    }
                    for t in 0..h {
                        y[t] = y[t] + omega * res[t] / local.d[t];
                    }
                }
                y
            }
            InnerSolver::GaussSeidel | InnerSolver::SymGaussSeidel => {
                let warps = h / WARP;
                let mut order: Vec<usize> = (0..warps).collect();
                if s.inner == InnerSolver::SymGaussSeidel {
                    order.extend((0..warps).rev());
                }
                let mut y = vec![T::ZERO; h];
                for _ in 0..s.inner_max_iter {
                    for &w in &order {
                        // The warp reads y (its own rows' old values), then writes.
                        let new: Vec<T> = (w * WARP..(w + 1) * WARP)
                            .map(|t| local.minus_off(t, local.b[t], &y) / local.d[t])
                            .collect();
                        y[w * WARP..(w + 1) * WARP].copy_from_slice(&new);
                    }
                    if stop > 0.0 && converged(sum_squares(&local.residual(&y))) {
                        break;
                    }
                }
                y
            }
            InnerSolver::Dic | InnerSolver::Ic0 => {
                unreachable!("block-IC applies its factorisation in smooth")
            }
            InnerSolver::Cg => {
                let mut y = vec![T::ZERO; h];
                let (mut r, mut p) = (local.b.clone(), local.b.clone());
                let mut rr = r0;
                for _ in 0..s.inner_max_iter {
                    // A p: d_t p_t first, then the off-diagonals.
                    let ap: Vec<T> = (0..h)
                        .map(|t| {
                            local.neighbours[t]
                                .iter()
                                .fold(local.d[t] * p[t], |acc, &(j, a)| acc + a * p[j])
                        })
                        .collect();
                    let p_ap: f64 = p.iter().zip(&ap).map(|(&p, &q)| (p * q).to_f64()).sum();
                    if p_ap.is_nan() || p_ap <= 0.0 {
                        break;
                    }
                    let alpha = T::from_f64(rr / p_ap);
                    for t in 0..h {
                        y[t] = y[t] + alpha * p[t];
                        r[t] = r[t] - alpha * ap[t];
                    }
                    let rr_new = sum_squares(&r);
                    if rr_new <= stop {
                        break;
                    }
                    let beta = T::from_f64(rr_new / rr);
                    for t in 0..h {
                        p[t] = r[t] + beta * p[t];
                    }
                    rr = rr_new;
                }
                y
            }
        }
    }
}

impl Smoother for BlockJacobi<'_> {
    fn n(&self) -> usize {
        self.t.n()
    }

    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        let h = self.settings.block_size;
        if let Some(factor) = &self.factor {
            // Synchronous only (validated): x += M⁻¹ (b − A x), M block-IC.
            let mut y = vec![0.0; x.len()];
            for _ in 0..sweeps {
                let res: Vec<f64> = (0..x.len())
                    .into_par_iter()
                    .map(|r| self.residual(r, b, x))
                    .collect();
                factor.apply(&res, &mut y);
                x.par_iter_mut().zip(&y).for_each(|(x, y)| *x += y);
            }
            return;
        }
        for _ in 0..sweeps {
            if self.settings.asynchronous {
                for l in 0..self.n_blocks() {
                    let new = self.block_update::<f64>(l, b, x);
                    x[l * h..l * h + new.len()].copy_from_slice(&new);
                }
            } else {
                self.synchronous_sweep(b, x);
            }
        }
    }
}

// The tests read the blocks' private solves.
#[cfg(test)]
#[path = "tests.rs"]
mod tests;

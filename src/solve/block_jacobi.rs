//! Block Jacobi (Wikberg 2024, §4.3): the CPU reference of the GPU kernel
//! `smooth_block` (`kernels/smooth.cu`, Wikberg's `smooth_kern`).
//!
//! Blocks are runs of `block_size` consecutive rows (on the GPU a mod-SELL
//! slice; the last block is padded with rows a_ii = 1, b_i = 0, x_i = 0). One
//! outer sweep, for each block l:
//! - the block residual (4.8) b_l − A_l x, in the kernel's order
//!   (b_i − a_ii x_i, then the off-diagonals by column);
//! - y ≈ A_ll⁻¹ (b − A x)_l by the inner solver from y = 0 (Jacobi damped by ω, warp-
//!   serialised Gauss–Seidel with Jacobi inside a warp, or CG), stopped at the
//!   relative inner tolerance or the step cap; a block with a zero residual is
//!   skipped (y = 0);
//! - x_l ← x_l + y (4.9).
//!
//! Block-IC (inner `DIC` or `IC0`, `blockDIC`/`blockIC`): the blocks are
//! solved by OpenFOAM's DIC or by IC(0) of the block-diagonal part of A
//! (`sparse::blocks::block_diagonal`), factorised once; as `solve::ic`'s
//! `Dic`/`Ic0` on that matrix, so M⁻¹ = (L D Lᵀ)⁻¹ block by block, symmetric.
//! The GPU factorises and sweeps each block inside one thread block
//! (`smooth_block`, `block_ic_factor`) in the same operation order, bit for bit.
//!
//! Synchronous: every block reads the x of the sweep's start (double buffer).
//! Asynchronous: the blocks update x in place; here in block order (block
//! Gauss–Seidel), on the GPU in whatever order the thread blocks run, so the
//! GPU's asynchronous iterates are not reproducible and are compared by their
//! convergence only.
//!
//! The reductions (‖r_l‖², p·Ap, …) are summed left to right here and by a
//! shuffle tree on the GPU: iterates agree to round-off, and a tolerance test
//! sitting on the threshold could go either way.
//!
//! Mixed precision ([`BlockJacobi::sweeps_from_zero`] in f32, the GPU's
//! `smooth_block_f32`): the same sweeps with the matrix rounded to f32, the
//! iterate, the block residual and the inner iterates in f32, b rounded to
//! f32; the reductions are still summed in f64 and the scalars they give
//! (CG's α, β) rounded to f32. In f64 these are exactly the sweeps above.

use rayon::prelude::*;

use super::ic::{Dic, Ic0};
use super::scalar::Real;
use super::triangles::Triangles;
use super::{from_str_by_name, LinearOperator, Smoother, SolveError};
use crate::sparse::blocks::block_diagonal;
use crate::sparse::Csr;

/// The solver of a block's local system in block Jacobi (Wikberg 2024, §4.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InnerSolver {
    /// Jacobi steps from 0 (the first gives D⁻¹ b).
    Jacobi,
    /// Forward Gauss–Seidel, serialised by warps of 32 rows with Jacobi inside
    /// a warp (the semantics of Wikberg's (2024) code).
    GaussSeidel,
    /// The same forward sweep followed by a backward one (warps in reverse):
    /// symmetric, for PCG.
    SymGaussSeidel,
    /// Conjugate gradients from 0.
    Cg,
    /// OpenFOAM's DIC of the block, factorised once (block-IC, `blockDIC`).
    Dic,
    /// IC(0) of the block, factorised once (block-IC, `blockIC`).
    Ic0,
}

impl InnerSolver {
    pub const ALL: [Self; 6] = [
        Self::Jacobi,
        Self::GaussSeidel,
        Self::SymGaussSeidel,
        Self::Cg,
        Self::Dic,
        Self::Ic0,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Self::Jacobi => "Jacobi",
            Self::GaussSeidel => "GaussSeidel",
            Self::SymGaussSeidel => "symGaussSeidel",
            Self::Cg => "CG",
            Self::Dic => "DIC",
            Self::Ic0 => "IC0",
        }
    }

    /// Whether the block is solved by an incomplete factorisation (one
    /// application, no inner steps or tolerance: block-IC).
    pub fn is_factorisation(self) -> bool {
        matches!(self, Self::Dic | Self::Ic0)
    }
}

from_str_by_name!(InnerSolver, "inner solver");

/// Block-Jacobi settings (Wikberg 2024, §4.3, §4.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockJacobiSettings {
    /// Rows per block: the mod-SELL slice height on the GPU (multiple of 32, ≤ 1024).
    pub block_size: usize,
    pub inner: InnerSolver,
    /// Stop the inner solve when ‖r_l‖₂ ≤ tolerance · ‖r_l⁰‖₂ on the block
    /// (relative, where Wikberg (2024) used 1e-15 on the absolute squared norm); 0
    /// runs exactly `inner_max_iter` steps (a fixed linear operator, unless CG).
    pub inner_tolerance: f64,
    /// Inner steps at most (Wikberg's (2024) 100).
    pub inner_max_iter: usize,
    /// Read and write x in place (block-asynchronous; on the host the blocks
    /// run in order, which is block Gauss–Seidel) instead of double-buffered.
    pub asynchronous: bool,
}

impl Default for BlockJacobiSettings {
    /// The smoother tests of Wikberg 2024, §4.4: H = 512, inner CG to tolerance or 100 steps.
    fn default() -> Self {
        Self {
            block_size: 512,
            inner: InnerSolver::Cg,
            inner_tolerance: 1e-8,
            inner_max_iter: 100,
            asynchronous: false,
        }
    }
}

/// Rows of a warp: the unit the inner Gauss–Seidel serialises.
pub const WARP: usize = 32;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;
    use nalgebra::{DMatrix, DVector};

    fn dense_block(a: &Csr, rows: std::ops::Range<usize>) -> DMatrix<f64> {
        let first = rows.start;
        let m = rows.len();
        let mut d = DMatrix::zeros(m, m);
        for r in rows.clone() {
            let (cols, vals) = a.row(r);
            for (&c, &v) in cols.iter().zip(vals) {
                if rows.contains(&(c as usize)) {
                    d[(r - first, c as usize - first)] = v;
                }
            }
        }
        d
    }

    fn settings(inner: InnerSolver, tol: f64, steps: usize) -> BlockJacobiSettings {
        BlockJacobiSettings {
            block_size: 64,
            inner,
            inner_tolerance: tol,
            inner_max_iter: steps,
            asynchronous: false,
        }
    }

    /// x + A_ll⁻¹ (b − A x)_l on every block, with dense block solves.
    fn exact_block_jacobi(a: &Csr, b: &[f64], x: &[f64], h: usize) -> Vec<f64> {
        let n = a.n_rows();
        let mut ax = vec![0.0; n];
        a.spmv(x, &mut ax);
        let mut out = x.to_vec();
        for first in (0..n).step_by(h) {
            let rows = first..(first + h).min(n);
            let res = DVector::from_iterator(rows.len(), rows.clone().map(|r| b[r] - ax[r]));
            let y = dense_block(a, rows.clone()).lu().solve(&res).unwrap();
            for r in rows {
                out[r] += y[r - first];
            }
        }
        out
    }

    #[test]
    fn converged_inner_solves_give_exact_block_jacobi() {
        let n = 300; // the last block is partial
        let a = random_symmetric(n, 6, 3);
        let b: Vec<f64> = (0..n).map(|i| (i % 9) as f64 - 4.0).collect();
        let x: Vec<f64> = (0..n).map(|i| (i % 5) as f64 * 0.3).collect();
        let expected = exact_block_jacobi(&a, &b, &x, 64);
        for inner in InnerSolver::ALL
            .into_iter()
            .filter(|i| !i.is_factorisation())
        {
            let bj = BlockJacobi::new(&a, settings(inner, 1e-13, 500), 1.0).unwrap();
            let mut y = x.clone();
            bj.smooth(&b, &mut y, 1);
            for i in 0..n {
                assert!(
                    (y[i] - expected[i]).abs() < 1e-10 * (1.0 + expected[i].abs()),
                    "{inner:?} row {i}: {} vs {}",
                    y[i],
                    expected[i]
                );
            }
        }
    }

    #[test]
    fn fixed_inner_steps_follow_their_formulas() {
        // One block of 64 rows = two warps: check the step formulas densely.
        let a = random_symmetric(64, 6, 8);
        let m = dense_block(&a, 0..64);
        let d = DMatrix::from_diagonal(&m.diagonal());
        let b: Vec<f64> = (0..64).map(|i| (i % 7) as f64 - 3.0).collect();
        let bv = DVector::from_column_slice(&b);
        let run_damped = |inner, steps, omega| {
            let mut y = vec![0.0; 64];
            BlockJacobi::new(&a, settings(inner, 0.0, steps), omega)
                .unwrap()
                .smooth(&b, &mut y, 1);
            DVector::from_column_slice(&y)
        };
        let run = |inner, steps| run_damped(inner, steps, 1.0);
        // Jacobi damped by 0.7, 3 steps from 0.
        let d_inv = d.clone().try_inverse().unwrap();
        let mut y = DVector::zeros(64);
        for _ in 0..3 {
            y = &y + &d_inv * (&bv - &m * &y) * 0.7;
        }
        assert!((run_damped(InnerSolver::Jacobi, 3, 0.7) - &y).amax() < 1e-12);
        // Warp-serialised GS: M = D + (entries of earlier warps), Jacobi in a warp.
        let lower_warps =
            DMatrix::from_fn(64, 64, |i, j| if j / 32 < i / 32 { m[(i, j)] } else { 0.0 });
        let upper_warps = lower_warps.transpose();
        let fwd = (&d + &lower_warps).lu().solve(&bv).unwrap();
        assert!((run(InnerSolver::GaussSeidel, 1) - &fwd).amax() < 1e-12);
        let sym = (&d + &upper_warps)
            .lu()
            .solve(&(&bv - &(&m - &d - &upper_warps) * &fwd))
            .unwrap();
        assert!((run(InnerSolver::SymGaussSeidel, 1) - &sym).amax() < 1e-12);
    }

    /// Rows `rows` of `a` restricted to those columns, renumbered from 0.
    fn sub_matrix(a: &Csr, rows: std::ops::Range<usize>) -> Csr {
        let first = rows.start;
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for r in rows.clone() {
            let (c, v) = a.row(r);
            for (&c, &v) in c.iter().zip(v) {
                if rows.contains(&(c as usize)) {
                    cols.push(c - first as u32);
                    vals.push(v);
                }
            }
            row_ptr.push(cols.len());
        }
        Csr::new(rows.len(), row_ptr, cols, vals).unwrap()
    }

    #[test]
    fn block_ic_is_the_incomplete_cholesky_of_each_block() {
        use crate::solve::precond::{Dic, Ic0};
        let n = 300; // the last block is partial
        let a = random_symmetric(n, 6, 11);
        let r: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 2.5).collect();
        for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
            let bj = BlockJacobi::new(&a, settings(inner, 1e-8, 100), 1.0).unwrap();
            let mut z = vec![0.0; n];
            bj.smooth(&r, &mut z, 1);
            let factor = bj.block_ic().unwrap().factor();
            for first in (0..n).step_by(64) {
                let rows = first..(first + 64).min(n);
                let block = sub_matrix(&a, rows.clone());
                let (op, f): (Box<dyn LinearOperator>, Vec<f64>) = match inner {
                    InnerSolver::Dic => {
                        let d = Dic::new(&block).unwrap();
                        let f = d.reciprocal_diagonal().to_vec();
                        (Box::new(Dic::owned(block.clone(), "DIC").unwrap()), f)
                    }
                    _ => (
                        Box::new(Ic0::owned(block.clone(), "IC(0)").unwrap()),
                        vec![],
                    ),
                };
                let mut zb = vec![0.0; rows.len()];
                op.apply(&r[rows.clone()], &mut zb);
                // The same operations in the same order: equal bits.
                assert_eq!(&z[rows.clone()], &zb[..], "{inner:?} block at {first}");
                if inner == InnerSolver::Dic {
                    assert_eq!(&factor[rows.clone()], &f[..]);
                }
            }
            // Symmetric: r1 · M⁻¹ r2 = r2 · M⁻¹ r1.
            let r2: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
            let mut z2 = vec![0.0; n];
            bj.smooth(&r2, &mut z2, 1);
            let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
            let (d12, d21) = (dot(&r, &z2), dot(&r2, &z));
            assert!(
                (d12 - d21).abs() < 1e-12 * d12.abs().max(1.0),
                "{d12} vs {d21}"
            );
        }
    }

    #[test]
    fn f32_sweeps_from_zero_follow_the_f64_ones_to_single_precision() {
        let n = 300; // the last block is partial
        let a = random_symmetric(n, 6, 5);
        let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 17) as f64 - 8.0).collect();
        for inner in [
            InnerSolver::Jacobi,
            InnerSolver::SymGaussSeidel,
            InnerSolver::Cg,
        ] {
            let bj = BlockJacobi::new(&a, settings(inner, 0.0, 4), 0.8).unwrap();
            // In f64 the same sweeps as the smoother's, bit for bit.
            let x64 = bj.sweeps_from_zero::<f64>(&b, 2).unwrap();
            let mut x = vec![0.0; n];
            bj.smooth(&b, &mut x, 2);
            assert_eq!(x64, x, "{inner:?}");
            let x32 = bj.sweeps_from_zero::<f32>(&b, 2).unwrap();
            let scale = x64.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = x32
                .iter()
                .zip(&x64)
                .fold(0.0f64, |m, (&s, &d)| m.max((s as f64 - d).abs()));
            println!("{inner:?}: max |f32 - f64| / max |x| = {:.2e}", err / scale);
            assert!(err <= 1e-5 * scale, "{inner:?}: {err} vs scale {scale}");
            // Not computed in f64 after all.
            assert!(err > 0.0, "{inner:?}: f32 sweeps equal the f64 ones");
        }
        let bic = BlockJacobi::new(&a, settings(InnerSolver::Dic, 0.0, 1), 1.0).unwrap();
        assert!(bic.sweeps_from_zero::<f32>(&b, 1).is_err());
    }

    #[test]
    fn asynchronous_sweeps_are_block_gauss_seidel() {
        let n = 256;
        let a = random_symmetric(n, 6, 4);
        let b: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
        let mut s = settings(InnerSolver::Cg, 1e-14, 200);
        s.asynchronous = true;
        let mut x = vec![0.0; n];
        BlockJacobi::new(&a, s, 1.0).unwrap().smooth(&b, &mut x, 1);
        // Block GS with exact block solves, block by block.
        let mut expected = vec![0.0; n];
        for first in (0..n).step_by(64) {
            expected = {
                let mut ax = vec![0.0; n];
                a.spmv(&expected, &mut ax);
                let rows = first..first + 64;
                let res = DVector::from_iterator(64, rows.clone().map(|r| b[r] - ax[r]));
                let y = dense_block(&a, rows.clone()).lu().solve(&res).unwrap();
                let mut e = expected.clone();
                for r in rows {
                    e[r] += y[r - first];
                }
                e
            };
        }
        for i in 0..n {
            assert!((x[i] - expected[i]).abs() < 1e-10, "row {i}");
        }
    }
}

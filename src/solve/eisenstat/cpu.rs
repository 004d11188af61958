//! Eisenstat SGS on the CPU (see the module docs): the symmetrically scaled
//! split, sequential sweeps in row order and the vector steps in `reduce`'s
//! fixed chunks; the reference of the GPU backend.

use rayon::prelude::*;

use super::{broke_down, eisenstat_cg, EisenstatBackend, EisenstatVectors, ResidualCheck};
use crate::solve::checks::{check_system, on_copies};
use crate::solve::cpu::CpuBackend;
use crate::solve::reduce::{self, sum_pairs, CHUNK};
use crate::solve::triangles::Triangles;
use crate::solve::{
    Executor, InitialNorms, OnExecutor, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::Csr;

/// The symmetrically scaled triangles of A: L and Lᵀ of Â = I + L + Lᵀ as
/// separate matrices (unit diagonal not stored), and D^∓1/2.
#[derive(Clone, Debug)]
pub struct ScaledTriangles {
    /// Strictly lower part of Â, columns ascending per row.
    pub lower: Csr,
    /// Strictly upper part of Â, columns ascending per row.
    pub upper: Csr,
    /// 1 / √a_ii.
    pub inv_sqrt_diag: Vec<f64>,
    /// √a_ii.
    pub sqrt_diag: Vec<f64>,
}

impl ScaledTriangles {
    /// Splits `a` (square, symmetric, positive diagonal: an error names the
    /// first row whose diagonal is missing or not positive).
    pub fn new(a: &Csr) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "Eisenstat SGS")?;
        let n = t.n();
        let sqrt_diag: Vec<f64> = (0..n).map(|r| t.diag(r).sqrt()).collect();
        let inv_sqrt_diag: Vec<f64> = sqrt_diag.iter().map(|d| 1.0 / d).collect();
        let part = |slots: &dyn Fn(usize) -> std::ops::Range<usize>| {
            let mut row_ptr = vec![0usize];
            let (mut cols, mut vals) = (Vec::new(), Vec::new());
            for r in 0..n {
                for s in slots(r) {
                    let c = t.col(s);
                    cols.push(c as u32);
                    vals.push(t.value(s) * inv_sqrt_diag[r] * inv_sqrt_diag[c]);
                }
                row_ptr.push(cols.len());
            }
            Csr::new(n, row_ptr, cols, vals).expect("a part of a valid matrix")
        };
        Ok(Self {
            lower: part(&|r| t.lower(r)),
            upper: part(&|r| t.upper(r)),
            inv_sqrt_diag,
            sqrt_diag,
        })
    }

    pub fn n(&self) -> usize {
        self.sqrt_diag.len()
    }

    /// Row i of the backward sweep: t_i = p_i − Σ_j U_ij t_j (columns ascending).
    pub fn backward_row(&self, i: usize, p_i: f64, t: &[f64]) -> f64 {
        p_i - row_dot(&self.upper, i, t)
    }

    /// Row i of the forward sweep: (s_i, g_i) with s_i = (p_i − t_i) − Σ_j L_ij s_j
    /// and, `with_g`, g_i = p_i + Σ_j L_ij t_j (columns ascending; else g_i = 0).
    pub fn forward_row(
        &self,
        i: usize,
        p_i: f64,
        t: &[f64],
        s: &[f64],
        with_g: bool,
    ) -> (f64, f64) {
        let (cols, vals) = self.lower.row(i);
        let (mut acc_s, mut acc_t) = (0.0, 0.0);
        for (&c, &v) in cols.iter().zip(vals) {
            acc_s += v * s[c as usize];
            if with_g {
                acc_t += v * t[c as usize];
            }
        }
        let g_i = if with_g { p_i + acc_t } else { 0.0 };
        ((p_i - t[i]) - acc_s, g_i)
    }

    /// Row i of r = D^1/2 C ρ: r_i = √a_ii (ρ_i + Σ_j L_ij ρ_j).
    pub fn residual_row(&self, i: usize, rho: &[f64]) -> f64 {
        self.sqrt_diag[i] * (rho[i] + row_dot(&self.lower, i, rho))
    }

    /// Row i of ρ = C⁻¹ D^-1/2 r: ρ_i = r_i / √a_ii − Σ_j L_ij ρ_j.
    pub fn initial_row(&self, i: usize, r_i: f64, rho: &[f64]) -> f64 {
        self.inv_sqrt_diag[i] * r_i - row_dot(&self.lower, i, rho)
    }
}

/// Σ_j T_ij x_j over row i of the triangle `t`, columns ascending from +0.0
/// (the order, and so the bits, of `eis_row_dot` in kernels/eisenstat.cu).
fn row_dot(t: &Csr, i: usize, x: &[f64]) -> f64 {
    let (cols, vals) = t.row(i);
    let mut acc = 0.0;
    for (&c, &v) in cols.iter().zip(vals) {
        acc += v * x[c as usize];
    }
    acc
}

/// The CPU reference: sequential sweeps in row order; the vector steps in
/// `reduce`'s fixed chunks. Its vectors, initial residual and reductions are
/// those of `CpuBackend` on A (in its row order).
pub struct CpuEisenstat<'a> {
    cpu: CpuBackend<'a>,
    split: ScaledTriangles,
    /// [`EisenstatBackend::max_chunk`] (1; more to test the chunked loop).
    max_chunk: usize,
}

impl<'a> CpuEisenstat<'a> {
    /// Eisenstat SGS on `a` in its row order (square, positive diagonal).
    pub fn new(a: &'a Csr) -> Result<Self, SolveError> {
        let split = ScaledTriangles::new(a)?;
        Ok(Self {
            cpu: CpuBackend::unpreconditioned(a),
            split,
            max_chunk: 1,
        })
    }

    /// Runs up to `max_chunk` iterations between read-backs with predicted
    /// checks, as the GPU may (the loop's chunking, tested on the CPU).
    pub fn with_max_chunk(mut self, max_chunk: usize) -> Self {
        self.max_chunk = max_chunk.max(1);
        self
    }

    pub fn split(&self) -> &ScaledTriangles {
        &self.split
    }
}

/// `CpuBackend`'s executor on A.
impl<'a> OnExecutor for CpuEisenstat<'a> {
    type Inner = CpuBackend<'a>;
    fn executor(&self) -> &CpuBackend<'a> {
        &self.cpu
    }
}

impl EisenstatBackend for CpuEisenstat<'_> {
    fn initialize_rho(
        &self,
        b: &Vec<f64>,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> Result<(InitialNorms, f64), SolveError> {
        let norms = self.initialize(b, v.x, v.r);
        for i in 0..self.split.n() {
            v.rho[i] = self.split.initial_row(i, v.r[i], v.rho);
        }
        Ok((norms, self.dot(v.rho, v.rho)))
    }

    fn iteration(
        &self,
        beta: f64,
        r_z: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> Result<(f64, f64, f64), SolveError> {
        let p_q = self.sweeps(beta, carried, v);
        if broke_down(p_q) {
            return Ok((p_q, f64::NAN, f64::NAN));
        }
        let (residual, rho_rho) = self.update(r_z / p_q, carried, v);
        Ok((p_q, residual, rho_rho))
    }

    fn max_chunk(&self) -> usize {
        self.max_chunk
    }

    fn residual_of_rho(&self, v: &mut EisenstatVectors<'_, Vec<f64>>) -> Result<f64, SolveError> {
        let sp = &self.split;
        let rho = &*v.rho;
        v.r.par_iter_mut().enumerate().for_each(|(i, r)| {
            *r = sp.residual_row(i, rho);
        });
        Ok(reduce::sum_abs(v.r))
    }
}

impl CpuEisenstat<'_> {
    /// The sweeps of [`EisenstatBackend::iteration`]; returns p · (t + s).
    pub(super) fn sweeps(
        &self,
        beta: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> f64 {
        let sp = &self.split;
        let n = sp.n();
        for i in (0..n).rev() {
            let p_i = if beta == 0.0 {
                v.rho[i]
            } else {
                v.rho[i] + beta * v.p[i]
            };
            v.p[i] = p_i;
            v.t[i] = sp.backward_row(i, p_i, v.t);
        }
        for i in 0..n {
            let (s_i, g_i) = sp.forward_row(i, v.p[i], v.t, v.s, carried);
            v.s[i] = s_i;
            v.g[i] = g_i;
        }
        let (p, t, s) = (&*v.p, &*v.t, &*v.s);
        reduce::sum_by(n, |i| p[i] * (t[i] + s[i]))
    }

    /// The update of [`EisenstatBackend::iteration`]; returns Σ|r| and ρ · ρ.
    fn update(
        &self,
        alpha: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> (f64, f64) {
        let sp = &self.split;
        let (t, s, g) = (&*v.t, &*v.s, &*v.g);
        let sums: Vec<(f64, f64)> =
            v.x.par_chunks_mut(CHUNK)
                .zip(v.r.par_chunks_mut(CHUNK))
                .zip(v.rho.par_chunks_mut(CHUNK))
                .enumerate()
                .map(|(c, ((x, r), rho))| {
                    let (mut residual, mut rho_rho) = (0.0, 0.0);
                    for k in 0..x.len() {
                        let i = c * CHUNK + k;
                        x[k] += alpha * (sp.inv_sqrt_diag[i] * t[i]);
                        rho[k] -= alpha * (t[i] + s[i]);
                        if carried {
                            r[k] -= alpha * (sp.sqrt_diag[i] * g[i]);
                            residual += r[k].abs();
                        }
                        rho_rho += rho[k] * rho[k];
                    }
                    (residual, rho_rho)
                })
                .collect();
        sum_pairs(&sums)
    }
}

/// Solves A x = b on the CPU with SGS-PCG by Eisenstat's trick in row order,
/// from the x given, after PCG's input checks (square, symmetric, sizes,
/// finite values), the residual carried every iteration: PCG's semantics,
/// history included (the reference; the GPU defaults to
/// [`super::DEFAULT_RESIDUAL_CHECK`]).
pub fn solve_eisenstat(
    a: &Csr,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    solve_eisenstat_with(a, b, x, controls, ResidualCheck::EveryIteration, field)
}

/// [`solve_eisenstat`] with the residual checked as `check` says.
pub fn solve_eisenstat_with(
    a: &Csr,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    check: ResidualCheck,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    check_system(a, b, x, controls)?;
    let backend = CpuEisenstat::new(a)?;
    on_copies(b, x, |b, x| {
        eisenstat_cg(&backend, b, x, controls, check, field)
    })
}

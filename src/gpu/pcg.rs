//! Jacobi-PCG with the vectors and the scalars on the device
//! (`kernels/pcg.cu`): per iteration one direction update, one mod-SELL SpMV
//! fused with p · Ap, one update of x, r, z = D⁻¹ r with Σ|r| and r · z, and
//! two one-block kernels that reduce the partials in a fixed order and apply
//! `StopRule`. The host reads the records back once every `check_interval`
//! iterations.

use std::cell::RefCell;
use std::collections::HashMap;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::matrix::DeviceModSell;
use super::{vector_grid, Gpu, GpuError, NULL, VECTOR_BLOCK};
use crate::solve::cpu::check_system;
use crate::solve::{
    pcg, CgBackend, CgVectors, InitialNorms, IterationRecord, LoopState, PreconditionerKind,
    SolveError, SolverControls, SolverPerformance, StopRule,
};
use crate::sparse::{Csr, ModSell, Permutation, Reordered, RowOrdering};

/// Threads of the one-block reduction kernels.
const REDUCE_BLOCK: u32 = 1024;
/// Length of the device state `st` (kernels/pcg.cu ST_*).
const STATE_LEN: usize = 7;

/// Options of a GPU solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSolveOptions {
    /// mod-SELL slice height (multiple of 32, at most 1024).
    pub slice_height: usize,
    /// Iterations run on the device between residual read-backs.
    pub check_interval: usize,
    /// Row ordering of the mod-SELL matrix (b and x are permuted in and the
    /// solution back out).
    pub ordering: RowOrdering,
}

impl Default for GpuSolveOptions {
    fn default() -> Self {
        Self {
            slice_height: 512,
            check_interval: 50,
            ordering: RowOrdering::default(),
        }
    }
}

/// A vector in device memory (`None` only after a failed allocation, which
/// the backend reports through `device_status`).
pub struct GpuVector(Option<CudaSlice<f64>>);

impl GpuVector {
    fn dev(&self) -> Result<&CudaSlice<f64>, GpuError> {
        self.0.as_ref().ok_or_else(|| {
            GpuError::Invalid("a device vector could not be allocated earlier".into())
        })
    }
}

struct Scratch {
    /// Per-block partials of the vector kernels (two sums each).
    vector_partials: CudaSlice<f64>,
    /// Per-slice partials of the SpMV (p · Ap; two sums in the initial residual).
    slice_partials: CudaSlice<f64>,
    state: CudaSlice<f64>,
    records: CudaSlice<f64>,
    /// Small host-visible results.
    scalars: CudaSlice<f64>,
}

/// `CgBackend` on one GPU with a mod-SELL matrix and Jacobi (or no)
/// preconditioning.
pub struct GpuCgBackend<'g> {
    gpu: &'g Gpu,
    matrix: DeviceModSell,
    inv_diag: Option<CudaSlice<f64>>,
    row_sums: CudaSlice<f64>,
    check_interval: usize,
    scratch: RefCell<Scratch>,
    failure: RefCell<Option<GpuError>>,
}

impl<'g> GpuCgBackend<'g> {
    /// `a` square, rows in the order to use; `jacobi` selects z = D⁻¹ r
    /// (the diagonal must be nonzero), else z = r.
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        jacobi: bool,
        slice_height: usize,
        check_interval: usize,
    ) -> Result<Self, GpuError> {
        let m = ModSell::from_csr(a, slice_height).map_err(GpuError::Invalid)?;
        // rowSum(A) in the CPU backend's order: diagonal first, then by column.
        let row_sums: Vec<f64> = (0..a.n_rows())
            .map(|r| {
                let (cols, vals) = a.row(r);
                let d = m.diag()[r];
                let off = cols.iter().zip(vals).filter(|e| *e.0 as usize != r);
                off.fold(d, |s, (_, &v)| s + v)
            })
            .collect();
        let inv_diag = if jacobi {
            let inv: Vec<f64> = m.diag().iter().map(|d| 1.0 / d).collect();
            Some(gpu.upload(&inv)?)
        } else {
            None
        };
        let n = a.n_rows();
        let check_interval = check_interval.max(1);
        let scratch = Scratch {
            vector_partials: gpu.zeros(2 * vector_grid(n) as usize)?,
            slice_partials: gpu.zeros(2 * n.div_ceil(slice_height))?,
            state: gpu.zeros(STATE_LEN)?,
            records: gpu.zeros(3 * (check_interval + 1))?,
            scalars: gpu.zeros(2)?,
        };
        Ok(Self {
            gpu,
            matrix: DeviceModSell::upload(gpu, &m)?,
            inv_diag,
            row_sums: gpu.upload(&row_sums)?,
            check_interval,
            scratch: RefCell::new(scratch),
            failure: RefCell::new(None),
        })
    }

    pub fn upload(&self, v: &[f64]) -> Result<GpuVector, GpuError> {
        Ok(GpuVector(Some(self.gpu.upload(v)?)))
    }
    pub fn download(&self, v: &GpuVector) -> Result<Vec<f64>, GpuError> {
        self.gpu.download(v.dev()?)
    }

    /// Runs `work` unless an earlier call failed; records its error.
    fn guarded<T>(&self, fallback: T, work: impl FnOnce() -> Result<T, GpuError>) -> T {
        if self.failure.borrow().is_some() {
            return fallback;
        }
        work().unwrap_or_else(|e| {
            *self.failure.borrow_mut() = Some(e);
            fallback
        })
    }

    fn n32(&self) -> i32 {
        self.matrix.n as i32
    }

    /// Sums of the first `count` groups of `m` partials, read back.
    fn reduce(
        &self,
        s: &Scratch,
        partials: &CudaSlice<f64>,
        m: usize,
        count: usize,
    ) -> Result<Vec<f64>, GpuError> {
        let (m32, c32) = (m as i32, count as i32);
        self.gpu
            .launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&m32).arg(&c32).arg(partials).arg(&s.scalars);
            })?;
        let mut all = self.gpu.download(&s.scalars)?;
        all.truncate(count);
        Ok(all)
    }

    fn launch_precondition(
        &self,
        r: &GpuVector,
        z: &GpuVector,
        s: &Scratch,
    ) -> Result<(), GpuError> {
        let (n, r, z) = (self.n32(), r.dev()?, z.dev()?);
        self.gpu.launch(
            "cg_precondition",
            vector_grid(self.matrix.n),
            VECTOR_BLOCK,
            0,
            |a| {
                a.arg(&n).arg(r);
                match &self.inv_diag {
                    Some(d) => a.arg(d),
                    None => a.arg(&NULL),
                };
                a.arg(z).arg(&s.vector_partials);
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_update(
        &self,
        state: Option<&CudaSlice<f64>>,
        alpha: Option<&CudaSlice<f64>>,
        p: &GpuVector,
        q: &GpuVector,
        x: &GpuVector,
        r: &GpuVector,
        z: Option<&GpuVector>,
        partials: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = self.n32();
        let (p, q, x, r) = (p.dev()?, q.dev()?, x.dev()?, r.dev()?);
        let z = z.map(GpuVector::dev).transpose()?;
        self.gpu.launch(
            "cg_update",
            vector_grid(self.matrix.n),
            VECTOR_BLOCK,
            0,
            |a| {
                a.arg(&n);
                match state {
                    Some(s) => a.arg(s),
                    None => a.arg(&NULL),
                };
                match alpha {
                    Some(s) => a.arg(s),
                    None => a.arg(&NULL),
                };
                a.arg(p).arg(q).arg(x).arg(r);
                match (&self.inv_diag, z.is_some()) {
                    (Some(d), true) => a.arg(d),
                    _ => a.arg(&NULL),
                };
                match z {
                    Some(z) => a.arg(z),
                    None => a.arg(&NULL),
                };
                a.arg(partials);
            },
        )
    }

    /// The fused device loop behind `iterate`.
    fn run_chunk(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: &CgVectors<'_, GpuVector>,
    ) -> Result<Vec<IterationRecord>, GpuError> {
        let gpu = self.gpu;
        let mut s = self.scratch.borrow_mut();
        let host_state = [
            0.0,
            state.iterations as f64,
            f64::NAN,
            state.r_z_old,
            f64::NAN,
            state.last_residual,
            state.best,
        ];
        gpu.write(&host_state, &mut s.state)?;
        gpu.write(
            &vec![f64::NAN; 3 * (self.check_interval + 1)],
            &mut s.records,
        )?;
        let s = &*s;
        let (n, grid) = (self.n32(), vector_grid(self.matrix.n));
        let (vm, sm) = (grid as i32, self.matrix.n_slices() as i32);
        self.launch_precondition(v.r, v.z, s)?;
        let (vz, vp, vq) = (v.z.dev()?, v.p.dev()?, v.q.dev()?);
        gpu.launch("cg_finish_precondition", 1, REDUCE_BLOCK, 0, |a| {
            a.arg(&vm)
                .arg(&s.vector_partials)
                .arg(&s.state)
                .arg(&s.records);
        })?;
        let c = &rule.controls;
        let (max_iter, min_iter) = (c.max_iter as f64, c.min_iter as f64);
        for j in 0..count as i32 {
            gpu.launch("cg_direction", grid, VECTOR_BLOCK, 0, |a| {
                a.arg(&n).arg(&s.state).arg(&0.0f64).arg(vz).arg(vp);
            })?;
            self.matrix
                .spmv(gpu, vp, vq, Some(&s.slice_partials), Some(&s.state))?;
            gpu.launch("cg_finish_operator", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&sm)
                    .arg(&s.slice_partials)
                    .arg(&s.state)
                    .arg(&s.records)
                    .arg(&j);
            })?;
            self.launch_update(
                Some(&s.state),
                None,
                v.p,
                v.q,
                v.x,
                v.r,
                Some(v.z),
                &s.vector_partials,
            )?;
            gpu.launch("cg_finish_update", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&vm)
                    .arg(&s.vector_partials)
                    .arg(&s.state)
                    .arg(&s.records)
                    .arg(&j);
                a.arg(&c.tolerance)
                    .arg(&c.rel_tol)
                    .arg(&rule.initial)
                    .arg(&rule.norm_factor);
                a.arg(&max_iter).arg(&min_iter);
            })?;
        }
        let records = gpu.download(&s.records)?;
        let st = gpu.download(&s.state)?;
        let completed = (st[1] - state.iterations as f64) as usize;
        let started = if st[0] != 0.0 {
            (completed + 1).min(count)
        } else {
            count
        };
        Ok((0..started)
            .map(|j| IterationRecord {
                r_z: records[3 * j],
                p_q: records[3 * j + 1],
                residual: records[3 * j + 2],
            })
            .collect())
    }
}

impl CgBackend for GpuCgBackend<'_> {
    type Vector = GpuVector;

    fn n(&self) -> usize {
        self.matrix.n
    }

    /// A zero vector (none after a device failure, reported by `device_status`).
    fn new_vector(&self) -> GpuVector {
        let n = self.matrix.n;
        GpuVector(self.guarded(None, || self.gpu.zeros(n).map(Some)))
    }

    fn initialize(&self, b: &GpuVector, x: &GpuVector, r: &mut GpuVector) -> InitialNorms {
        let nan = InitialNorms {
            residual_sum: f64::NAN,
            norm_factor: f64::NAN,
        };
        self.guarded(nan, || {
            let (b, x, r) = (b.dev()?, x.dev()?, r.dev()?);
            let s = self.scratch.borrow();
            let (n, grid) = (self.n32(), vector_grid(self.matrix.n));
            self.gpu
                .launch("sum_partials", grid, VECTOR_BLOCK, 0, |a| {
                    a.arg(&n).arg(x).arg(&s.vector_partials);
                })?;
            let vm = grid as i32;
            let one = 1i32;
            self.gpu
                .launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                    a.arg(&vm).arg(&one).arg(&s.vector_partials).arg(&s.state);
                })?;
            let m = &self.matrix;
            let h = m.slice_height as u32;
            self.gpu
                .launch("cg_initial_residual", m.n_slices() as u32, h, h * 8, |a| {
                    a.arg(&n)
                        .arg(&m.slice_ptr)
                        .arg(&m.codes)
                        .arg(&m.values)
                        .arg(&m.diag);
                    a.arg(&self.row_sums).arg(&s.state).arg(x).arg(b).arg(r);
                    a.arg(&s.slice_partials);
                })?;
            let sums = self.reduce(&s, &s.slice_partials, m.n_slices(), 2)?;
            Ok(InitialNorms {
                residual_sum: sums[0],
                norm_factor: sums[1] + crate::solve::pcg::NORM_FACTOR_SMALL,
            })
        })
    }

    fn precondition(&self, r: &GpuVector, z: &mut GpuVector) -> f64 {
        self.guarded(f64::NAN, || {
            let s = self.scratch.borrow();
            self.launch_precondition(r, z, &s)?;
            let m = vector_grid(self.matrix.n) as usize;
            Ok(self.reduce(&s, &s.vector_partials, m, 1)?[0])
        })
    }

    fn update_direction(&self, beta: f64, z: &GpuVector, p: &mut GpuVector) {
        self.guarded((), || {
            let (n, z, p) = (self.n32(), z.dev()?, p.dev()?);
            self.gpu.launch(
                "cg_direction",
                vector_grid(self.matrix.n),
                VECTOR_BLOCK,
                0,
                |a| {
                    a.arg(&n).arg(&NULL).arg(&beta).arg(z).arg(p);
                },
            )
        })
    }

    fn apply_operator(&self, p: &GpuVector, q: &mut GpuVector) -> f64 {
        self.guarded(f64::NAN, || {
            let s = self.scratch.borrow();
            self.matrix
                .spmv(self.gpu, p.dev()?, q.dev()?, Some(&s.slice_partials), None)?;
            Ok(self.reduce(&s, &s.slice_partials, self.matrix.n_slices(), 1)?[0])
        })
    }

    fn update_solution(
        &self,
        alpha: f64,
        p: &GpuVector,
        q: &GpuVector,
        x: &mut GpuVector,
        r: &mut GpuVector,
    ) -> f64 {
        self.guarded(f64::NAN, || {
            self.gpu
                .write(&[alpha, 0.0], &mut self.scratch.borrow_mut().scalars)?;
            let s = self.scratch.borrow();
            self.launch_update(None, Some(&s.scalars), p, q, x, r, None, &s.vector_partials)?;
            let m = vector_grid(self.matrix.n) as usize;
            Ok(self.reduce(&s, &s.vector_partials, m, 1)?[0])
        })
    }

    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, GpuVector>,
    ) -> Vec<IterationRecord> {
        let count = count.min(self.check_interval);
        self.guarded(Vec::new(), || self.run_chunk(rule, state, count, &v))
    }

    fn device_status(&self) -> Result<(), SolveError> {
        match &*self.failure.borrow() {
            Some(e) => Err(SolveError::Device(e.to_string())),
            None => Ok(()),
        }
    }
}

/// Solves A x = b by PCG on the GPU (Jacobi or no preconditioner), after the
/// CPU path's input checks; rows reordered by `options.ordering` (invisible
/// to the caller). The convergence test and the returned performance are
/// those of `solve::pcg`.
#[allow(clippy::too_many_arguments)]
pub fn solve_pcg_gpu(
    gpu: &Gpu,
    a: &Csr,
    kind: PreconditionerKind,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
    options: &GpuSolveOptions,
) -> Result<SolverPerformance, SolveError> {
    GpuSolver::new(gpu).solve(a, kind, b, x, controls, field, options)
}

/// GPU solves of a sequence of systems of one size (a run's linear solves):
/// the permutation of each row ordering is computed at its first use and
/// reused, so that an expensive ordering (METIS) is paid once per run.
/// Reuse is exact for any matrix of the same size (a permutation only
/// changes the storage order); it is the best order while the pattern stays
/// that of the first matrix, as an FVM system's does.
pub struct GpuSolver<'g> {
    gpu: &'g Gpu,
    permutations: HashMap<(RowOrdering, usize), Option<Permutation>>,
}

impl<'g> GpuSolver<'g> {
    pub fn new(gpu: &'g Gpu) -> Self {
        Self {
            gpu,
            permutations: HashMap::new(),
        }
    }

    /// [`solve_pcg_gpu`] with the permutation from this solver's cache.
    #[allow(clippy::too_many_arguments)]
    pub fn solve(
        &mut self,
        a: &Csr,
        kind: PreconditionerKind,
        b: &[f64],
        x: &mut [f64],
        controls: &SolverControls,
        field: &str,
        options: &GpuSolveOptions,
    ) -> Result<SolverPerformance, SolveError> {
        check_system(a, b, x, controls)?;
        let jacobi = match kind {
            PreconditionerKind::None => false,
            PreconditionerKind::Jacobi => true,
            other => {
                return Err(SolveError::Device(format!(
                    "the {other} preconditioner is not available on the GPU; use jacobi or none"
                )))
            }
        };
        kind.build(a)?; // the CPU path's checks of the diagonal
        let key = (options.ordering, options.slice_height);
        let cached = self
            .permutations
            .get(&key)
            .is_some_and(|p| p.as_ref().is_none_or(|p| p.len() == a.n_rows()));
        if !cached {
            let p = options
                .ordering
                .permutation(a, options.slice_height)
                .map_err(SolveError::Device)?;
            self.permutations.insert(key, p);
        }
        let ordered = Reordered::with_permutation(a, self.permutations[&key].as_ref())
            .map_err(SolveError::Device)?;
        let device = |e: GpuError| SolveError::Device(e.to_string());
        let backend = GpuCgBackend::new(
            self.gpu,
            ordered.matrix(),
            jacobi,
            options.slice_height,
            options.check_interval,
        )
        .map_err(device)?;
        let b_dev = backend.upload(&ordered.to_new(b)).map_err(device)?;
        let mut x_dev = backend.upload(&ordered.to_new(x)).map_err(device)?;
        let perf = pcg(&backend, &b_dev, &mut x_dev, controls, field)?;
        let x_new = backend.download(&x_dev).map_err(device)?;
        ordered.to_old_into(&x_new, x);
        Ok(perf)
    }
}

//! GMRES(m) and BiCGStab on the GPU: [`GpuKrylovBackend`] implements the
//! fused steps of `solve::krylov::KrylovBackend` with `kernels/krylov.cu` on
//! a mod-SELL matrix, so that `solve::gmres::gmres` and
//! `solve::bicgstab::bicgstab` run on the device exactly as on the CPU
//! reference (`CpuKrylovBackend`). Each step is one kernel (an SpMV with two
//! dot products, an axpy with the next MGS dot, a block of CGS2 dots, the
//! BiCGStab update with Σ|r| and r0 · r) whose per-block partials are added in
//! one fixed order (`reduce_partials`), then read back: GMRES's Givens
//! rotations and BiCGStab's scalars live on the host. With Jacobi or no
//! preconditioner, `gpu::bicgstab` runs the same PBiCGStab iterates as a
//! device loop (scalars on the device, one read-back per chunk).
//!
//! Preconditioners are [`DevicePreconditioner`]s (re-exported here: the same
//! trait PCG's device loop takes; nothing in it assumes symmetry, and
//! `is_linear` false asks for flexible GMRES). [`DeviceDiagonal`] is Jacobi
//! or no preconditioner (`solve::jacobi`, re-exported here); [`GpuSolver::solve_krylov_with`] takes any other one
//! built on the matrix in the device's row order.

use std::cell::RefCell;

use cudarc::driver::{CudaSlice, DevicePtr};

pub use super::jacobi::DeviceDiagonal;
pub use super::smooth::DevicePreconditioner;

use super::matrix::DeviceModSell;
use super::pcg::{
    initial_norms, read_sums, vector_sum, DeviceSolve, FirstFailure, GpuSolver, GpuVector,
    NormBuffers,
};
use super::{arg_or_null, check_row_count, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::bicgstab::bicgstab;
use crate::solve::cpu::{check_inputs, openfoam_row_sums};
use crate::solve::gmres::gmres;
use crate::solve::krylov::{KrylovBackend, KrylovMethod};
use crate::solve::precondition::Precondition;
use crate::solve::{
    Executor, InitialNorms, PreconditionerKind, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::{Csr, ModSell, Reordered};

/// Vectors per launch of the block kernels (kernels/krylov.cu KR_BATCH).
pub const KR_BATCH: usize = 32;

struct Scratch {
    /// Per-block partial sums (KR_BATCH sums of the vector grid, or two of
    /// the slice grid).
    partials: CudaSlice<f64>,
    /// Reduced sums, read back.
    scalars: CudaSlice<f64>,
    /// Σx for the normFactor.
    x_sum: CudaSlice<f64>,
    /// Device addresses of a block of vectors.
    table: CudaSlice<u64>,
    /// Coefficients of a block axpy.
    coeffs: CudaSlice<f64>,
}

/// `KrylovBackend` on one GPU: a mod-SELL matrix and any device
/// preconditioner.
pub struct GpuKrylovBackend<'g> {
    gpu: &'g Gpu,
    matrix: DeviceModSell,
    row_sums: CudaSlice<f64>,
    precond: Box<dyn DevicePreconditioner + 'g>,
    scratch: RefCell<Scratch>,
    failure: FirstFailure,
}

impl<'g> GpuKrylovBackend<'g> {
    /// Uploads `a` (square, rows in the order to use) as mod-SELL with
    /// `slice_height` rows per slice; preconditions with `precond`.
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        precond: Box<dyn DevicePreconditioner + 'g>,
        slice_height: usize,
    ) -> Result<Self, GpuError> {
        let n = a.n_rows();
        if n >= i32::MAX as usize || a.n_cols() != n {
            return Err(GpuError::Invalid(format!(
                "the GPU Krylov solvers need a square matrix of fewer than 2^31 rows, this one is \
                 {n} x {}",
                a.n_cols()
            )));
        }
        let m = ModSell::from_csr(a, slice_height).map_err(GpuError::Invalid)?;
        let matrix = DeviceModSell::upload(gpu, &m)?;
        let row_sums = gpu.upload(&openfoam_row_sums(a))?;
        Self::with_device_matrix(gpu, matrix, row_sums, precond)
    }

    /// The backend on a matrix assembled on the device (e.g. the SIMPLE
    /// momentum matrix, `gpu::simple`), with Jacobi (`jacobi`) or no
    /// preconditioner; its row sums and inverse diagonal computed there.
    pub fn from_resident(
        gpu: &'g Gpu,
        matrix: DeviceModSell,
        jacobi: bool,
    ) -> Result<Self, GpuError> {
        let (row_sums, inv_diag) = matrix.row_sums_and_inverse_diagonal(gpu)?;
        let precond =
            DeviceDiagonal::with_inverse_diagonal(gpu, matrix.n, jacobi.then_some(inv_diag));
        Self::with_device_matrix(gpu, matrix, row_sums, Box::new(precond))
    }

    /// Gives the matrix back (to re-assemble it).
    pub fn into_matrix(self) -> DeviceModSell {
        self.matrix
    }

    fn with_device_matrix(
        gpu: &'g Gpu,
        matrix: DeviceModSell,
        row_sums: CudaSlice<f64>,
        precond: Box<dyn DevicePreconditioner + 'g>,
    ) -> Result<Self, GpuError> {
        let n = matrix.n;
        check_row_count(n, "the GPU Krylov solvers need")?;
        let grid = vector_grid(n) as usize;
        let scratch = Scratch {
            partials: gpu.zeros((KR_BATCH * grid).max(2 * matrix.n_slices()))?,
            scalars: gpu.zeros(KR_BATCH)?,
            x_sum: gpu.zeros(1)?,
            table: gpu.zeros(KR_BATCH)?,
            coeffs: gpu.zeros(KR_BATCH)?,
        };
        Ok(Self {
            gpu,
            row_sums,
            matrix,
            precond,
            scratch: RefCell::new(scratch),
            failure: FirstFailure::default(),
        })
    }

    /// Preconditions with `p` from now on.
    pub fn set_preconditioner(&mut self, p: Box<dyn DevicePreconditioner + 'g>) {
        self.precond = p;
    }

    /// The matrix it solves with.
    pub fn matrix(&self) -> &DeviceModSell {
        &self.matrix
    }

    pub fn upload(&self, v: &[f64]) -> Result<GpuVector, GpuError> {
        Ok(GpuVector::from(self.gpu.upload(v)?))
    }
    pub fn download(&self, v: &GpuVector) -> Result<Vec<f64>, GpuError> {
        self.gpu.download(v.dev()?)
    }

    fn n32(&self) -> i32 {
        self.matrix.n as i32
    }

    fn grid(&self) -> u32 {
        vector_grid(self.matrix.n)
    }

    /// Sums of the first `count` groups of `m` partials, read back.
    fn reduce(&self, s: &Scratch, m: usize, count: usize) -> Result<Vec<f64>, GpuError> {
        read_sums(self.gpu, &s.partials, &s.scalars, m, count)
    }

    /// Launches a mod-SELL kernel (one block per slice) with `push` adding
    /// the arguments after n and the matrix.
    fn launch_rows<'a>(
        &'a self,
        kernel: &'static str,
        n: &'a i32,
        push: impl FnOnce(&mut crate::gpu::KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        self.matrix.launch_slices(self.gpu, kernel, n, push)
    }

    /// Writes the device addresses of `vs` (at most KR_BATCH) into the table.
    fn write_table(&self, s: &mut Scratch, vs: &[&GpuVector]) -> Result<(), GpuError> {
        let stream = self.gpu.stream();
        let mut addresses = vec![0u64; KR_BATCH];
        for (address, v) in addresses.iter_mut().zip(vs) {
            *address = v.dev()?.device_ptr(stream).0;
        }
        self.gpu.write(&addresses, &mut s.table)
    }
}

impl Executor for GpuKrylovBackend<'_> {
    type Vector = GpuVector;

    fn n(&self) -> usize {
        self.matrix.n
    }

    fn new_vector(&self) -> GpuVector {
        let fresh = self
            .failure
            .guarded(None, || self.gpu.zeros(self.matrix.n).map(Some));
        fresh.map_or_else(GpuVector::missing, GpuVector::from)
    }

    fn initialize(&self, b: &GpuVector, x: &GpuVector, r: &mut GpuVector) -> InitialNorms {
        self.failure.guarded(InitialNorms::NAN, || {
            let s = self.scratch.borrow();
            let buffers = NormBuffers {
                vector_partials: &s.partials,
                slice_partials: &s.partials,
                x_sum: &s.x_sum,
                scalars: &s.scalars,
            };
            // Not equilibrated: no scaling.
            initial_norms(
                self.gpu,
                &self.matrix,
                &self.row_sums,
                None,
                (b.dev()?, x.dev()?, r.dev()?),
                &buffers,
            )
        })
    }

    fn dot(&self, a: &GpuVector, b: &GpuVector) -> f64 {
        self.failure
            .guarded(f64::NAN, || self.dot_dev(a.dev()?, b.dev()?))
    }

    fn sum_abs(&self, v: &GpuVector) -> f64 {
        self.failure.guarded(f64::NAN, || {
            self.vector_sum("abs_sum_partials", &[v.dev()?])
        })
    }

    fn device_status(&self) -> Result<(), SolveError> {
        self.failure.status()
    }
}

impl KrylovBackend for GpuKrylovBackend<'_> {
    fn preconditioner_name(&self) -> Option<&'static str> {
        self.precond.preconditioner_name()
    }

    fn residual(&self, b: &GpuVector, x: &GpuVector, r: &mut GpuVector) -> (f64, f64) {
        self.failure.guarded((f64::NAN, f64::NAN), || {
            let (b, x, r) = (b.dev()?, x.dev()?, r.dev()?);
            let s = self.scratch.borrow();
            let n = self.n32();
            self.launch_rows("kr_residual", &n, |a| {
                a.arg(x).arg(b).arg(r).arg(&s.partials);
            })?;
            let sums = self.reduce(&s, self.matrix.n_slices(), 2)?;
            Ok((sums[0], sums[1]))
        })
    }

    fn precondition(&self, v: &GpuVector, z: &mut GpuVector) {
        self.failure
            .guarded((), || Precondition::apply(&*self.precond, v, z))
    }

    fn apply_operator(
        &self,
        v: &GpuVector,
        y: &mut GpuVector,
        w: Option<&GpuVector>,
    ) -> (f64, f64) {
        self.failure.guarded((f64::NAN, f64::NAN), || {
            let (v, y) = (v.dev()?, y.dev()?);
            let w = w.map(GpuVector::dev).transpose()?;
            let s = self.scratch.borrow();
            let n = self.n32();
            self.launch_rows("kr_operator", &n, |a| {
                a.arg(v).arg(y);
                arg_or_null(a, w);
                a.arg(&s.partials);
            })?;
            let sums = self.reduce(&s, self.matrix.n_slices(), 2)?;
            Ok((sums[0], sums[1]))
        })
    }

    fn scale(&self, alpha: f64, x: &GpuVector, y: &mut GpuVector) {
        self.failure.guarded((), || {
            let (x, y, n) = (x.dev()?, y.dev()?, self.n32());
            self.gpu.launch_vector("kr_scale", self.matrix.n, |a| {
                a.arg(&n).arg(&alpha).arg(x).arg(y);
            })
        })
    }

    fn axpy_dot(&self, alpha: f64, x: &GpuVector, y: &mut GpuVector, w: Option<&GpuVector>) -> f64 {
        self.failure.guarded(f64::NAN, || {
            let (x, y, n) = (x.dev()?, y.dev()?, self.n32());
            let w = w.map(GpuVector::dev).transpose()?;
            let s = self.scratch.borrow();
            self.gpu.launch_vector("kr_axpy_dot", self.matrix.n, |a| {
                a.arg(&n).arg(&alpha).arg(x).arg(y);
                arg_or_null(a, w);
                a.arg(&s.partials);
            })?;
            Ok(self.reduce(&s, self.grid() as usize, 1)?[0])
        })
    }

    fn multi_dot(&self, vs: &[&GpuVector], w: &GpuVector) -> Vec<f64> {
        self.failure.guarded(vec![f64::NAN; vs.len()], || {
            let (w, n, grid) = (w.dev()?, self.n32(), self.grid());
            let mut out = Vec::with_capacity(vs.len());
            for batch in vs.chunks(KR_BATCH) {
                self.write_table(&mut self.scratch.borrow_mut(), batch)?;
                let s = self.scratch.borrow();
                let k = batch.len() as i32;
                self.gpu
                    .launch("kr_multi_dot", grid, VECTOR_BLOCK, 0, |a| {
                        a.arg(&n).arg(&k).arg(&s.table).arg(w).arg(&s.partials);
                    })?;
                out.extend(self.reduce(&s, grid as usize, batch.len())?);
            }
            Ok(out)
        })
    }

    fn multi_axpy(&self, c: &[f64], vs: &[&GpuVector], y: &mut GpuVector) -> f64 {
        assert_eq!(c.len(), vs.len(), "multi_axpy: coefficients");
        self.failure.guarded(f64::NAN, || {
            let (y, n, grid) = (y.dev()?, self.n32(), self.grid());
            let mut yy = f64::NAN;
            if vs.is_empty() {
                return self.dot_dev(y, y);
            }
            for (batch, coeffs) in vs.chunks(KR_BATCH).zip(c.chunks(KR_BATCH)) {
                {
                    let mut s = self.scratch.borrow_mut();
                    self.write_table(&mut s, batch)?;
                    let mut padded = [0.0; KR_BATCH];
                    padded[..coeffs.len()].copy_from_slice(coeffs);
                    self.gpu.write(&padded, &mut s.coeffs)?;
                }
                let s = self.scratch.borrow();
                let k = batch.len() as i32;
                self.gpu
                    .launch("kr_multi_axpy", grid, VECTOR_BLOCK, 0, |a| {
                        a.arg(&n)
                            .arg(&k)
                            .arg(&s.table)
                            .arg(&s.coeffs)
                            .arg(y)
                            .arg(&s.partials);
                    })?;
                yy = self.reduce(&s, grid as usize, 1)?[0];
            }
            Ok(yy)
        })
    }

    fn bicg_direction(
        &self,
        beta: f64,
        omega: f64,
        r: &GpuVector,
        v: &GpuVector,
        p: &mut GpuVector,
    ) {
        self.failure.guarded((), || {
            let (r, v, p, n) = (r.dev()?, v.dev()?, p.dev()?, self.n32());
            self.gpu
                .launch_vector("kr_bicg_direction", self.matrix.n, |a| {
                    a.arg(&n).arg(&beta).arg(&omega).arg(r).arg(v).arg(p);
                })
        })
    }

    fn bicg_half(&self, alpha: f64, r: &GpuVector, v: &GpuVector, s_out: &mut GpuVector) -> f64 {
        self.failure.guarded(f64::NAN, || {
            let (r, v, so, n) = (r.dev()?, v.dev()?, s_out.dev()?, self.n32());
            let s = self.scratch.borrow();
            self.gpu.launch_vector("kr_bicg_half", self.matrix.n, |a| {
                a.arg(&n).arg(&alpha).arg(r).arg(v).arg(so).arg(&s.partials);
            })?;
            Ok(self.reduce(&s, self.grid() as usize, 1)?[0])
        })
    }

    fn bicg_update(
        &self,
        alpha: f64,
        omega: f64,
        y: &GpuVector,
        z: &GpuVector,
        s_vec: &GpuVector,
        t: &GpuVector,
        r0: &GpuVector,
        x: &mut GpuVector,
        r: &mut GpuVector,
    ) -> (f64, f64) {
        self.failure.guarded((f64::NAN, f64::NAN), || {
            let (y, z, sv, t, r0) = (y.dev()?, z.dev()?, s_vec.dev()?, t.dev()?, r0.dev()?);
            let (x, r, n) = (x.dev()?, r.dev()?, self.n32());
            let s = self.scratch.borrow();
            self.gpu
                .launch_vector("kr_bicg_update", self.matrix.n, |a| {
                    a.arg(&n)
                        .arg(&alpha)
                        .arg(&omega)
                        .arg(y)
                        .arg(z)
                        .arg(sv)
                        .arg(t)
                        .arg(r0)
                        .arg(x)
                        .arg(r)
                        .arg(&s.partials);
                })?;
            let sums = self.reduce(&s, self.grid() as usize, 2)?;
            Ok((sums[0], sums[1]))
        })
    }
}

impl GpuKrylovBackend<'_> {
    fn dot_dev(&self, a: &CudaSlice<f64>, b: &CudaSlice<f64>) -> Result<f64, GpuError> {
        self.vector_sum("dot_partials", &[a, b])
    }

    /// [`vector_sum`] in this backend's buffers.
    fn vector_sum(
        &self,
        kernel: &'static str,
        vectors: &[&CudaSlice<f64>],
    ) -> Result<f64, GpuError> {
        let s = self.scratch.borrow();
        vector_sum(
            self.gpu,
            kernel,
            self.matrix.n,
            vectors,
            (&s.partials, &s.scalars),
        )
    }
}

/// Runs `method` with `backend` from the initial guess `x0` (in the
/// backend's row order); returns the performance and the solution.
pub fn run_krylov(
    backend: &GpuKrylovBackend<'_>,
    method: &KrylovMethod,
    b: &[f64],
    x0: &[f64],
    controls: &SolverControls,
    field: &str,
) -> Result<(SolverPerformance, Vec<f64>), SolveError> {
    let b_dev = backend.upload(b)?;
    let mut x_dev = backend.upload(x0)?;
    let perf = match method {
        KrylovMethod::Gmres(s) => gmres(backend, &b_dev, &mut x_dev, controls, s, field)?,
        KrylovMethod::BiCgStab => bicgstab(backend, &b_dev, &mut x_dev, controls, field)?,
    };
    Ok((perf, backend.download(&x_dev)?))
}

/// Builds a device preconditioner for the matrix in the device's row order
/// (the argument), e.g. an ILU factorisation.
pub type BuildDevicePreconditioner<'b, 'g> =
    dyn FnOnce(&'g Gpu, &Csr) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError> + 'b;

impl<'g> GpuSolver<'g> {
    /// Solves A x = b (A square, not necessarily symmetric) on the GPU with
    /// `method` and Jacobi or no preconditioner (`kind`), after the CPU
    /// path's input checks; rows reordered by `options.ordering` (invisible
    /// to the caller).
    pub fn solve_krylov(
        &mut self,
        method: &KrylovMethod,
        kind: PreconditionerKind,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        let build = move |gpu: &'g Gpu, ordered: &Csr| {
            DeviceDiagonal::of_kind(gpu, ordered, kind)
                .map(|p| Box::new(p) as Box<dyn DevicePreconditioner + 'g>)
        };
        self.solve_krylov_with(method, Box::new(build), s)
    }

    /// [`Self::solve_krylov`] with the preconditioner `build` makes from the
    /// matrix in the device's row order.
    pub fn solve_krylov_with(
        &mut self,
        method: &KrylovMethod,
        build: Box<BuildDevicePreconditioner<'_, 'g>>,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        let s = s.unequilibrated(method)?;
        let DeviceSolve {
            a,
            b,
            x,
            controls,
            field,
            options,
            ..
        } = s;
        check_inputs(a, b, x, controls)?;
        if let KrylovMethod::Gmres(s) = method {
            s.validate().map_err(SolveError::InvalidControls)?;
        }
        let gpu = self.gpu();
        let perm = self.permutation(a, options)?;
        let ordered = Reordered::with_permutation(a, perm).map_err(SolveError::Device)?;
        let precond = build(gpu, ordered.matrix())?;
        let backend = GpuKrylovBackend::new(gpu, ordered.matrix(), precond, options.slice_height)?;
        let (perf, x_new) = run_krylov(
            &backend,
            method,
            &ordered.to_new(b),
            &ordered.to_new(x),
            controls,
            field,
        )?;
        ordered.to_old_into(&x_new, x);
        Ok(perf)
    }
}

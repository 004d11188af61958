//! ILU(k) on the device (compiled as `gpu::ilu`; see `solve::ilu`), equal
//! bit for bit to `solve::ilu::Ilu` on the same matrix and row order, and
//! the device preconditioner of GMRES / BiCGStab (and of PCG's ILU and
//! Schwarz) for the factorisations: ILU(k), Schwarz (`gpu::schwarz`), DIC,
//! DILU and IC(0) (`gpu::ic`).
//!
//! The symbolic ILU(k) pattern is built on the host, as Yang 2015 does
//! (Yang 2015 §2.10); the numeric factorisation runs on the device level by
//! level (row i's factor needs the rows of its L part: the forward schedule
//! of the padded pattern), and each sweep is one launch per level, one
//! thread per row (as `gpu::ic`), kernels in `kernels/ilu.cu`.

use cudarc::driver::CudaSlice;

use super::ic::{DeviceIncompleteCholesky, IcKind};
use super::krylov::DeviceDiagonal;
use super::levels::DeviceLevels;
use super::pcg::{DeviceSolve, GpuSolver};
use super::schwarz::DeviceSchwarz;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::ilu::{diagonal_slots, pivot_thresholds, symbolic, zero_pivot};
use crate::solve::krylov::KrylovMethod;
use crate::solve::registry::{self, Role};
use crate::solve::{Preconditioner, SolveError, SolverPerformance};
use crate::sparse::fill::FillPattern;
use crate::sparse::levels::LevelSchedule;
use crate::sparse::{Csr, Reordered};

/// ILU(k) factors on the device, factorised there.
pub struct DeviceIlu<'g> {
    gpu: &'g Gpu,
    n: usize,
    fill_level: u32,
    row_ptr: CudaSlice<u64>,
    cols: CudaSlice<i32>,
    diag_slot: CudaSlice<u64>,
    /// L and U in the padded pattern's slots.
    lu: CudaSlice<f64>,
    forward: DeviceLevels,
    backward: DeviceLevels,
}

impl<'g> DeviceIlu<'g> {
    /// ILU(k) of `a` (square, rows in the solve's order): the pattern on the
    /// host, the factors on the device. A zero or tiny pivot is the CPU's
    /// error for the same row.
    pub fn new(gpu: &'g Gpu, a: &Csr, k: u32) -> Result<Self, SolveError> {
        Self::from_pattern(gpu, &symbolic(a, k)?)
    }

    /// The numeric factorisation of a padded ILU(k) pattern on the device.
    pub fn from_pattern(gpu: &'g Gpu, pattern: &FillPattern) -> Result<Self, SolveError> {
        let p = &pattern.matrix;
        let n = p.n_rows();
        let diag: Vec<u64> = diagonal_slots(p).iter().map(|&s| s as u64).collect();
        let cols: Vec<i32> = p.cols().iter().map(|&c| c as i32).collect();
        let row_ptr: Vec<u64> = p.row_ptr().iter().map(|&s| s as u64).collect();
        let upload = || -> Result<Self, GpuError> {
            Ok(Self {
                gpu,
                n,
                fill_level: pattern.fill_level,
                row_ptr: gpu.upload(&row_ptr)?,
                cols: gpu.upload(&cols)?,
                diag_slot: gpu.upload(&diag)?,
                lu: gpu.upload(p.values())?,
                forward: DeviceLevels::upload(gpu, &LevelSchedule::lower(p))?,
                backward: DeviceLevels::upload(gpu, &LevelSchedule::upper(p))?,
            })
        };
        let ilu = upload()?;
        ilu.factorise(&pivot_thresholds(p), &diag)?;
        Ok(ilu)
    }

    fn factorise(&self, tiny: &[f64], diag: &[u64]) -> Result<(), SolveError> {
        let gpu = self.gpu;
        let tiny = gpu.upload(tiny)?;
        let failed = gpu.upload(&[self.n as i32 + 1])?;
        self.forward.launch_each(gpu, "ilu_factor", |a| {
            a.arg(&self.row_ptr).arg(&self.cols).arg(&self.diag_slot);
            a.arg(&tiny).arg(&self.lu).arg(&failed);
        })?;
        let failed_row = gpu.download(&failed)?[0] as usize;
        if failed_row <= self.n {
            let row = failed_row - 1;
            let value = gpu.download(&self.lu)?[diag[row] as usize];
            return Err(zero_pivot(self.fill_level, row, value));
        }
        Ok(())
    }

    /// Levels of the forward and the backward sweep.
    pub fn levels(&self) -> (usize, usize) {
        (self.forward.n_levels(), self.backward.n_levels())
    }

    /// L and U as the CPU stores them (`Ilu::factors` values).
    pub fn download_factors(&self) -> Result<Vec<f64>, GpuError> {
        self.gpu.download(&self.lu)
    }
}

impl DevicePreconditioner for DeviceIlu<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        self.forward.launch_each(gpu, "ilu_forward", |a| {
            a.arg(&self.row_ptr).arg(&self.cols).arg(&self.diag_slot);
            a.arg(&self.lu).arg(r).arg(z);
            arg_or_null(a, done);
        })?;
        self.backward.launch_each(gpu, "ilu_backward", |a| {
            a.arg(&self.row_ptr).arg(&self.cols).arg(&self.diag_slot);
            a.arg(&self.lu).arg(z);
            arg_or_null(a, done);
        })
    }
    fn is_linear(&self) -> bool {
        true
    }
}

/// The device preconditioner of an ILU(k), Schwarz, DIC, DILU or IC(0)
/// [`Preconditioner`] for `a` (rows in the solve's order), with a log line of
/// its levels; `None` for the other preconditioners.
pub fn device_preconditioner<'g>(
    gpu: &'g Gpu,
    a: &Csr,
    preconditioner: &Preconditioner,
) -> Result<Option<Box<dyn DevicePreconditioner + 'g>>, SolveError> {
    Ok(match preconditioner {
        Preconditioner::Kind(kind) => match IcKind::of(*kind) {
            Some(ic) => {
                let m = DeviceIncompleteCholesky::new(gpu, a, ic)?;
                let (fw, bw) = m.levels();
                log::info!("GPU {kind}: {fw} forward and {bw} backward levels");
                Some(Box::new(m))
            }
            None => None,
        },
        Preconditioner::Ilu(k) => {
            let m = DeviceIlu::new(gpu, a, *k)?;
            let (fw, bw) = m.levels();
            log::info!("GPU ILU({k}): {fw} forward and {bw} backward levels");
            Some(Box::new(m))
        }
        Preconditioner::Schwarz(s) => {
            let m = DeviceSchwarz::new(gpu, a, s)?;
            let (fw, bw) = m.levels();
            log::info!("GPU {s}: {fw} forward and {bw} backward levels");
            Some(Box::new(m))
        }
        _ => None,
    })
}

/// What GMRES/BiCGStab run on the GPU for `p`: ILU(k), Schwarz, DILU, DIC,
/// IC(0), Jacobi and none as given ([`GpuSolver::solve_krylov_preconditioned`]);
/// for the others the registry names the fallback (`solve::registry`,
/// `GpuSupport::Fallback`), with a reason the caller logs once.
pub fn gpu_krylov_preconditioner(p: &Preconditioner) -> Preconditioner {
    match registry::gpu_fallback(p, Role::Krylov) {
        Some((used, _message)) => used,
        None => *p,
    }
}

impl<'g> GpuSolver<'g> {
    /// GMRES or BiCGStab (`gpu::krylov`) with any preconditioner
    /// [`device_preconditioner`] builds (ILU(k), RAS/AS, DILU, DIC, IC(0)),
    /// or Jacobi/none; factorised on the matrix in the device's row order.
    pub fn solve_krylov_preconditioned(
        &mut self,
        method: &KrylovMethod,
        preconditioner: &Preconditioner,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        preconditioner.validate()?;
        let p = *preconditioner;
        let build = move |gpu: &'g Gpu, ordered: &Csr| {
            if let Some(m) = device_preconditioner(gpu, ordered, &p)? {
                return Ok(m);
            }
            match p {
                Preconditioner::Kind(kind) => DeviceDiagonal::of_kind(gpu, ordered, kind)
                    .map(|m| Box::new(m) as Box<dyn DevicePreconditioner + 'g>),
                other => Err(SolveError::InvalidControls(format!(
                    "the {other} preconditioner is not available to GMRES/BiCGStab on the GPU \
                     (use ilu0, ilu1, iluk:K, ras:..., as:..., dilu, dic, ic0, jacobi or none)"
                ))),
            }
        };
        // Errors name the device row order's rows, as the other GPU paths'
        // factorisations do before `in_original_rows`.
        let perm = self.permutation(s.a, s.options)?.cloned();
        self.solve_krylov_with(method, Box::new(build), s)
            .map_err(|e| super::levels::in_original_rows(e, perm.as_ref()))
    }
}

/// ILU(k) or a symmetric Schwarz preconditioner (AS) for PCG on the device
/// ([`GpuSolver::pcg_preconditioned`]), on the system in the solve's row order
/// (`ordered`; errors name the original rows).
pub(crate) fn pcg_ilu_or_schwarz<'g>(
    gpu: &'g Gpu,
    ordered: &Reordered<'_>,
    preconditioner: &Preconditioner,
) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError> {
    device_preconditioner(gpu, ordered.matrix(), preconditioner)
        .map_err(|e| super::levels::in_original_rows(e, ordered.permutation()))?
        .ok_or_else(|| {
            SolveError::InvalidControls(format!("{preconditioner} is not ILU or Schwarz"))
        })
}

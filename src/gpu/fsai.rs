//! FSAI on the GPU: the application z = Gᵀ (G r) inside PCG's fused loop
//! (`kernels/fsai_apply.cu`), with G and Gᵀ both stored as CSR
//! ([`DeviceCsr`]). The setup runs where [`FsaiSetupPlace`] says: on the host
//! (the CPU reference `solve::fsai::fsai_setup`, then an upload), or on the
//! device (`gpu::fsai_setup`, which hands over G and Gᵀ through
//! [`DeviceFsai::from_device`]).
//!
//! Each product is one thread per row summing in stored column order with
//! `__dmul_rn`/`__dadd_rn`, the order of `Csr::spmv`, so the device
//! application equals the CPU's bit for bit for the same G.

use std::time::Instant;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::amg::DeviceCsr;
use super::fsai_setup::{fsai_setup_gpu, FsaiSetupStats};
use super::pcg::{pcg_scaled_reordered, GpuSolveOptions, GpuSolver, ScaledSystem};
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::cpu::check_system;
use crate::solve::fsai::{fsai_setup, FsaiFactor, FsaiSettings};
use crate::solve::{
    EquilibrationKind, Preconditioner, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::Csr;

/// Where G is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsaiSetupPlace {
    /// The CPU reference setup (rayon), then G and Gᵀ uploaded.
    #[default]
    Host,
    /// The GPU setup (`gpu::fsai_setup`).
    Device,
}

impl FsaiSetupPlace {
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Device => "device",
        }
    }
}

/// Where GPU solves compute G.
pub const SETUP_PLACE: FsaiSetupPlace = FsaiSetupPlace::Device;

/// What the setup did.
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiSetupReport {
    pub place: FsaiSetupPlace,
    /// Wall time of the setup, G and Gᵀ on the device (seconds).
    pub seconds: f64,
    /// μ = nnz(G) / nnz(A).
    pub density: f64,
    /// μ₀, before the postfilter.
    pub density_before_postfilter: f64,
    /// The device setup's kernel times and statistics (`FsaiSetupPlace::Device`).
    pub device: Option<FsaiSetupStats>,
}

/// z = Gᵀ (G r) on the device (`solve::fsai::FsaiPreconditioner`).
pub struct DeviceFsai<'g> {
    gpu: &'g Gpu,
    g: DeviceCsr,
    gt: DeviceCsr,
    /// G r.
    t: CudaSlice<f64>,
}

impl<'g> DeviceFsai<'g> {
    /// G of a host setup, with its transpose, copied to the device.
    pub fn from_host(gpu: &'g Gpu, factor: &FsaiFactor) -> Result<Self, GpuError> {
        let g = DeviceCsr::upload(gpu, &factor.g)?;
        let gt = DeviceCsr::upload(gpu, &factor.g.transpose())?;
        Self::from_device(gpu, g, gt)
    }

    /// G and Gᵀ already on the device (the GPU setup).
    pub fn from_device(gpu: &'g Gpu, g: DeviceCsr, gt: DeviceCsr) -> Result<Self, GpuError> {
        if g.n != gt.n || g.nnz != gt.nnz {
            return Err(GpuError::Invalid(format!(
                "FSAI: G is {} rows with {} entries but its transpose {} rows with {}",
                g.n, g.nnz, gt.n, gt.nnz
            )));
        }
        let t = gpu.zeros(g.n)?;
        Ok(Self { gpu, g, gt, t })
    }

    /// Sets up G for `a` at `place` and puts it on the device.
    pub fn setup(
        gpu: &'g Gpu,
        a: &Csr,
        settings: &FsaiSettings,
        place: FsaiSetupPlace,
    ) -> Result<(Self, FsaiSetupReport), SolveError> {
        let device = |e: GpuError| SolveError::Device(e.to_string());
        let start = Instant::now();
        let mut device_stats = None;
        let (fsai, density, density_before_postfilter) = match place {
            FsaiSetupPlace::Host => {
                let factor = fsai_setup(a, settings)?;
                let s = &factor.stats;
                let (d, d0) = (s.density, s.density_before_postfilter);
                (Self::from_host(gpu, &factor).map_err(device)?, d, d0)
            }
            FsaiSetupPlace::Device => {
                // Every setting the CPU reference accepts runs on the device.
                let (g, gt, stats) = fsai_setup_gpu(gpu, a, settings)?;
                let (d, d0) = (stats.density, stats.density_before_postfilter);
                device_stats = Some(stats);
                (Self::from_device(gpu, g, gt).map_err(device)?, d, d0)
            }
        };
        gpu.synchronize().map_err(device)?;
        let report = FsaiSetupReport {
            place,
            seconds: start.elapsed().as_secs_f64(),
            density,
            density_before_postfilter,
            device: device_stats,
        };
        Ok((fsai, report))
    }

    /// G on the device.
    pub fn g(&self) -> &DeviceCsr {
        &self.g
    }

    /// Gᵀ on the device.
    pub fn gt(&self) -> &DeviceCsr {
        &self.gt
    }

    /// y = M x for M = G or Gᵀ.
    fn product(
        &self,
        m: &DeviceCsr,
        x: &CudaSlice<f64>,
        y: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let n = m.n as i32;
        self.gpu
            .launch("fsai_csr_product", vector_grid(m.n), VECTOR_BLOCK, 0, |a| {
                a.arg(&n)
                    .arg(&m.row_ptr)
                    .arg(&m.cols)
                    .arg(&m.vals)
                    .arg(x)
                    .arg(y);
                arg_or_null(a, done);
            })
    }

    fn run(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        self.product(&self.g, r, &self.t, done)?;
        self.product(&self.gt, &self.t, z, done)
    }
}

impl DevicePreconditioner for DeviceFsai<'_> {
    fn apply(&self, r: &CudaSlice<f64>, z: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.run(r, z, None)
    }
    fn apply_gated(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.run(r, z, Some(done))
    }
    fn is_linear(&self) -> bool {
        true
    }
}

impl GpuSolver<'_> {
    /// PCG with FSAI on the device, G set up at [`SETUP_PLACE`] for the
    /// system equilibrated by `equilibration`, in the row order of
    /// `options.ordering` (FSAI depends on the order: G is lower triangular
    /// in it). The convergence test and the returned performance are those
    /// of the original system, as in `solve::solve_pcg_scaled`.
    #[allow(clippy::too_many_arguments)]
    pub fn solve_fsai(
        &mut self,
        a: &Csr,
        settings: &FsaiSettings,
        equilibration: &EquilibrationKind,
        b: &[f64],
        x: &mut [f64],
        controls: &SolverControls,
        field: &str,
        options: &GpuSolveOptions,
    ) -> Result<SolverPerformance, SolveError> {
        check_system(a, b, x, controls)?;
        Preconditioner::Fsai(*settings).check()?;
        let scaled = ScaledSystem::new(a, equilibration, b, x)?;
        let system = scaled.matrix(a);
        let gpu = self.gpu();
        let (ordered, mut backend) = self.reordered_backend(system, &scaled, false, options)?;
        let (fsai, report) = DeviceFsai::setup(gpu, ordered.matrix(), settings, SETUP_PLACE)?;
        log::info!(
            "{settings}: set up on the {} in {:.3} s, density {:.3}",
            report.place.name(),
            report.seconds,
            report.density
        );
        backend.set_preconditioner(Box::new(fsai));
        pcg_scaled_reordered(&backend, &ordered, &scaled, x, controls, field)
    }
}

//! Restricted and symmetric additive Schwarz on the device (compiled as
//! `gpu::schwarz`; see `solve::schwarz`), equal bit for bit to
//! `solve::schwarz::Schwarz` on the same matrix and row order.
//!
//! The decomposition (METIS, overlap, the block matrix) is built on the
//! host, as Yang 2015 does (Yang 2015 §2.10). Every block is concatenated
//! into one block-diagonal matrix, so the blocks' levels merge: the block
//! factor (`gpu::ilu`'s ILU(k) for RAS, `gpu::ic`'s IC(0) for AS) sweeps
//! with one launch per level of the deepest block, all blocks' rows of that
//! level in it. Gather and scatter are `kernels/schwarz.cu`.

use cudarc::driver::CudaSlice;

use super::ic::{DeviceIncompleteCholesky, IcKind};
use super::ilu::DeviceIlu;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::schwarz::{Decomposition, SchwarzKind, SchwarzSettings};
use crate::solve::SolveError;
use crate::sparse::Csr;

/// The blocks' factor on the device.
enum DeviceBlockFactor<'g> {
    Ilu(Box<DeviceIlu<'g>>),
    Ic0(Box<DeviceIncompleteCholesky<'g>>),
}

/// RAS / AS on the device: gather, the block factor's sweeps over all blocks
/// at once, scatter.
pub struct DeviceSchwarz<'g> {
    gpu: &'g Gpu,
    n: usize,
    n_block_rows: usize,
    gather: CudaSlice<i32>,
    scatter_ptr: CudaSlice<u64>,
    scatter_list: CudaSlice<i32>,
    rb: CudaSlice<f64>,
    yb: CudaSlice<f64>,
    factor: DeviceBlockFactor<'g>,
}

impl<'g> DeviceSchwarz<'g> {
    /// The decomposition on the host, the block factor on the device.
    pub fn new(gpu: &'g Gpu, a: &Csr, settings: &SchwarzSettings) -> Result<Self, SolveError> {
        let d = Decomposition::new(a, settings)?;
        let factor = match settings.kind {
            SchwarzKind::Restricted => DeviceBlockFactor::Ilu(Box::new(DeviceIlu::new(
                gpu,
                &d.matrix,
                settings.fill_level,
            )?)),
            SchwarzKind::Additive => DeviceBlockFactor::Ic0(Box::new(
                DeviceIncompleteCholesky::new(gpu, &d.matrix, IcKind::Ic0)?,
            )),
        };
        let (ptr, list) = d.scatter_lists(settings.kind, a.n_rows());
        let to_i32 = |v: &[u32]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
        let nb = d.gather.len();
        let upload = || -> Result<Self, GpuError> {
            Ok(Self {
                gpu,
                n: a.n_rows(),
                n_block_rows: nb,
                gather: gpu.upload(&to_i32(&d.gather))?,
                scatter_ptr: gpu.upload(&ptr.iter().map(|&p| p as u64).collect::<Vec<_>>())?,
                scatter_list: gpu.upload(&to_i32(&list))?,
                rb: gpu.zeros(nb)?,
                yb: gpu.zeros(nb)?,
                factor,
            })
        };
        upload().map_err(SolveError::from)
    }

    /// Forward and backward levels of the blocks' factor.
    pub fn levels(&self) -> (usize, usize) {
        match &self.factor {
            DeviceBlockFactor::Ilu(f) => f.levels(),
            DeviceBlockFactor::Ic0(f) => f.levels(),
        }
    }

    /// The blocks' factor values (`Ilu::factors` / `Ic0::factor` of the CPU).
    pub fn download_factors(&self) -> Result<Vec<f64>, GpuError> {
        match &self.factor {
            DeviceBlockFactor::Ilu(f) => f.download_factors(),
            DeviceBlockFactor::Ic0(f) => f.download_factor(),
        }
    }
}

impl DevicePreconditioner for DeviceSchwarz<'_> {
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
        let (n, nb) = (self.n as i32, self.n_block_rows as i32);
        gpu.launch_vector("schwarz_gather", self.n_block_rows, |a| {
            a.arg(&nb).arg(&self.gather).arg(r).arg(&self.rb);
            arg_or_null(a, done);
        })?;
        let factor: &dyn DevicePreconditioner = match &self.factor {
            DeviceBlockFactor::Ilu(f) => f.as_ref(),
            DeviceBlockFactor::Ic0(f) => f.as_ref(),
        };
        factor.apply_with(&self.rb, &self.yb, done)?;
        gpu.launch_vector("schwarz_scatter", self.n, |a| {
            a.arg(&n)
                .arg(&self.scatter_ptr)
                .arg(&self.scatter_list)
                .arg(&self.yb)
                .arg(z);
            arg_or_null(a, done);
        })
    }
    fn is_linear(&self) -> bool {
        true
    }
}

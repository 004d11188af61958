//! Jacobi and the identity on the device (compiled as `gpu::jacobi`; see
//! `solve::jacobi`): z = D⁻¹ r (or z = r) with `kr_diagonal`
//! (kernels/krylov.cu, where GMRES and BiCGStab's other steps are). PCG's
//! own Jacobi is fused into its preconditioning step (`cg_precondition`,
//! kernels/pcg.cu, with r · z in the same pass), so it does not go through
//! this type; GMRES, BiCGStab and every caller that takes a
//! `DevicePreconditioner` do.

use cudarc::driver::CudaSlice;

use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::jacobi::Jacobi;
use crate::solve::{PreconditionerKind, SolveError};
use crate::sparse::Csr;

/// z = D⁻¹ r (Jacobi) or z = r (no preconditioner) on the device.
pub struct DeviceDiagonal<'g> {
    gpu: &'g Gpu,
    n: usize,
    inv_diag: Option<CudaSlice<f64>>,
}

impl<'g> DeviceDiagonal<'g> {
    /// Jacobi for `a` (rows in the device's order); the CPU's checks and
    /// errors (a missing or non-positive diagonal entry names its row).
    pub fn jacobi(gpu: &'g Gpu, a: &Csr) -> Result<Self, SolveError> {
        let j = Jacobi::new(a)?;
        let inv_diag = gpu.upload(j.reciprocal_diagonal())?;
        Ok(Self {
            gpu,
            n: a.n_rows(),
            inv_diag: Some(inv_diag),
        })
    }

    /// z = inv_diag ∘ r with a reciprocal diagonal already on the device
    /// (a matrix assembled there, `gpu::krylov::GpuKrylovBackend::from_resident`);
    /// `None`: M = I.
    pub(crate) fn with_inverse_diagonal(
        gpu: &'g Gpu,
        n: usize,
        inv_diag: Option<CudaSlice<f64>>,
    ) -> Self {
        Self { gpu, n, inv_diag }
    }

    /// M = I.
    pub fn identity(gpu: &'g Gpu, n: usize) -> Self {
        Self {
            gpu,
            n,
            inv_diag: None,
        }
    }

    /// The preconditioner of `kind` for `a`: Jacobi or none.
    pub fn of_kind(gpu: &'g Gpu, a: &Csr, kind: PreconditionerKind) -> Result<Self, SolveError> {
        match kind {
            PreconditionerKind::None => Ok(Self::identity(gpu, a.n_rows())),
            PreconditionerKind::Jacobi => Self::jacobi(gpu, a),
            other => Err(SolveError::Device(format!(
                "the {other} preconditioner is not available for GMRES/BiCGStab on the GPU; use \
                 jacobi or none"
            ))),
        }
    }
}

impl DevicePreconditioner for DeviceDiagonal<'_> {
    fn n(&self) -> usize {
        self.n
    }
    /// Not gated: `done` is ignored (the kernels run to the end).
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        _done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let n = self.n as i32;
        self.gpu.launch_vector("kr_diagonal", self.n, |a| {
            a.arg(&n);
            arg_or_null(a, self.inv_diag.as_ref());
            a.arg(r).arg(z);
        })
    }
    fn is_linear(&self) -> bool {
        true
    }
    fn preconditioner_name(&self) -> Option<&'static str> {
        Some(crate::solve::jacobi::log_name(self.inv_diag.is_some()))
    }
}

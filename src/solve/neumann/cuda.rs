//! The truncated Neumann preconditioner on the device (compiled as
//! `gpu::neumann`; see `solve::neumann`): 1 + 2m launches per application
//! (`neumann_scale`, D⁻¹ r, then m strictly-lower and m strictly-upper Horner
//! steps, `neumann_step`, each a masked mod-SELL product, `modsell_row_part`
//! of `kernels/spmv.cu`; kernels in `kernels/neumann.cu`) on the solve's
//! resident matrix, shared with its PCG backend.

use std::rc::Rc;

use cudarc::driver::CudaSlice;

use super::matrix::DeviceModSell;
use super::setup::{jacobi_scales, RowScale, SetupSpans};
use super::smooth::DevicePreconditioner;
use super::{Gpu, GpuError};
use crate::solve::algorithm::Algorithm;
use crate::solve::neumann::NeumannSettings;
use crate::solve::SolveError;
use crate::sparse::Csr;

/// M⁻¹ = Kᵀ D⁻¹ K of `solve::neumann` on the device.
pub struct DeviceNeumann<'g> {
    gpu: &'g Gpu,
    matrix: Rc<DeviceModSell>,
    inv_diag: CudaSlice<f64>,
    order: usize,
    /// ŷ₀ = D⁻¹ r, then free for the upper steps.
    scaled: CudaSlice<f64>,
    work: [CudaSlice<f64>; 2],
}

impl<'g> DeviceNeumann<'g> {
    /// `settings` for `a` (positive diagonal, checked as on the CPU) on
    /// `matrix`, its device copy in the same row order.
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        matrix: Rc<DeviceModSell>,
        settings: &NeumannSettings,
    ) -> Result<Self, SolveError> {
        // The CPU's message, checked before the matrix is read.
        settings
            .validate()
            .map_err(|e| SolveError::InvalidControls(format!("truncated Neumann: {e}")))?;
        matrix.check_rows("truncated Neumann preconditioner", a)?;
        let mut spans = SetupSpans::new("truncated Neumann", Some(gpu));
        // 1/a_ii on the device from the resident matrix (`gpu::setup`; the
        // CPU's `TruncatedNeumann::reciprocal_diagonal` bit for bit), which
        // refuses a non-positive diagonal as the CPU does.
        let (inv_diag, _) = jacobi_scales(
            gpu,
            &matrix,
            RowScale::Reciprocal,
            false,
            "truncated Neumann",
        )?;
        spans.device("reciprocal diagonal");
        let n = matrix.n;
        let neumann = Self {
            gpu,
            inv_diag,
            order: settings.order,
            scaled: gpu.zeros(n)?,
            work: [gpu.zeros(n)?, gpu.zeros(n)?],
            matrix,
        };
        spans.device("work vectors");
        spans.finish();
        Ok(neumann)
    }

    /// The last power m of the series.
    pub fn order(&self) -> usize {
        self.order
    }

    /// out = base − D⁻¹ T g (`neumann_step`).
    fn step(
        &self,
        upper: bool,
        g: &CudaSlice<f64>,
        base: &CudaSlice<f64>,
        out: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let m = &*self.matrix;
        let (n, upper) = (m.n as i32, i32::from(upper));
        self.gpu.launch(
            "neumann_step",
            m.n_slices() as u32,
            m.slice_height as u32,
            m.shared_bytes(),
            |a| {
                a.arg(&n).arg(&upper);
                m.push_args(a);
                a.arg(&self.inv_diag).arg(g).arg(base).arg(out);
            },
        )
    }
}

impl DevicePreconditioner for DeviceNeumann<'_> {
    fn n(&self) -> usize {
        self.matrix.n
    }
    /// Not gated: `done` is ignored (the kernels run to the end).
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        _done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let n = self.matrix.n as i32;
        self.gpu
            .launch_vector("neumann_scale", self.matrix.n, |a| {
                a.arg(&n).arg(&self.inv_diag).arg(r).arg(&self.scaled);
            })?;
        // ŷ_{k+1} = ŷ₀ − D⁻¹ L ŷ_k, alternating between the work buffers.
        let mut g = &self.scaled;
        for k in 0..self.order {
            let out = &self.work[k % 2];
            self.step(false, g, &self.scaled, out)?;
            g = out;
        }
        // û_{k+1} = y − D⁻¹ U û_k with y = ŷ_m (in `g`); the outputs alternate
        // between the two buffers y does not occupy, the last one is z.
        let y = g;
        let free = [&self.scaled, &self.work[self.order % 2]];
        for k in 0..self.order {
            let out = if k + 1 == self.order { z } else { free[k % 2] };
            self.step(true, g, y, out)?;
            g = out;
        }
        Ok(())
    }

    fn is_linear(&self) -> bool {
        true
    }
}

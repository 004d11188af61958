//! The device side of the registry's algorithms (`solve::registry::Registered`):
//! one arm per algorithm of [`device_preconditioner`] builds its device
//! preconditioner on the matrix in the solve's row order (and may share the
//! solve's resident copy of it); PCG, the scaling and the row order are
//! shared ([`GpuSolver::solve_registered`]), and deflated PCG
//! (`gpu::deflation::solve_pcg_deflated_gpu`) takes them too.

use std::rc::Rc;

use super::matrix::DeviceModSell;
use super::pcg::{pcg_scaled_reordered, GpuSolveOptions, GpuSolver, ScaledSystem};
use super::smooth::DevicePreconditioner;
use super::Gpu;
use crate::solve::cpu::check_system;
use crate::solve::registry::Registered;
use crate::solve::{
    EquilibrationKind, Preconditioner, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::Csr;

/// The device preconditioner of `settings` for `a` (square, in the solve's
/// row order); `resident` is the PCG backend's copy of `a` on the device.
pub fn device_preconditioner<'g>(
    gpu: &'g Gpu,
    a: &Csr,
    resident: Rc<DeviceModSell>,
    settings: &Registered,
) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError> {
    Ok(match settings {
        Registered::Ssor(s) => {
            let m = super::ssor::DeviceSsor::new(gpu, a, s)?;
            log::info!("GPU {s}: {} colours", m.n_colours());
            Box::new(m)
        }
        Registered::Neumann(s) => {
            Box::new(super::neumann::DeviceNeumann::new(gpu, a, resident, s)?)
        }
    })
}

impl GpuSolver<'_> {
    /// PCG preconditioned by a registry algorithm on the system
    /// equilibrated by `equilibration`, in the solve's row order; the
    /// convergence test and the returned performance are those of the
    /// original system, as in `solve::solve_pcg_scaled`.
    #[allow(clippy::too_many_arguments)]
    pub fn solve_registered(
        &mut self,
        a: &Csr,
        settings: &Registered,
        equilibration: &EquilibrationKind,
        b: &[f64],
        x: &mut [f64],
        controls: &SolverControls,
        field: &str,
        options: &GpuSolveOptions,
    ) -> Result<SolverPerformance, SolveError> {
        check_system(a, b, x, controls)?;
        Preconditioner::Registered(*settings).check()?;
        let scaled = ScaledSystem::new(a, equilibration, b, x)?;
        let system = scaled.matrix(a);
        let gpu = self.gpu();
        let (ordered, mut backend) = self.reordered_backend(system, &scaled, false, options)?;
        let m = device_preconditioner(gpu, ordered.matrix(), backend.shared_matrix(), settings)?;
        backend.set_preconditioner(m);
        pcg_scaled_reordered(&backend, &ordered, &scaled, x, controls, field)
    }
}

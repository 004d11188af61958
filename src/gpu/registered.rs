//! The device side of the registry's algorithms (`solve::registry::Registered`):
//! one arm per algorithm of [`device_preconditioner`] builds its device
//! preconditioner on the matrix in the solve's row order (and may share the
//! solve's resident copy of it); PCG, the scaling and the row order are
//! shared ([`GpuSolver::solve_registered`]), and deflated PCG
//! (`gpu::deflation::solve_pcg_deflated_gpu`) takes them too.

use std::rc::Rc;

use super::matrix::DeviceModSell;
use super::pcg::{GpuSolver, PcgSolve};
use super::smooth::DevicePreconditioner;
use super::Gpu;
use crate::solve::registry::Registered;
use crate::solve::{Preconditioner, SolveError, SolverPerformance};
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
    /// PCG preconditioned by a registry algorithm on the system `s`
    /// equilibrated, in the solve's row order; the
    /// convergence test and the returned performance are those of the
    /// original system, as in `solve::solve_pcg_scaled`.
    pub fn solve_registered(
        &mut self,
        settings: &Registered,
        s: PcgSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        s.check()?;
        Preconditioner::Registered(*settings).check()?;
        self.pcg_reordered(
            s,
            false,
            |_| Ok(()),
            |gpu, ordered, backend, ()| {
                let m = device_preconditioner(
                    gpu,
                    ordered.matrix(),
                    backend.shared_matrix(),
                    settings,
                )?;
                backend.set_preconditioner(m);
                Ok(())
            },
        )
    }
}

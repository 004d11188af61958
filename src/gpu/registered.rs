//! The device side of the registry's algorithms (`solve::registry::Registered`):
//! one arm per algorithm of [`device_preconditioner`] builds its device
//! preconditioner on the matrix in the solve's row order (and may share the
//! solve's resident copy of it); PCG, the scaling and the row order are
//! shared (`GpuSolver::pcg_preconditioned`, from [`GpuSolver::solve_with`]),
//! and deflated PCG
//! (`gpu::deflation::solve_pcg_deflated_gpu`) takes them too.

use std::rc::Rc;

use super::matrix::DeviceModSell;
#[cfg(doc)]
use super::pcg::GpuSolver;
use super::smooth::DevicePreconditioner;
use super::Gpu;
use crate::solve::registry::Registered;
use crate::solve::SolveError;
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

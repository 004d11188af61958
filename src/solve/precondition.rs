//! One preconditioner trait for every executor: [`Precondition`] maps r to
//! z = M⁻¹ r on the executor's vectors (`executor::Executor::Vector`), as
//! Ginkgo's preconditioners are linear operators of the executor they run on
//! (Anzt et al. 2022).
//!
//! Both families of preconditioners are one through it:
//!
//! - every host operator (`LinearOperator`, on slices) is a
//!   `Precondition<Vec<f64>>` (the CPU executors' vector), which cannot fail;
//! - every device preconditioner (`gpu::smooth::DevicePreconditioner`, on
//!   device buffers) is a `Precondition<gpu::pcg::GpuVector>`, whose failure
//!   is the device's error (the blanket implementation lives beside that
//!   trait, so `solve` does not depend on `gpu`).
//!
//! What a backend fuses into its own steps stays with the family that has
//! it, as a sub-trait: on the host `LinearOperator::apply_dot` (DIC folds
//! r · z into its sweeps, and PCG's CPU iterates keep OpenFOAM's bits); on
//! the device `DevicePreconditioner::apply_gated` and `graph_key` (PCG's
//! device loop, captured into a CUDA graph).
//!
//! [`Precondition::is_linear`] decides flexible PCG (Notay 2000) and
//! flexible GMRES (Saad 1993): a preconditioner that is not the same linear
//! map at every application (block Jacobi with an inner CG, a K-cycle AMG)
//! says so itself.

use std::convert::Infallible;

use super::LinearOperator;

/// z = M⁻¹ r on an executor's vectors `V`.
pub trait Precondition<V: ?Sized> {
    /// What an application can fail with: nothing on the host
    /// ([`Infallible`]), the device's error on a GPU.
    type Error;
    /// The rows of M.
    fn n(&self) -> usize;
    /// z = M⁻¹ r; z is fully overwritten.
    fn apply(&self, r: &V, z: &mut V) -> Result<(), Self::Error>;
    /// Whether M⁻¹ is the same linear map at every application; if not, PCG
    /// and GMRES run flexible.
    fn is_linear(&self) -> bool;
}

/// A host operator preconditions the CPU executors' vectors.
impl<T: LinearOperator + ?Sized> Precondition<Vec<f64>> for T {
    type Error = Infallible;
    fn n(&self) -> usize {
        LinearOperator::n(self)
    }
    fn apply(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> Result<(), Infallible> {
        LinearOperator::apply(self, r, z);
        Ok(())
    }
    fn is_linear(&self) -> bool {
        LinearOperator::is_linear(self)
    }
}

/// Applies a preconditioner that cannot fail (every host one).
pub fn apply_infallible<V: ?Sized, P: Precondition<V, Error = Infallible> + ?Sized>(
    p: &P,
    r: &V,
    z: &mut V,
) {
    match p.apply(r, z) {
        Ok(()) => {}
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::registry::{parse_spec, PRECONDITIONERS};
    use crate::sparse::testing::random_symmetric;

    /// Flexible PCG and GMRES follow the built preconditioner's `is_linear`
    /// (`cpu::CpuBackend`): it must say what the settings say.
    #[test]
    fn a_built_preconditioner_is_linear_exactly_when_its_settings_are_not_flexible() {
        let a = random_symmetric(64, 6, 5);
        let mut specs: Vec<String> = PRECONDITIONERS
            .iter()
            .flat_map(|r| r.names.iter().map(|n| n.to_string()))
            .collect();
        specs.extend(
            ["blockJacobi:inner=CG", "AMG:cycle=K", "iluk:1"]
                .iter()
                .map(|s| s.to_string()),
        );
        let mut nonlinear = Vec::new();
        for spec in &specs {
            let Ok(p) = parse_spec(spec) else {
                continue;
            };
            let built = p.build(&a).unwrap_or_else(|e| panic!("{spec}: {e}"));
            let linear = Precondition::<Vec<f64>>::is_linear(built.as_ref());
            assert_eq!(linear, !p.is_flexible(), "{spec}");
            assert_eq!(Precondition::<Vec<f64>>::n(built.as_ref()), 64, "{spec}");
            if !linear {
                nonlinear.push(spec.as_str());
            }
        }
        for spec in ["blockJacobi:inner=CG", "AMG:cycle=K"] {
            assert!(nonlinear.contains(&spec), "{spec}: {nonlinear:?}");
        }
    }
}

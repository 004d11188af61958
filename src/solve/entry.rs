//! The CPU solvers' entry points: check the inputs, build the preconditioner
//! (`precond`), and run PCG (`pcg` over `cpu::CpuBackend`, or Eisenstat's
//! PCG) or GMRES/BiCGStab (`gmres`, `bicgstab` over
//! `krylov::CpuKrylovBackend`).
//!
//! This module sits at the top of `solve`: it imports the solvers and the
//! preconditioners, none of which imports it.

use super::checks::{check_inputs, check_symmetric};
use super::cpu::CpuBackend;
use super::krylov::{CpuKrylovBackend, GmresSettings, KrylovMethod, PreconditioningSide};
use super::pcg::pcg_set_up_on_demand;
use super::smooth_solver::in_ordering;
use super::{
    pcg, EquilibrationKind, LinearOperator, Preconditioner, PreconditionerKind, SolveError,
    SolverControls, SolverPerformance,
};
use crate::sparse::Csr;

/// Solves A x = b on the CPU with PCG and the given preconditioner, from the
/// initial guess in `x`, after checking the inputs (square, symmetric, sizes,
/// finite values). A preconditioner that is not a fixed linear map runs
/// flexible PCG; block Jacobi runs on its block ordering.
pub fn solve_pcg(
    a: &Csr,
    preconditioner: impl Into<Preconditioner>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    solve_pcg_scaled(
        a,
        preconditioner,
        &EquilibrationKind::None,
        b,
        x,
        controls,
        field,
    )
}

/// [`solve_pcg`] on the system equilibrated by `equilibration` (the
/// preconditioner is built on the scaled matrix, in the preconditioner's row
/// order); the convergence test and the reported residuals are those of the
/// original system (`equilibrate`). Flexible PCG where the preconditioner
/// asks for it.
pub fn solve_pcg_scaled(
    a: &Csr,
    preconditioner: impl Into<Preconditioner>,
    equilibration: &EquilibrationKind,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let preconditioner = preconditioner.into();
    check_inputs(a, b, x, controls)?;
    preconditioner.check()?;
    if preconditioner == PreconditionerKind::EisenstatSgs
        && *equilibration == EquilibrationKind::None
    {
        check_symmetric(a)?;
        // Its own symmetric scaling; with an equilibration the SGS
        // preconditioner runs in the PCG loop below (the same iterates).
        return super::eisenstat::solve_eisenstat(a, b, x, controls, field);
    }
    let ordering = preconditioner.ordering(a);
    // Otherwise checked on the split rows below.
    let checked = ordering.is_some() || *equilibration != EquilibrationKind::None;
    if checked {
        check_symmetric(a)?;
    }
    in_ordering(a, ordering, b, x, |ordered, b, x| {
        let Some(eq) = equilibration.build(ordered)? else {
            // The residual and the preconditioner share the backend's split
            // rows; a bitwise symmetric split (every assembled Laplacian)
            // needs no search for the mirrors of the entries.
            let start = CpuBackend::unpreconditioned(ordered);
            if !checked && !start.split().is_symmetric() {
                check_symmetric(a)?;
            }
            let mut x_work = x.to_vec();
            let perf = pcg_set_up_on_demand(
                start,
                |start| {
                    let precond = preconditioner.build_on_split(ordered, start.split())?;
                    Ok(start.preconditioned(precond))
                },
                &b.to_vec(),
                &mut x_work,
                controls,
                field,
            )?;
            x.copy_from_slice(&x_work);
            return Ok(perf);
        };
        let scaled = eq.scale_matrix(ordered);
        let precond = preconditioner.build(&scaled)?;
        let backend = CpuBackend::equilibrated(&scaled, precond.as_ref(), &eq);
        let mut y = eq.to_scaled(x);
        let perf = pcg(&backend, &eq.scale_rhs(b), &mut y, controls, field)?;
        x.copy_from_slice(&eq.to_original(&y));
        Ok(perf)
    })
}

/// Solves A x = b (A square, not necessarily symmetric) on the CPU with
/// `method` and the given preconditioner, from the initial guess in `x`,
/// after checking the inputs (square, sizes, finite values, controls). A
/// preconditioner that is not a fixed linear map (`Preconditioner::is_flexible`)
/// runs flexible GMRES, and is refused by PBiCGStab.
pub fn solve_krylov(
    a: &Csr,
    method: &KrylovMethod,
    preconditioner: impl Into<Preconditioner>,
    b: &[f64],
    x: &mut [f64],
    controls: &super::SolverControls,
    field: &str,
) -> Result<super::SolverPerformance, SolveError> {
    let preconditioner = preconditioner.into();
    check_inputs(a, b, x, controls)?;
    // validate, not check: RAS (not symmetric) is fine here, PCG's check refuses it.
    preconditioner.validate()?;
    // A preconditioner that is not a fixed linear map needs flexible GMRES.
    let method = match (*method, preconditioner.is_flexible()) {
        (KrylovMethod::Gmres(s), true) if !s.flexible => {
            log::info!("{preconditioner} is not a fixed linear map: flexible GMRES");
            KrylovMethod::Gmres(GmresSettings {
                flexible: true,
                side: PreconditioningSide::Right,
                ..s
            })
        }
        (KrylovMethod::BiCgStab, true) => {
            return Err(SolveError::InvalidControls(format!(
                "PBiCGStab needs a fixed preconditioner and {preconditioner} is not a fixed \
                 linear map; use GMRES (it runs flexible) or a fixed preconditioner"
            )))
        }
        (m, _) => m,
    };
    let precond = preconditioner.build(a)?;
    solve_krylov_with(a, &method, precond.as_ref(), b, x, controls, field)
}

/// [`solve_krylov`] with a preconditioner built by the caller (any z = M⁻¹ v,
/// e.g. an ILU factorisation).
pub fn solve_krylov_with(
    a: &Csr,
    method: &KrylovMethod,
    precond: &dyn LinearOperator,
    b: &[f64],
    x: &mut [f64],
    controls: &super::SolverControls,
    field: &str,
) -> Result<super::SolverPerformance, SolveError> {
    check_inputs(a, b, x, controls)?;
    if precond.n() != a.n_rows() {
        return Err(SolveError::SizeMismatch {
            what: "preconditioner",
            expected: a.n_rows(),
            found: precond.n(),
        });
    }
    let backend = CpuKrylovBackend::new(a, precond);
    let mut x_work = x.to_vec();
    let b = b.to_vec();
    let perf = match method {
        KrylovMethod::Gmres(s) => {
            super::gmres::gmres(&backend, &b, &mut x_work, controls, s, field)?
        }
        KrylovMethod::BiCgStab => {
            super::bicgstab::bicgstab(&backend, &b, &mut x_work, controls, field)?
        }
    };
    x.copy_from_slice(&x_work);
    Ok(perf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set-up is skipped when x already meets the tolerance: IC(0) of
    /// this indefinite matrix breaks down, which only a solve that iterates
    /// meets.
    #[test]
    fn a_converged_start_ends_before_the_preconditioner_set_up() {
        let a = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0, 2.0, 2.0, 1.0]).unwrap();
        let b = [3.0, 3.0];
        let controls = SolverControls::absolute(1e-10, 100);
        let mut x = [1.0, 1.0];
        let perf = solve_pcg(&a, PreconditionerKind::Ic0, &b, &mut x, &controls, "T").unwrap();
        assert_eq!((perf.iterations, perf.initial_residual), (0, 0.0));
        assert_eq!(x, [1.0, 1.0]);
        let mut x = [0.0, 0.0];
        let err = solve_pcg(&a, PreconditionerKind::Ic0, &b, &mut x, &controls, "T").unwrap_err();
        assert!(err.to_string().contains("pivot"), "{err}");
    }
}

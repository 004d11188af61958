//! The CPU solvers' entry points: check the inputs, build the preconditioner
//! (`precond`), and run PCG (`pcg` over `cpu::CpuBackend`, or Eisenstat's
//! PCG) or GMRES/BiCGStab (`gmres`, `bicgstab` over
//! `krylov::CpuKrylovBackend`).
//!
//! This module sits at the top of `solve`: it imports the solvers and the
//! preconditioners, none of which imports it.

use super::checks::{check_inputs, check_size, check_symmetric, on_copies};
use super::cpu::CpuBackend;
use super::krylov::{CpuKrylovBackend, GmresSettings, KrylovMethod, PreconditioningSide};
use super::pcg::pcg_set_up_on_demand;
use super::smooth_solver::in_ordering;
use super::split::SplitMatrix;
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
            let start = CpuBackend::unpreconditioned(ordered).named(preconditioner.log_name());
            if !checked && !start.split().is_symmetric() {
                check_symmetric(a)?;
            }
            return on_copies(b, x, |b, x| {
                pcg_set_up_on_demand(
                    start,
                    |start| match preconditioner == PreconditionerKind::Dic {
                        // DIC sweeps the backend's split rows: no copy of them.
                        true => start.dic(),
                        false => Ok(start.preconditioned(preconditioner.build(ordered)?)),
                    },
                    b,
                    x,
                    controls,
                    field,
                )
            });
        };
        let scaled = eq.scale_matrix(ordered);
        let precond = preconditioner.build(&scaled)?;
        let backend = CpuBackend::equilibrated(&scaled, precond.as_ref(), &eq)
            .named(preconditioner.log_name());
        let mut y = eq.to_scaled(x);
        let perf = pcg(&backend, &eq.scale_rhs(b), &mut y, controls, field)?;
        x.copy_from_slice(&eq.to_original(&y));
        Ok(perf)
    })
}

/// [`solve_pcg_scaled`] on a matrix whose values it may take for the time
/// of the solve. PCG with DIC in the matrix's own row order and no
/// equilibration (a CPU run's default) splits the rows, takes the CSR's
/// values out (freed) before PCG's vectors and DIC's factor are made, and
/// writes them back from the split rows at the end
/// ([`SplitMatrix::csr_values`]: the same bits). The initial residual, the
/// product and DIC's sweeps ([`CpuBackend::dic`]) all read the split rows,
/// so while PCG runs the matrix is held in that one layout. Any other
/// solve is [`solve_pcg_scaled`]'s, as is a matrix whose split rows do not
/// mirror each other bit for bit (its symmetry check names the entry).
pub fn solve_pcg_in_place(
    a: &mut Csr,
    preconditioner: impl Into<Preconditioner>,
    equilibration: &EquilibrationKind,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let preconditioner = preconditioner.into();
    if preconditioner != PreconditionerKind::Dic
        || *equilibration != EquilibrationKind::None
        || preconditioner.ordering(a).is_some()
    {
        return solve_pcg_scaled(a, preconditioner, equilibration, b, x, controls, field);
    }
    check_inputs(a, b, x, controls)?;
    preconditioner.check()?;
    let split = SplitMatrix::new(a);
    if !split.is_symmetric() {
        drop(split);
        return solve_pcg_scaled(a, preconditioner, equilibration, b, x, controls, field);
    }
    // Freed before any vector of the solve is made: they take its room.
    drop(a.take_values());
    let solved = on_copies(b, x, |b, x| {
        pcg_set_up_on_demand(
            CpuBackend::on_split(&split).named(preconditioner.log_name()),
            CpuBackend::dic,
            b,
            x,
            controls,
            field,
        )
    });
    a.restore_values(split.csr_values(a));
    solved
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
    // DIC and DILU sweep the rows the backend's product reads: one split
    // of the matrix per solve, and 1/d* besides it.
    if let Preconditioner::Kind(kind @ (PreconditionerKind::Dilu | PreconditionerKind::Dic)) =
        preconditioner
    {
        let start = CpuBackend::unpreconditioned(a).named(preconditioner.log_name());
        let backend = match kind {
            PreconditionerKind::Dilu => start.dilu()?,
            _ => start.dic()?,
        };
        let backend = CpuKrylovBackend::on_backend(backend);
        return krylov_on(&backend, &method, b, x, controls, field);
    }
    let precond = preconditioner.build(a)?;
    let backend = CpuKrylovBackend::new(a, precond.as_ref()).named(preconditioner.log_name());
    krylov_on(&backend, &method, b, x, controls, field)
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
    check_size("preconditioner", a.n_rows(), precond.n())?;
    krylov_on(
        &CpuKrylovBackend::new(a, precond),
        method,
        b,
        x,
        controls,
        field,
    )
}

/// `method` on `backend` (inputs checked).
fn krylov_on(
    backend: &CpuKrylovBackend<'_>,
    method: &KrylovMethod,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    on_copies(b, x, |b, x| match method {
        KrylovMethod::Gmres(s) => super::gmres::gmres(backend, b, x, controls, s, field),
        KrylovMethod::BiCgStab => super::bicgstab::bicgstab(backend, b, x, controls, field),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::bits;

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

    /// PBiCGStab and GMRES with DILU or DIC of the backend's split rows
    /// (what `solve_krylov` runs) take the iterates of the stored
    /// preconditioner's solve, bit for bit.
    #[test]
    fn krylov_with_split_row_factors_has_the_bits_of_the_stored_factors() {
        use crate::solve::ic::Dic;
        use crate::solve::ilu::dilu;
        use crate::sparse::testing::{random_nonsymmetric, random_vector};
        let a = random_nonsymmetric(3000, 7, 21);
        let b = random_vector(3000, 22);
        let controls = SolverControls::absolute(1e-12, 40);
        let gmres = KrylovMethod::Gmres(GmresSettings::default());
        for method in [KrylovMethod::BiCgStab, gmres] {
            let stored: [(PreconditionerKind, Box<dyn LinearOperator>); 2] = [
                (PreconditionerKind::Dilu, Box::new(dilu(&a).unwrap())),
                (PreconditionerKind::Dic, Box::new(Dic::new(&a).unwrap())),
            ];
            for (kind, precond) in stored {
                let mut x_split = vec![0.0; 3000];
                let split = solve_krylov(&a, &method, kind, &b, &mut x_split, &controls, "U");
                let mut x_stored = vec![0.0; 3000];
                let kept = solve_krylov_with(
                    &a,
                    &method,
                    precond.as_ref(),
                    &b,
                    &mut x_stored,
                    &controls,
                    "U",
                );
                let (split, kept) = (split.unwrap(), kept.unwrap());
                assert!(split.iterations > 3, "{method} {kind:?}");
                assert_eq!(split.iterations, kept.iterations, "{method} {kind:?}");
                assert_eq!(
                    bits(&split.history),
                    bits(&kept.history),
                    "{method} {kind:?}"
                );
                assert_eq!(bits(&x_split), bits(&x_stored), "{method} {kind:?}");
            }
        }
    }

    /// PCG-DIC with the matrix's values lent out: the iterates, residuals
    /// and matrix of the solve that keeps them, bit for bit; the values are
    /// back after a solve that iterates, one that does not, and one whose
    /// DIC breaks down.
    #[test]
    fn pcg_dic_in_place_has_the_bits_of_the_solve_that_keeps_the_matrix() {
        let a = crate::sparse::testing::grid_laplacian(18, 17, 16);
        let n = a.n_rows();
        let b: Vec<f64> = (0..n).map(|i| ((i * 29) % 83) as f64 / 5.0 - 8.0).collect();
        let controls = SolverControls::absolute(1e-11, 500);
        let none = EquilibrationKind::None;
        let mut kept_x = vec![0.0; n];
        let kept = solve_pcg(&a, PreconditionerKind::Dic, &b, &mut kept_x, &controls, "T").unwrap();
        let mut lent = a.clone();
        let mut lent_x = vec![0.0; n];
        let dic = PreconditionerKind::Dic;
        let perf = solve_pcg_in_place(&mut lent, dic, &none, &b, &mut lent_x, &controls, "T");
        let perf = perf.unwrap();
        assert!(perf.converged && perf.iterations > 10);
        assert_eq!(perf.iterations, kept.iterations);
        assert_eq!(bits(&perf.history), bits(&kept.history));
        assert_eq!(bits(&lent_x), bits(&kept_x));
        assert_eq!(bits(lent.values()), bits(a.values()));
        // Converged already: no iteration, the values back all the same.
        let perf = solve_pcg_in_place(&mut lent, dic, &none, &b, &mut lent_x, &controls, "T");
        assert_eq!(perf.unwrap().iterations, 0);
        assert_eq!(bits(lent.values()), bits(a.values()));
        // DIC breaks down (a_00 = 0.1 against off-diagonals of −1): the error,
        // and the values back.
        let mut weak = a.clone();
        let slot = weak.slot(0, 0).unwrap();
        weak.values_mut()[slot] = 0.1;
        let expected = bits(weak.values());
        let mut x = vec![0.0; n];
        let err = solve_pcg_in_place(&mut weak, dic, &none, &b, &mut x, &controls, "T");
        let err = err.unwrap_err();
        assert!(
            matches!(err, SolveError::FactorizationBreakdown { .. }),
            "{err}"
        );
        assert_eq!(bits(weak.values()), expected);
    }

    /// A matrix whose triangles are not the same bits is solved (or refused)
    /// as by `solve_pcg_scaled`, with its values untouched.
    #[test]
    fn pcg_dic_in_place_of_a_matrix_not_symmetric_bit_for_bit_is_solve_pcg_scaled() {
        let mut a = crate::sparse::testing::grid_laplacian(6, 5, 4);
        let n = a.n_rows();
        let slot = a.slot(1, 0).unwrap();
        a.values_mut()[slot] *= 1.0 + 1e-15;
        let b = vec![1.0; n];
        let controls = SolverControls::absolute(1e-10, 200);
        let none = EquilibrationKind::None;
        let (mut x1, mut x2) = (vec![0.0; n], vec![0.0; n]);
        let expected = solve_pcg(&a, PreconditionerKind::Dic, &b, &mut x1, &controls, "T");
        let values = bits(a.values());
        let dic = PreconditionerKind::Dic;
        let got = solve_pcg_in_place(&mut a, dic, &none, &b, &mut x2, &controls, "T");
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
        assert_eq!(bits(&x2), bits(&x1));
        assert_eq!(bits(a.values()), values);
    }
}

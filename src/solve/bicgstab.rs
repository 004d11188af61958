//! BiCGStab (van der Vorst 1992) as OpenFOAM's `PBiCGStab` (v1912
//! `PBiCGStab.C`), written once over the fused steps of [`KrylovBackend`]:
//! right preconditioning, OpenFOAM's normalised residual (Σ|r| / normFactor,
//! as PCG's), the half-step test on s = r − α A y (x += α y and return when it
//! converges), and OpenFOAM's `tolerance`, `relTol`, `maxIter`, `minIter`.
//!
//! Where OpenFOAM's `checkSingularity` silently stops the loop (|r0 · r| or
//! |ω| below 1e-300), this returns [`SolveError::KrylovBreakdown`] unless the
//! residual is already zero, where the loop stops as OpenFOAM's does and the
//! log line reads "solution singularity" (a zero component of U on the first
//! step of a cavity with `tolerance 0`); a NaN anywhere becomes an error too.

use super::krylov::KrylovBackend;
use super::pcg::{check_divergence, check_residual, initial_residual, record, solver_name};
use super::{SolveError, SolverControls, SolverPerformance};

/// OpenFOAM's `VSMALL`, its `checkSingularity` threshold.
pub const VSMALL: f64 = 1e-300;

/// Solves A x = b by PBiCGStab from the initial guess in `x`. `field` names
/// the unknown in the log line.
pub fn bicgstab<B: KrylovBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    const NAME: &str = "PBiCGStab";
    controls.validate()?;
    let (mut r, mut perf, run) = initial_residual(backend, b, x, controls)?;
    if let Some((_, rule)) = run {
        let (initial, nf) = (rule.initial, rule.norm_factor);
        let [mut r0, mut p, mut v, mut y, mut s, mut z, mut t] =
            std::array::from_fn(|_| backend.new_vector());
        backend.scale(1.0, &r, &mut r0);
        let mut rho = backend.dot(&r0, &r);
        let (mut rho_old, mut alpha, mut omega): (f64, f64, f64) = (0.0, 0.0, 0.0);
        let mut last = initial;
        let mut best = initial;
        let mut iterations = 0;
        let breakdown = |quantity, iteration, value| SolveError::KrylovBreakdown {
            method: NAME,
            quantity,
            iteration,
            value,
        };
        loop {
            let it = iterations + 1;
            backend.device_status()?;
            if rho.is_nan() || rho.abs() < VSMALL {
                if last == 0.0 {
                    perf.singular = true;
                    break;
                }
                return Err(breakdown("r0 · r", it, rho));
            }
            if iterations == 0 {
                backend.bicg_direction(0.0, 0.0, &r, &v, &mut p);
            } else {
                if omega.is_nan() || omega.abs() < VSMALL {
                    return Err(breakdown("omega", it, omega));
                }
                let beta = (rho / rho_old) * (alpha / omega);
                backend.bicg_direction(beta, omega, &r, &v, &mut p);
            }
            backend.precondition(&p, &mut y);
            let (r0_v, _) = backend.apply_operator(&y, &mut v, Some(&r0));
            backend.device_status()?;
            if !(r0_v.is_finite() && r0_v != 0.0) {
                return Err(breakdown("r0 · A M⁻¹ p", it, r0_v));
            }
            alpha = rho / r0_v;
            let s_sum = backend.bicg_half(alpha, &r, &v, &mut s);
            let half = s_sum / nf;
            check_residual(half, it)?;
            if controls.converged(initial, half) && it >= controls.min_iter {
                backend.axpy_dot(alpha, &y, x, None);
                record(&mut perf, controls, initial, it, half);
                break;
            }
            backend.precondition(&s, &mut z);
            let (t_s, t_t) = backend.apply_operator(&z, &mut t, Some(&s));
            backend.device_status()?;
            if !(t_t.is_finite() && t_t > 0.0) {
                if s_sum == 0.0 {
                    backend.axpy_dot(alpha, &y, x, None);
                    record(&mut perf, controls, initial, it, half);
                    break;
                }
                return Err(breakdown("t · t", it, t_t));
            }
            omega = t_s / t_t;
            rho_old = rho;
            let (r_sum, rho_next) =
                backend.bicg_update(alpha, omega, &y, &z, &s, &t, &r0, x, &mut r);
            rho = rho_next;
            let residual = r_sum / nf;
            check_residual(residual, it)?;
            log::debug!("{NAME}: {field} iteration {it}, residual = {residual:e}");
            record(&mut perf, controls, initial, it, residual);
            check_divergence(residual, it, &mut best)?;
            last = residual;
            iterations = it;
            if (perf.converged || it >= controls.max_iter) && it >= controls.min_iter {
                break;
            }
        }
    }
    backend.device_status()?;
    let solver = solver_name(backend.preconditioner_name(), NAME);
    perf.log(&solver, "iterations", field, controls);
    Ok(perf)
}

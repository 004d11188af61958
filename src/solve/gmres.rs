//! Restarted GMRES(m) (Saad & Schultz 1986; Yang 2015, §2.3, Algorithm 6 with
//! the errata of §8), written once over the fused steps of
//! [`KrylovBackend`]: Arnoldi with modified Gram–Schmidt or CGS2, Givens
//! rotations on the host, left or right preconditioning, and flexible GMRES
//! (Saad 1993), which stores z_j = M⁻¹ v_j so that the preconditioner may
//! change from one application to the next.
//!
//! **Residuals.** GMRES minimises a 2-norm: ‖M⁻¹ r‖₂ (left) or ‖r‖₂ (right,
//! flexible). To report it on OpenFOAM's scale, the initial residual is
//! OpenFOAM's (Σ|b − A x| / normFactor, as PCG's) and every later one is that
//! number times the reduction of the minimised norm, ‖r̃_k‖₂ / ‖r̃_0‖₂, read
//! from the Givens rotations after each Arnoldi step (|γ_{j+1}|). At the end of
//! each restart cycle the residual is recomputed from x (one SpMV) and
//! replaces the cycle's last estimate, so the final residual is never an
//! estimate. The history is monotone (non-increasing up to round-off): GMRES
//! minimises over a growing space within a cycle and restarts from the
//! minimiser. `tolerance`, `relTol`, `maxIter` and `minIter` act on these
//! numbers; iterations are Arnoldi steps (Yang 2015 counts restart cycles,
//! logged at debug level).

use super::krylov::{GmresSettings, KrylovBackend, Orthogonalization, PreconditioningSide};
use super::pcg::{check_residual, initial_residual, record, solver_name};
use super::{SolveError, SolverControls, SolverPerformance};

/// Solves A x = b by GMRES(m) from the initial guess in `x`. `field` names
/// the unknown in the log line.
pub fn gmres<B: KrylovBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    settings: &GmresSettings,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    controls.validate()?;
    settings.validate().map_err(SolveError::InvalidControls)?;
    let m = settings.restart;
    let left = settings.side == PreconditioningSide::Left;
    let (mut r, mut perf, run) = initial_residual(backend, b, x, controls)?;
    let solver = solver_name(backend.preconditioner_name(), "GMRES");
    let Some((limit, rule)) = run.filter(|(_, rule)| rule.initial != 0.0) else {
        perf.log(&solver, "iterations", field, controls);
        return Ok(perf);
    };
    let initial = rule.initial;
    let mut basis: Vec<B::Vector> = (0..=m).map(|_| backend.new_vector()).collect();
    let mut zs: Vec<B::Vector> = if settings.flexible {
        (0..m).map(|_| backend.new_vector()).collect()
    } else {
        Vec::new()
    };
    let (mut w, mut t) = (backend.new_vector(), backend.new_vector());
    let rr = backend.dot(&r, &r);
    let mut beta = start_cycle(backend, left, rr, &r, &mut t, &mut basis[0]);
    backend.device_status()?;
    if !(beta.is_finite() && beta > 0.0) {
        return Err(SolveError::KrylovBreakdown {
            method: "GMRES",
            quantity: if left {
                "‖M⁻¹ r0‖₂"
            } else {
                "‖r0‖₂"
            },
            iteration: 0,
            value: beta,
        });
    }
    // Minimised 2-norm → OpenFOAM-normalised residual.
    let to_residual = initial / beta;
    let (mut iterations, mut cycles) = (0, 0);
    loop {
        cycles += 1;
        // Column j of the Hessenberg matrix, rotated into R as it comes.
        let mut h = vec![vec![0.0; m + 1]; m];
        let (mut cs, mut sn) = (vec![0.0; m], vec![0.0; m]);
        let mut g = vec![0.0; m + 1];
        g[0] = beta;
        let mut k = 0;
        let mut stop = false;
        for j in 0..m {
            // w = M⁻¹ A v_j (left) or A M⁻¹ v_j (right; z_j kept when flexible).
            if left {
                backend.apply_operator(&basis[j], &mut t, None);
                backend.precondition(&t, &mut w);
            } else {
                let z = if settings.flexible {
                    &mut zs[j]
                } else {
                    &mut t
                };
                backend.precondition(&basis[j], z);
                backend.apply_operator(z, &mut w, None);
            }
            let col = &mut h[j];
            let ww = orthogonalize(
                backend,
                settings.orthogonalization,
                &basis[..=j],
                &mut w,
                col,
            );
            backend.device_status()?;
            iterations += 1;
            let h_next = ww.max(0.0).sqrt();
            col[j + 1] = h_next;
            for i in 0..j {
                let (a, c) = (col[i], col[i + 1]);
                col[i] = cs[i] * a + sn[i] * c;
                col[i + 1] = -sn[i] * a + cs[i] * c;
            }
            let (a, c) = (col[j], col[j + 1]);
            let denom = a.hypot(c);
            if !(denom.is_finite() && denom > 0.0) {
                return Err(SolveError::KrylovBreakdown {
                    method: "GMRES",
                    quantity: "‖A v‖₂ (Hessenberg column)",
                    iteration: iterations,
                    value: denom,
                });
            }
            cs[j] = a / denom;
            sn[j] = c / denom;
            col[j] = denom;
            col[j + 1] = 0.0;
            g[j + 1] = -sn[j] * g[j];
            g[j] *= cs[j];
            let residual = g[j + 1].abs() * to_residual;
            check_residual(residual, iterations)?;
            record(&mut perf, controls, initial, iterations, residual);
            log::debug!("GMRES: {field} iteration {iterations}, residual = {residual:e}");
            k = j + 1;
            // h_{j+1,j} = 0: the Krylov space is invariant and the least-squares
            // solution exact (the "lucky" breakdown).
            let lucky = h_next == 0.0 || residual == 0.0;
            let finished = (perf.converged || iterations >= controls.max_iter)
                && iterations >= controls.min_iter;
            if lucky || finished || iterations >= limit {
                stop = true;
                break;
            }
            if j + 1 < m {
                backend.scale(1.0 / h_next, &w, &mut basis[j + 1]);
            }
        }
        let y = back_substitute(&h, &g, k);
        let vs: Vec<&B::Vector> = basis[..k].iter().collect();
        if left {
            backend.multi_axpy(&y, &vs, x);
        } else if settings.flexible {
            let zs: Vec<&B::Vector> = zs[..k].iter().collect();
            backend.multi_axpy(&y, &zs, x);
        } else {
            // x += M⁻¹ (V y).
            backend.scale(0.0, &r, &mut t);
            backend.multi_axpy(&y, &vs, &mut t);
            backend.precondition(&t, &mut w);
            backend.axpy_dot(1.0, &w, x, None);
        }
        // The true residual of the new x replaces the cycle's last estimate.
        let (_, rr) = backend.residual(b, x, &mut r);
        beta = start_cycle(backend, left, rr, &r, &mut t, &mut basis[0]);
        backend.device_status()?;
        let residual = beta * to_residual;
        check_residual(residual, iterations)?;
        perf.history.pop();
        record(&mut perf, controls, initial, iterations, residual);
        log::debug!(
            "GMRES: {field} restart cycle {cycles} ends at iteration {iterations}, residual = \
             {residual:e}"
        );
        let finished =
            (perf.converged || iterations >= controls.max_iter) && iterations >= controls.min_iter;
        if beta == 0.0 || (stop && (finished || iterations >= limit)) {
            break;
        }
    }
    log::debug!("GMRES: {field} {cycles} restart cycles");
    perf.log(&solver, "iterations", field, controls);
    Ok(perf)
}

/// v0 = r̃ / ‖r̃‖₂ with r̃ = M⁻¹ r (left, through `t`) or r (right, whose
/// r · r is `rr`); returns ‖r̃‖₂ (v0 untouched when it is 0).
fn start_cycle<B: KrylovBackend>(
    backend: &B,
    left: bool,
    rr: f64,
    r: &B::Vector,
    t: &mut B::Vector,
    v0: &mut B::Vector,
) -> f64 {
    let (beta, source) = if left {
        backend.precondition(r, t);
        (backend.dot(t, t).max(0.0).sqrt(), &*t)
    } else {
        (rr.max(0.0).sqrt(), r)
    };
    if beta > 0.0 && beta.is_finite() {
        backend.scale(1.0 / beta, source, v0);
    }
    beta
}

/// Orthogonalises w against `vs` (orthonormal), writing the coefficients
/// into `col[..vs.len()]`; returns w · w after.
fn orthogonalize<B: KrylovBackend>(
    backend: &B,
    kind: Orthogonalization,
    vs: &[B::Vector],
    w: &mut B::Vector,
    col: &mut [f64],
) -> f64 {
    let j = vs.len();
    match kind {
        Orthogonalization::Mgs => {
            // Each axpy returns the next dot (the last one w · w).
            let mut d = backend.dot(w, &vs[0]);
            for i in 0..j {
                col[i] = d;
                d = backend.axpy_dot(-d, &vs[i], w, vs.get(i + 1));
            }
            d
        }
        Orthogonalization::Cgs2 => {
            let refs: Vec<&B::Vector> = vs.iter().collect();
            let mut ww = 0.0;
            col[..j].fill(0.0);
            for _ in 0..2 {
                let h = backend.multi_dot(&refs, w);
                let minus: Vec<f64> = h.iter().map(|v| -v).collect();
                ww = backend.multi_axpy(&minus, &refs, w);
                for (c, h) in col.iter_mut().zip(&h) {
                    *c += h;
                }
            }
            ww
        }
    }
}

/// y = R⁻¹ g over the first k rows (R upper triangular, column j in h[j]).
fn back_substitute(h: &[Vec<f64>], g: &[f64], k: usize) -> Vec<f64> {
    let mut y = vec![0.0; k];
    for i in (0..k).rev() {
        let mut s = g[i];
        for j in i + 1..k {
            s -= h[j][i] * y[j];
        }
        y[i] = s / h[i][i];
    }
    y
}

//! Distributed PCG (`solve::distributed`) over in-process thread ranks
//! (`parallel::threads`) against the serial solve (`solve_pcg`) on real
//! meshes and a random SPD matrix: the same solution to solver tolerance for
//! 1 to 4 ranks, and with Jacobi (the same preconditioner on any rank count)
//! the same iterations up to round-off. Block-Jacobi AMG (GAMG in a
//! distributed run) and subdomain deflation (one vector per rank) against
//! the serial answer, with their iteration counts printed.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::parallel::threads::{run_threads, run_threads_within};
use fvpoisson::parallel::{gather_global, Communicator, SingleProcess};
use fvpoisson::solve::amg::{solve_amg, AmgSettings};
use fvpoisson::solve::distributed::{solve_pcg_distributed, Deflation, RankColumns, RankDeflation};
use fvpoisson::solve::{solve_pcg, Preconditioner, PreconditionerKind, SolveError, SolverControls};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::{random_symmetric, random_vector};
use fvpoisson::sparse::Csr;
use std::time::Duration;

/// Solves on `ranks` thread ranks (METIS) and returns (global x, iterations)
/// as every rank sees it (all ranks must agree bit for bit).
fn distributed(
    a: &Csr,
    b: &[f64],
    ranks: usize,
    precond: PreconditionerKind,
    controls: &SolverControls,
) -> (Vec<f64>, usize) {
    distributed_with(a, b, ranks, precond.into(), Deflation::None, controls)
}

/// [`distributed`] with any block preconditioner and a coarse space.
fn distributed_with(
    a: &Csr,
    b: &[f64],
    ranks: usize,
    precond: Preconditioner,
    deflation: Deflation,
    controls: &SolverControls,
) -> (Vec<f64>, usize) {
    let d = Decomposition::metis(a, ranks).unwrap();
    let results = run_threads(ranks, |comm| {
        let local = d.local(a, comm.rank()).unwrap();
        let bl = local.scatter(b);
        let mut xl = vec![0.0; local.n_owned];
        let perf = solve_pcg_distributed(
            &local, comm, precond, deflation, &bl, &mut xl, controls, "p",
        )
        .unwrap();
        assert!(
            perf.converged,
            "{ranks} ranks, {precond}, deflation {deflation}: {perf:?}"
        );
        (gather_global(comm, &local, &xl), perf.iterations)
    });
    for r in &results[1..] {
        assert_eq!(r.1, results[0].1, "ranks disagree on the iterations");
        assert!(
            r.0.iter()
                .zip(&results[0].0)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "ranks disagree on x"
        );
    }
    results.into_iter().next().unwrap()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn distributed_pcg_matches_the_serial_solve_on_meshes_and_a_random_matrix() {
    let controls = SolverControls::absolute(1e-10, 5000);
    let mut systems: Vec<(String, Csr, Vec<f64>)> = ["box:12x10x8", "box:10x10x10:tet:perturb=0.2"]
        .iter()
        .map(|spec| {
            let (a, b) = poisson_system(spec).unwrap();
            (spec.to_string(), a, b)
        })
        .collect();
    let r = random_symmetric(800, 7, 3);
    let b = random_vector(800, 4);
    systems.push(("random SPD".into(), r, b));
    for (name, a, b) in &systems {
        for precond in [
            PreconditionerKind::Jacobi,
            PreconditionerKind::Dic,
            PreconditionerKind::Ic0,
        ] {
            let mut serial = vec![0.0; a.n_rows()];
            let perf = solve_pcg(a, precond, b, &mut serial, &controls, "p").unwrap();
            let scale = serial.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for ranks in 1..=4 {
                let (x, iterations) = distributed(a, b, ranks, precond, &controls);
                let diff = max_diff(&x, &serial);
                println!(
                    "{name} | {precond} | {ranks} ranks | {iterations} iterations (serial {}) | \
                     max |x - x_serial| / max |x| = {:.1e}",
                    perf.iterations,
                    diff / scale
                );
                assert!(
                    diff <= 1e-6 * scale,
                    "{name}, {precond}, {ranks} ranks: {diff}"
                );
                if precond == PreconditionerKind::Jacobi || ranks == 1 {
                    // The same preconditioner: the same iterations up to
                    // round-off in the last one.
                    assert!(
                        iterations.abs_diff(perf.iterations) <= 1,
                        "{name}, {precond}, {ranks} ranks: {iterations} vs {}",
                        perf.iterations
                    );
                }
            }
        }
    }
}

/// The test systems: a hex box, a perturbed tet box.
fn meshes() -> Vec<(&'static str, Csr, Vec<f64>)> {
    ["box:12x10x8", "box:10x10x10:tet:perturb=0.2"]
        .into_iter()
        .map(|spec| {
            let (a, b) = poisson_system(spec).unwrap();
            (spec, a, b)
        })
        .collect()
}

fn max_abs(x: &[f64]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

#[test]
fn block_jacobi_amg_on_ranks_gives_the_serial_gamg_answer() {
    // GAMG in a distributed run: PCG with one AMG cycle of each rank's owned
    // block (the CPU AMG) as block-Jacobi preconditioner.
    let controls = SolverControls::absolute(1e-10, 2000);
    let amg = Preconditioner::Amg(AmgSettings::default());
    for (name, a, b) in meshes() {
        let mut serial = vec![0.0; a.n_rows()];
        let gamg = solve_amg(&a, &AmgSettings::default(), &b, &mut serial, &controls, "p").unwrap();
        assert!(gamg.converged, "{name}: serial GAMG {gamg:?}");
        let mut pcg_amg = vec![0.0; a.n_rows()];
        let serial_pcg = solve_pcg(&a, amg, &b, &mut pcg_amg, &controls, "p").unwrap();
        let scale = max_abs(&serial);
        let mut counts = Vec::new();
        for ranks in 1..=4 {
            let (x, iterations) = distributed_with(&a, &b, ranks, amg, Deflation::None, &controls);
            let diff = max_diff(&x, &serial);
            println!(
                "{name} | block AMG | {ranks} ranks | {iterations} PCG iterations (serial GAMG \
                 {} cycles, serial PCG+AMG {}) | max |x - x_serial| / max |x| = {:.1e}",
                gamg.iterations,
                serial_pcg.iterations,
                diff / scale
            );
            assert!(diff <= 1e-6 * scale, "{name}, {ranks} ranks: {diff}");
            counts.push(iterations);
        }
        // One rank is the serial PCG with AMG.
        assert!(
            counts[0].abs_diff(serial_pcg.iterations) <= 1,
            "{name}: {counts:?} vs {}",
            serial_pcg.iterations
        );
    }
}

#[test]
fn subdomain_deflation_gives_the_serial_answer_in_fewer_iterations() {
    let controls = SolverControls::absolute(1e-10, 5000);
    for (name, a, b) in meshes() {
        let mut serial = vec![0.0; a.n_rows()];
        solve_pcg(&a, PreconditionerKind::Dic, &b, &mut serial, &controls, "p").unwrap();
        let scale = max_abs(&serial);
        for precond in [
            Preconditioner::from(PreconditionerKind::Dic),
            Preconditioner::from(PreconditionerKind::Jacobi),
            Preconditioner::Amg(AmgSettings::default()),
        ] {
            for ranks in [1, 2, 4] {
                let (x0, plain) =
                    distributed_with(&a, &b, ranks, precond, Deflation::None, &controls);
                let (x1, deflated) =
                    distributed_with(&a, &b, ranks, precond, Deflation::Subdomains, &controls);
                let (d0, d1) = (max_diff(&x0, &serial), max_diff(&x1, &serial));
                println!(
                    "{name} | {precond} | {ranks} ranks | block Jacobi {plain} iterations, \
                     + subdomain deflation {deflated} | max |x - x_serial| / max |x| = \
                     {:.1e}, {:.1e}",
                    d0 / scale,
                    d1 / scale
                );
                assert!(d1 <= 1e-6 * scale, "{name}, {precond}, {ranks} ranks: {d1}");
                if ranks == 4 {
                    assert!(
                        deflated < plain,
                        "{name}, {precond}, 4 ranks: deflated {deflated} vs {plain}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_ranks_coarse_matrix_is_z_transpose_a_z_of_the_whole_matrix() {
    // E summed over the ranks against ZᵀAZ of the global matrix (every entry
    // a_ij added to E[owner(i)][owner(j)]), on meshes and a random matrix.
    let mut systems: Vec<Csr> = meshes().into_iter().map(|(_, a, _)| a).collect();
    systems.push(random_symmetric(500, 6, 11));
    for a in &systems {
        for ranks in [1, 3, 4] {
            let d = Decomposition::metis(a, ranks).unwrap();
            let owner = d.owners();
            let mut expected = vec![0.0; ranks * ranks];
            for i in 0..a.n_rows() {
                let (cols, vals) = a.row(i);
                for (&j, &v) in cols.iter().zip(vals) {
                    expected[owner[i] as usize * ranks + owner[j as usize] as usize] += v;
                }
            }
            let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let found = run_threads(ranks, |comm| {
                let local = d.local(a, comm.rank()).unwrap();
                let e = RankDeflation::new(&local, comm).unwrap();
                e.coarse_matrix()
                    .transpose()
                    .iter()
                    .copied()
                    .collect::<Vec<f64>>()
            });
            for e in &found {
                assert_eq!(e, &found[0], "ranks disagree on E");
            }
            let diff = max_diff(&found[0], &expected);
            assert!(diff <= 1e-12 * scale, "{ranks} ranks: E differs by {diff}");
        }
    }
}

/// AZ of a rank's rows (`RankColumns`, what the CPU and the GPU ranks both
/// deflate with): the rank's own column first, each coupled rank once (the
/// rank or a neighbour), and the row's entries summed per owner: Σ_q (AZ)_iq
/// is row i's sum and (AZ)_iq the sum over q's columns, on meshes split in 3
/// and 4.
#[test]
fn rank_columns_sum_each_row_by_the_owners_of_its_columns() {
    for (name, a, _) in meshes() {
        for ranks in [3, 4] {
            let d = Decomposition::metis(&a, ranks).unwrap();
            let owner = d.owners();
            for rank in 0..ranks {
                let local = d.local(&a, rank).unwrap();
                let columns = RankColumns::of(&local);
                assert_eq!(columns.rank(), rank);
                assert_eq!(columns.n_rows(), local.n_owned);
                let mut widest = 0;
                for i in 0..local.n_owned {
                    let row = columns.row(i);
                    widest = widest.max(row.len());
                    assert_eq!(row[0].0, rank, "{name}: own column first");
                    let (cols, vals) = a.row(local.global[i] as usize);
                    let mut expected = vec![0.0; ranks];
                    for (&j, &v) in cols.iter().zip(vals) {
                        expected[owner[j as usize] as usize] += v;
                    }
                    for (q, &sum) in expected.iter().enumerate() {
                        let found: Vec<f64> =
                            row.iter().filter(|e| e.0 == q).map(|e| e.1).collect();
                        assert!(found.len() <= 1, "{name}: rank {q} twice in row {i}");
                        let value = found.first().copied().unwrap_or(0.0);
                        let scale = vals.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                        assert!(
                            (value - sum).abs() <= 1e-14 * scale,
                            "{name}, {ranks} ranks, rank {rank}, row {i}, column {q}: \
                             {value} vs {sum}"
                        );
                        if q != rank && !found.is_empty() {
                            assert!(local.neighbours.iter().any(|nb| nb.rank == q));
                        }
                    }
                }
                assert_eq!(columns.width(), widest);
                assert!(widest <= 1 + local.neighbours.len());
            }
        }
    }
}

#[test]
fn one_rank_through_the_single_process_communicator_is_the_serial_solve() {
    let (a, b) = poisson_system("box:9x7x5").unwrap();
    let controls = SolverControls::absolute(1e-9, 1000);
    let mut serial = vec![0.0; a.n_rows()];
    let perf = solve_pcg(&a, PreconditionerKind::Dic, &b, &mut serial, &controls, "p").unwrap();
    let d = Decomposition::metis(&a, 1).unwrap();
    let local = d.local(&a, 0).unwrap();
    let mut x = vec![0.0; a.n_rows()];
    let bl = local.scatter(&b);
    let p = solve_pcg_distributed(
        &local,
        &SingleProcess,
        PreconditionerKind::Dic,
        Deflation::None,
        &bl,
        &mut x,
        &controls,
        "p",
    )
    .unwrap();
    assert_eq!(p.iterations, perf.iterations);
    let x = gather_global(&SingleProcess, &local, &x);
    assert!(max_diff(&x, &serial) <= 1e-12 * serial.iter().fold(1.0f64, |m, v| m.max(v.abs())));
}

#[test]
fn a_failure_on_one_rank_is_an_error_on_every_rank() {
    // Rank 1's block gets a NaN right-hand side, or a negative diagonal entry
    // (its DIC factorization breaks down): every rank returns an error naming
    // rank 1 and its message instead of waiting for it in a reduction.
    let a = std::sync::Arc::new(random_symmetric(200, 5, 9));
    let b = std::sync::Arc::new(random_vector(200, 1));
    let d = std::sync::Arc::new(Decomposition::metis(&a, 3).unwrap());
    for (nan_b, precond) in [
        (true, PreconditionerKind::Jacobi),
        (false, PreconditionerKind::Dic),
    ] {
        let (a, b, d) = (a.clone(), b.clone(), d.clone());
        let errors = run_threads_within(3, Duration::from_secs(20), move |comm| {
            let mut local = d.local(&a, comm.rank()).unwrap();
            let mut bl = local.scatter(&b);
            if comm.rank() == 1 {
                if nan_b {
                    bl[0] = f64::NAN;
                } else {
                    let (cols, _) = local.matrix.row(0);
                    let slot = cols.iter().position(|&c| c == 0).unwrap();
                    let start = local.matrix.row_ptr()[0];
                    local.matrix.values_mut()[start + slot] = -1.0;
                }
            }
            let mut xl = vec![0.0; local.n_owned];
            solve_pcg_distributed(
                &local,
                comm,
                precond,
                Deflation::None,
                &bl,
                &mut xl,
                &SolverControls::default(),
                "p",
            )
            .unwrap_err()
        })
        .unwrap();
        if nan_b {
            assert!(
                matches!(errors[1], SolveError::NonFinite { .. }),
                "{:?}",
                errors[1]
            );
        }
        for e in [&errors[0], &errors[2]] {
            assert!(e.to_string().contains("rank 1 could not set up"), "{e}");
            // Rank 1's own message reaches the others.
            assert!(e.to_string().contains(&errors[1].to_string()), "{e}");
        }
    }
}

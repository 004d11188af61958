//! DIC's sweeps run by levels (`solve::levels`) on two threads give the bits
//! of the sequential sweeps on one: the preconditioned vector z = M⁻¹ r, r · z,
//! and PCG-DIC's solution and residual history, on a hex box, a perturbed
//! tet box and a random SPD pattern.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::solve::ic::Dic;
use fvpoisson::solve::{pcg, CpuBackend, LinearOperator, SolverControls};
use fvpoisson::sparse::testing::{random_symmetric, random_vector};
use fvpoisson::sparse::Csr;

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|v| v.to_bits()).collect()
}

/// z, r · z, x and the residual history of 30 PCG-DIC iterations from x = 0
/// on `threads` threads, and whether the sweeps ran by levels.
fn run(a: &Csr, b: &[f64], threads: usize) -> (Vec<u64>, u64, Vec<u64>, Vec<u64>, bool) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        // Levels of any width are run by levels: the test's systems are small.
        let dic = Dic::new(a).unwrap().with_min_level_width(0);
        let n = a.n_rows();
        let (mut z, mut z_dot) = (vec![0.0; n], vec![0.0; n]);
        dic.apply(b, &mut z);
        let r_z = dic.apply_dot(b, &mut z_dot);
        assert_eq!(bits(&z), bits(&z_dot), "{threads} threads: z of apply_dot");
        let controls = SolverControls {
            tolerance: 0.0,
            rel_tol: 0.0,
            max_iter: 30,
            min_iter: 0,
        };
        let mut x = vec![0.0; n];
        let perf = pcg(
            &CpuBackend::new(a, &dic),
            &b.to_vec(),
            &mut x,
            &controls,
            "p",
        )
        .unwrap();
        assert_eq!(perf.iterations, 30);
        (
            bits(&z),
            r_z.to_bits(),
            bits(&x),
            bits(&perf.history),
            dic.runs_by_levels(),
        )
    })
}

fn assert_same_bits(name: &str, a: &Csr, b: &[f64]) {
    let one = run(a, b, 1);
    let two = run(a, b, 2);
    assert!(!one.4, "{name}: one thread keeps the sequential sweeps");
    assert!(two.4, "{name}: two threads run by levels");
    assert!(one.0 == two.0, "{name}: z differs");
    assert!(one.1 == two.1, "{name}: r · z differs");
    assert!(one.2 == two.2, "{name}: x differs");
    assert!(one.3 == two.3, "{name}: residual history differs");
}

#[test]
fn hex_box_sweeps_by_levels_have_the_sequential_bits() {
    // 64 000 rows, levels of up to 1 200 rows: the parallel chunks run.
    let (a, b) = poisson_system("box:40x40x40").unwrap();
    assert_same_bits("hex box", &a, &b);
}

#[test]
fn perturbed_tet_box_sweeps_by_levels_have_the_sequential_bits() {
    let (a, b) = poisson_system("box:12x12x12:tet:perturb=0.2:renumber").unwrap();
    assert_same_bits("tet box", &a, &b);
}

#[test]
fn random_spd_sweeps_by_levels_have_the_sequential_bits() {
    // Columns far from the diagonal and uneven rows.
    let a = random_symmetric(20_000, 6, 5);
    let b = random_vector(a.n_rows(), 9);
    assert_same_bits("random SPD", &a, &b);
}

#[test]
fn narrow_levels_keep_the_sequential_sweeps() {
    let (a, _) = poisson_system("box:8x8x8").unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    // 512 rows in 22 levels: narrower than the default width.
    assert!(!pool.install(|| Dic::new(&a).unwrap().runs_by_levels()));
}

//! PCG against OpenFOAM v1912 itself: laplacianFoam's one steady solve of T on a
//! 16x8x4 blockMesh of the unit cube (tests/data/openfoam_pcg_16x8x4, made by its
//! make_reference.sh). Cell sizes are powers of two, so the FV matrix below is
//! exact in binary and equal to OpenFOAM's; iteration counts, residuals
//! (OpenFOAM's normalised L1 definition) and the solution must match bit for bit.

use fvpoisson::solve::{solve_pcg, PreconditionerKind, SolverControls};
use fvpoisson::sparse::Csr;

const DIR: &str = "tests/data/openfoam_pcg_16x8x4";
const N: [usize; 3] = [16, 8, 4];

/// −∇·∇T on the uniform mesh, cells numbered x fastest (blockMesh order).
/// Face coefficient = |S_f| / |d|; fixedValue walls (left T = 1, right T = 0,
/// bottom y = 0 T = 0.25) add |S_f| / (h/2) to the diagonal and that times T_b
/// to the source; the other walls are zeroGradient.
fn laplacian_system() -> (Csr, Vec<f64>) {
    let h = N.map(|n| 1.0 / n as f64);
    let area = [h[1] * h[2], h[0] * h[2], h[0] * h[1]];
    let coeff: [f64; 3] = std::array::from_fn(|d| area[d] / h[d]);
    let n_cells = N.iter().product();
    let stride = [1, N[0], N[0] * N[1]];
    let (mut triplets, mut b) = (Vec::new(), vec![0.0; n_cells]);
    for (cell, source) in b.iter_mut().enumerate() {
        let ijk: [usize; 3] = std::array::from_fn(|d| (cell / stride[d]) % N[d]);
        let mut diag = 0.0;
        for d in 0..3 {
            for (neighbour_exists, offset) in [(ijk[d] > 0, -1isize), (ijk[d] + 1 < N[d], 1)] {
                if neighbour_exists {
                    let other = (cell as isize + offset * stride[d] as isize) as u32;
                    triplets.push((cell as u32, other, -coeff[d]));
                    diag += coeff[d];
                }
            }
        }
        let wall = |value: f64, d: usize| (2.0 * area[d] / h[d], value);
        let mut walls = Vec::new();
        if ijk[0] == 0 {
            walls.push(wall(1.0, 0));
        }
        if ijk[0] + 1 == N[0] {
            walls.push(wall(0.0, 0));
        }
        if ijk[1] == 0 {
            walls.push(wall(0.25, 1));
        }
        for (c, value) in walls {
            diag += c;
            *source += c * value;
        }
        triplets.push((cell as u32, cell as u32, diag));
    }
    (Csr::from_triplets(n_cells, n_cells, triplets).unwrap(), b)
}

/// (final residual, iterations) from OpenFOAM's solver line.
fn openfoam_log(precond: &str) -> (f64, usize) {
    let text = std::fs::read_to_string(format!("{DIR}/log.{precond}")).unwrap();
    let field = |key: &str| {
        let rest = &text[text.find(key).unwrap() + key.len()..];
        rest.split([',', '\n']).next().unwrap().trim().to_string()
    };
    assert_eq!(field("Initial residual = "), "1");
    (
        field("Final residual = ").parse().unwrap(),
        field("No Iterations ").parse().unwrap(),
    )
}

/// The internalField list of an ascii volScalarField.
fn openfoam_field(precond: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(format!("{DIR}/T.{precond}")).unwrap();
    let list = &text[text.find("internalField").unwrap()..];
    let open = list.find('(').unwrap();
    let close = list.find(')').unwrap();
    list[open + 1..close]
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn pcg_matches_openfoam_iterations_residuals_and_solution() {
    let (a, b) = laplacian_system();
    let controls = SolverControls {
        tolerance: 1e-10,
        ..Default::default()
    };
    for (precond, kind) in [
        ("DIC", PreconditionerKind::Dic),
        ("diagonal", PreconditionerKind::Jacobi),
        ("none", PreconditionerKind::None),
    ] {
        let mut x = vec![0.0; b.len()];
        let perf = solve_pcg(&a, kind, &b, &mut x, &controls, "T").unwrap();
        let (final_residual, iterations) = openfoam_log(precond);
        assert_eq!(perf.initial_residual, 1.0, "{precond}");
        assert_eq!(perf.iterations, iterations, "{precond}");
        // Same operation order as OpenFOAM (Amul/sumA diagonal first, DIC
        // face-order sweeps, reciprocal diagonal, sequential reductions since
        // n <= reduce::CHUNK): the same bits, not just close.
        assert_eq!(perf.final_residual, final_residual, "{precond}");
        let reference = openfoam_field(precond);
        assert_eq!(reference.len(), x.len());
        for (cell, (x, reference)) in x.iter().zip(&reference).enumerate() {
            assert_eq!(x, reference, "{precond}: cell {cell}");
        }
    }
}

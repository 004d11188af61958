//! ILU(k), DILU and Schwarz on the CPU (`solve::ilu`, `sparse::fill`,
//! `solve::schwarz`) against closed forms: exact LU where ILU(0) drops
//! nothing, the fill counts of the 7-point grid, OpenFOAM's DILU formula, RAS
//! with one sub-domain, zero pivots.

use fvpoisson::solve::ilu::{dilu, Ilu};
use fvpoisson::solve::schwarz::{Decomposition, Schwarz, SchwarzKind, SchwarzSettings};
use fvpoisson::solve::{LinearOperator, Preconditioner, PreconditionerKind, SolveError};
use fvpoisson::sparse::fill::ilu_pattern;
use fvpoisson::sparse::levels::LevelSchedule;
use fvpoisson::sparse::testing::{
    dense, grid_laplacian, random_nonsymmetric, random_symmetric, random_vector,
};
use fvpoisson::sparse::Csr;

/// A nonsymmetric, diagonally dominant tridiagonal matrix: sub −1 − 0.02 i,
/// diagonal 4, super −2.
fn tridiagonal(n: usize) -> Csr {
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i > 0 {
            cols.push(i as u32 - 1);
            vals.push(-1.0 - 0.02 * i as f64);
        }
        cols.push(i as u32);
        vals.push(4.0);
        if i + 1 < n {
            cols.push(i as u32 + 1);
            vals.push(-2.0);
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, row_ptr, cols, vals).unwrap()
}

#[test]
fn ilu0_of_a_tridiagonal_matrix_is_its_exact_lu() {
    let n = 40;
    let a = tridiagonal(n);
    let ilu = Ilu::new(&a, 0).unwrap();
    assert_eq!(ilu.n_fill(), 0);
    // Doolittle by hand: u_0 = a_00; l_i = a_{i,i-1} / u_{i-1};
    // u_i = a_ii − l_i a_{i-1,i}; the super-diagonal of U is A's.
    let f = ilu.factors();
    let mut u_prev = 4.0;
    assert_eq!(f.values()[f.slot(0, 0).unwrap()], u_prev);
    for i in 1..n {
        let l = (-1.0 - 0.02 * i as f64) / u_prev;
        let u = 4.0 - l * -2.0;
        assert_eq!(f.values()[f.slot(i, i - 1).unwrap()], l, "l row {i}");
        assert_eq!(f.values()[f.slot(i, i).unwrap()], u, "u row {i}");
        assert_eq!(f.values()[f.slot(i - 1, i).unwrap()], -2.0);
        u_prev = u;
    }
    // And M = A: the application solves A z = r.
    let r = random_vector(n, 4);
    let mut z = vec![0.0; n];
    ilu.apply(&r, &mut z);
    let az = dense(&a) * nalgebra::DVector::from_column_slice(&z);
    for i in 0..n {
        assert!(
            (az[i] - r[i]).abs() < 1e-13,
            "row {i}: {} vs {}",
            az[i],
            r[i]
        );
    }
}

#[test]
fn iluk_fill_counts_on_the_seven_point_grid() {
    let (nx, ny, nz) = (7, 6, 5);
    let a = grid_laplacian(nx, ny, nz);
    let n = nx * ny * nz;
    assert_eq!(a.nnz(), 7 * n - 2 * (nx * ny + ny * nz + nx * nz));
    let f0 = ilu_pattern(&a, 0).unwrap();
    assert_eq!(f0.n_fill(), 0);
    // ILU(1): eliminating a lower neighbour fills the six "diagonal"
    // neighbours i ± (dx − dy) style: per pair of axes two fills, where both
    // steps stay inside the grid.
    let f1 = ilu_pattern(&a, 1).unwrap();
    let expected =
        2 * ((nx - 1) * (ny - 1) * nz + (nx - 1) * ny * (nz - 1) + nx * (ny - 1) * (nz - 1));
    assert_eq!(f1.n_fill(), expected);
    assert_eq!(f1.per_level(), vec![a.nnz(), expected]);
    // Level 2 adds more (k grows the pattern monotonically).
    let f2 = ilu_pattern(&a, 2).unwrap();
    assert!(f2.n_fill() > f1.n_fill());
    for i in 0..n {
        for &c in f1.matrix.row(i).0 {
            assert!(
                f2.matrix.slot(i, c as usize).is_some(),
                "({i},{c}) lost at k = 2"
            );
        }
    }
    // Natural order: the ILU(0) sweeps have nx + ny + nz − 2 wavefront levels.
    let ilu0 = Ilu::new(&a, 0).unwrap();
    assert_eq!(ilu0.levels(), (nx + ny + nz - 2, nx + ny + nz - 2));
    let ilu1 = Ilu::new(&a, 1).unwrap();
    let (fw1, _) = ilu1.levels();
    assert!(fw1 >= nx + ny + nz - 2, "ILU(1) {fw1} levels");
    // 2-D: ILU(1) of the 5-point stencil fills two diagonals.
    let a2 = grid_laplacian(9, 8, 1);
    assert_eq!(ilu_pattern(&a2, 1).unwrap().n_fill(), 2 * 8 * 7);
}

#[test]
fn iluk_equals_ilu0_of_the_padded_pattern_and_inverts_its_product() {
    // ILU(k) keeps A's entries of L U equal to A's on its pattern.
    let a = random_nonsymmetric(400, 6, 21);
    for k in [0, 1, 2] {
        let ilu = Ilu::new(&a, k).unwrap();
        let f = ilu.factors();
        let n = a.n_rows();
        let mut l = nalgebra::DMatrix::<f64>::identity(n, n);
        let mut u = nalgebra::DMatrix::<f64>::zeros(n, n);
        for i in 0..n {
            let (cols, vals) = f.row(i);
            for (&c, &v) in cols.iter().zip(vals) {
                if (c as usize) < i {
                    l[(i, c as usize)] = v;
                } else {
                    u[(i, c as usize)] = v;
                }
            }
        }
        let lu = &l * &u;
        let full = dense(&a);
        for i in 0..n {
            for &c in f.row(i).0 {
                let c = c as usize;
                assert!(
                    (lu[(i, c)] - full[(i, c)]).abs() < 1e-12,
                    "k = {k}: (LU)({i},{c}) = {} but A = {}",
                    lu[(i, c)],
                    full[(i, c)]
                );
            }
        }
        let r = random_vector(n, 5);
        let mut z = vec![0.0; n];
        ilu.apply(&r, &mut z);
        let mz = &lu * nalgebra::DVector::from_column_slice(&z);
        for i in 0..n {
            assert!((mz[i] - r[i]).abs() < 1e-12, "k = {k}: row {i}");
        }
    }
}

#[test]
fn dilu_follows_openfoams_formula() {
    let a = random_nonsymmetric(300, 6, 8);
    let m = dilu(&a).unwrap();
    // rD_j = a_jj − Σ_{i<j} a_ij a_ji rD_i⁻¹, in OpenFOAM's face order
    // (owner i ascending, then neighbour), written out from dense A.
    let full = dense(&a);
    let n = a.n_rows();
    let mut d: Vec<f64> = (0..n).map(|i| full[(i, i)]).collect();
    for i in 0..n {
        for j in i + 1..n {
            if a.slot(i, j).is_some() {
                d[j] -= full[(i, j)] * full[(j, i)] / d[i];
            }
        }
    }
    let expected: Vec<f64> = d.iter().map(|d| 1.0 / d).collect();
    assert_eq!(m.reciprocal_diagonal(), &expected[..]);
    // M = (D + L) D⁻¹ (D + U).
    let dm = nalgebra::DMatrix::from_diagonal(&nalgebra::DVector::from_column_slice(&d));
    let lower = full.lower_triangle() - nalgebra::DMatrix::from_diagonal(&full.diagonal());
    let upper = full.upper_triangle() - nalgebra::DMatrix::from_diagonal(&full.diagonal());
    let mmat = (&dm + lower) * dm.clone().try_inverse().unwrap() * (&dm + upper);
    let r = random_vector(n, 9);
    let mut z = vec![0.0; n];
    m.apply(&r, &mut z);
    let mz = mmat * nalgebra::DVector::from_column_slice(&z);
    for i in 0..n {
        assert!((mz[i] - r[i]).abs() < 1e-12, "row {i}");
    }
    // By name, and equal to DIC on a symmetric matrix.
    let s = random_symmetric(200, 6, 3);
    let by_name = PreconditionerKind::Dilu.build(&s).unwrap();
    let dic = PreconditionerKind::Dic.build(&s).unwrap();
    let r = random_vector(200, 1);
    let (mut z1, mut z2) = (vec![0.0; 200], vec![0.0; 200]);
    by_name.apply(&r, &mut z1);
    dic.apply(&r, &mut z2);
    assert_eq!(z1, z2);
}

#[test]
fn ras_with_one_subdomain_is_ilu() {
    let a = random_nonsymmetric(500, 6, 13);
    for k in [0, 1] {
        let settings = SchwarzSettings {
            subdomains: 1,
            fill_level: k,
            ..SchwarzSettings::new(SchwarzKind::Restricted)
        };
        let ras = Schwarz::new(&a, &settings).unwrap();
        let ilu = Ilu::new(&a, k).unwrap();
        assert_eq!(ras.ilu().unwrap().factors(), ilu.factors());
        let r = random_vector(500, 2);
        let (mut z1, mut z2) = (vec![0.0; 500], vec![0.0; 500]);
        ras.apply(&r, &mut z1);
        ilu.apply(&r, &mut z2);
        assert_eq!(z1, z2, "k = {k}");
    }
}

#[test]
fn schwarz_blocks_cover_every_row_once_and_nesting_widens_levels() {
    let a = grid_laplacian(16, 16, 16);
    let n = a.n_rows();
    let ilu = Ilu::new(&a, 0).unwrap();
    let mut last_levels = ilu.levels().0;
    for (subdomains, nested) in [(8, 1), (8, 8)] {
        for overlap in [0, 1, 2] {
            let s = SchwarzSettings {
                subdomains,
                overlap,
                nested,
                ..SchwarzSettings::new(SchwarzKind::Restricted)
            };
            let d = Decomposition::new(&a, &s).unwrap();
            let mut owners = vec![0; n];
            let mut holders = vec![0; n];
            for (&g, &own) in d.gather.iter().zip(&d.owned) {
                holders[g as usize] += 1;
                owners[g as usize] += own as usize;
            }
            assert!(
                owners.iter().all(|&o| o == 1),
                "{s}: a row owned twice or never"
            );
            assert!(holders.iter().all(|&h| h >= 1));
            if overlap == 0 && nested == 1 {
                assert_eq!(d.gather.len(), n);
            } else if overlap > 0 {
                assert!(d.gather.len() > n, "{s}: overlap adds rows");
            }
            // Every block's matrix is A's principal submatrix.
            for c in 0..d.gather.len() {
                let (cols, vals) = d.matrix.row(c);
                for (&k, &v) in cols.iter().zip(vals) {
                    let (gi, gk) = (d.gather[c] as usize, d.gather[k as usize] as usize);
                    assert_eq!(a.values()[a.slot(gi, gk).unwrap()], v);
                }
            }
        }
        let s = SchwarzSettings {
            subdomains,
            nested,
            ..SchwarzSettings::new(SchwarzKind::Restricted)
        };
        let levels = Schwarz::new(&a, &s).unwrap().levels().0;
        println!("{s}: {levels} forward levels");
        assert!(
            levels < last_levels,
            "{s}: {levels} levels, not below {last_levels}"
        );
        last_levels = levels;
    }
}

#[test]
fn additive_schwarz_is_symmetric_and_ras_is_refused_by_pcg() {
    let a = random_symmetric(600, 6, 4);
    let s = SchwarzSettings {
        subdomains: 6,
        overlap: 1,
        ..SchwarzSettings::new(SchwarzKind::Additive)
    };
    let m = Schwarz::new(&a, &s).unwrap();
    let (x, y) = (random_vector(600, 1), random_vector(600, 2));
    let (mut mx, mut my) = (vec![0.0; 600], vec![0.0; 600]);
    m.apply(&x, &mut mx);
    m.apply(&y, &mut my);
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    let (ymx, xmy) = (dot(&y, &mx), dot(&x, &my));
    assert!(
        (ymx - xmy).abs() < 1e-12 * ymx.abs().max(1.0),
        "{ymx} vs {xmy}"
    );
    let ras: Preconditioner = "ras:subdomains=6:overlap=1".parse().unwrap();
    assert!(ras
        .check()
        .unwrap_err()
        .to_string()
        .contains("not symmetric"));
    let asp: Preconditioner = "as:subdomains=6:overlap=1".parse().unwrap();
    assert!(asp.check().is_ok());
    assert_eq!("ilu1".parse::<Preconditioner>(), Ok(Preconditioner::Ilu(1)));
    assert_eq!(
        "iluk:3".parse::<Preconditioner>(),
        Ok(Preconditioner::Ilu(3))
    );
    assert!("iluk:x".parse::<Preconditioner>().is_err());
    assert!("ilu99"
        .parse::<Preconditioner>()
        .unwrap_err()
        .contains("too high"));
}

#[test]
fn zero_pivots_are_errors_naming_the_row() {
    // Row 2's pivot cancels: u_22 = a_22 − (a_21 / u_11) a_12 = 1 − 1 = 0.
    let a = Csr::new(
        3,
        vec![0, 1, 3, 5],
        vec![0, 1, 2, 1, 2],
        vec![1.0, 1.0, 1.0, 1.0, 1.0],
    )
    .unwrap();
    let err = Ilu::new(&a, 0).unwrap_err();
    assert!(matches!(err, SolveError::ZeroPivot { row: 2, .. }), "{err}");
    assert!(err.to_string().contains("row 2"), "{err}");
    // A missing diagonal is a zero pivot in that row.
    let b = Csr::new(2, vec![0, 1, 2], vec![0, 0], vec![2.0, 1.0]).unwrap();
    let err = Ilu::new(&b, 0).unwrap_err();
    assert!(matches!(err, SolveError::ZeroPivot { row: 1, .. }), "{err}");
    // DILU: d_1 = 1 − 1·1/1 = 0.
    let c = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0, 1.0, 1.0, 1.0]).unwrap();
    let err = dilu(&c).err().unwrap();
    assert!(matches!(err, SolveError::ZeroPivot { row: 1, .. }), "{err}");
}

#[test]
fn reorderings_change_the_level_counts() {
    // Natural, RCM and greedy multicolour orders of a 3-D grid.
    let a = grid_laplacian(12, 12, 12);
    let natural = LevelSchedule::lower(&a).n_levels();
    let rcm = fvpoisson::sparse::ordering::reverse_cuthill_mckee(&a).apply_symmetric(&a);
    let colouring = fvpoisson::solve::colouring::Colouring::greedy(&a);
    let (by_colour, _) = colouring.contiguous();
    let coloured = by_colour.apply_symmetric(&a);
    let (rcm_levels, colour_levels) = (
        LevelSchedule::lower(&rcm).n_levels(),
        LevelSchedule::lower(&coloured).n_levels(),
    );
    println!("levels: natural {natural}, RCM {rcm_levels}, multicolour {colour_levels}");
    assert_eq!(natural, 34);
    assert_eq!(colour_levels, colouring.n_colours());
    assert!(colour_levels < rcm_levels);
}

/// Convection–diffusion on a tet box (swirling upwind flow, cell Péclet
/// number above 2: far from symmetric).
fn convection_diffusion_system(spec: &str) -> (Csr, Vec<f64>) {
    use fvpoisson::fvm::convection::{convection_diffusion, swirl};
    let mesh = fvpoisson::mesh::source::load(spec).unwrap();
    let geometry = mesh.geometry().unwrap();
    convection_diffusion(&mesh, &geometry, 0.002, swirl(1.0)).unwrap()
}

#[test]
fn gmres_and_bicgstab_with_ilu_and_ras_beat_jacobi_on_convection_diffusion() {
    use fvpoisson::solve::krylov::{solve_krylov, GmresSettings, KrylovMethod};
    use fvpoisson::solve::SolverControls;
    let (a, b) = convection_diffusion_system("box:12x12x12:tet:perturb=0.2");
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.0,
        max_iter: 3000,
        ..SolverControls::default()
    };
    for method in [
        KrylovMethod::Gmres(GmresSettings::default()),
        KrylovMethod::BiCgStab,
    ] {
        let mut iterations = Vec::new();
        for p in [
            "jacobi",
            "dilu",
            "ilu0",
            "ilu1",
            "ras:subdomains=8:overlap=1",
            "ras:subdomains=4:nested=8",
        ] {
            let p: Preconditioner = p.parse().unwrap();
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_krylov(&a, &method, p, &b, &mut x, &controls, "U").unwrap();
            println!("{method} {p}: {} iterations", perf.iterations);
            assert!(perf.converged, "{method} {p}");
            // The true residual is small too.
            let mut ax = vec![0.0; a.n_rows()];
            a.spmv(&x, &mut ax);
            let res: f64 = ax.iter().zip(&b).map(|(p, q)| (p - q).abs()).sum();
            let scale: f64 = b.iter().map(|v| v.abs()).sum();
            assert!(res < 1e-6 * scale, "{method} {p}: |b - Ax| = {res}");
            iterations.push(perf.iterations);
        }
        let jacobi = iterations[0];
        assert!(
            iterations[1..].iter().all(|&i| i < jacobi),
            "{method}: {iterations:?}"
        );
        // ILU(1) no worse than ILU(0).
        assert!(iterations[3] <= iterations[2], "{method}: {iterations:?}");
    }
}

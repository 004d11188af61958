//! `fvpoisson solve-matrix` end to end on committed Matrix Market files.

mod common;
use common::fvpoisson;

use std::path::Path;

use fvpoisson::sparse::mtx::{read_matrix, read_vector};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const MATRIX: &str = "tests/data/poisson2d_4x4.mtx";

/// `solve-matrix MATRIX --precond PRECOND --tol 1e-12`, which must succeed:
/// its stdout and stderr.
fn solve_to_1e12(precond: &str) -> (String, String) {
    let out = fvpoisson(&[
        "solve-matrix",
        MATRIX,
        "--precond",
        precond,
        "--tol",
        "1e-12",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{precond}: {stdout}\n{stderr}");
    (stdout, stderr)
}

/// The `max |x - 1| = E` that `solve-matrix` prints.
fn max_error(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("max |x - 1| = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no error line in {stdout}"))
}

#[test]
fn solves_with_ones_as_exact_solution() {
    let plain = ["none", "jacobi", "dic", "ic0", "sgs", "neu1", "neu2"].map(|p| (p, "none"));
    let equilibrated = [
        ("none", "jacobi"),
        ("none", "ruiz"),
        ("dic", "ruiz:norm=2:tol=1e-8"),
    ];
    for (precond, equilibration) in plain.into_iter().chain(equilibrated) {
        let out = fvpoisson(&[
            "solve-matrix",
            MATRIX,
            "--precond",
            precond,
            "--equilibration",
            equilibration,
            "--tol",
            "1e-12",
        ]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{precond} {equilibration}: {stdout}\n{stderr}"
        );
        assert!(
            stdout.contains(&format!("preconditioner {precond}, equilibration ")),
            "{stdout}"
        );
        assert!(
            stderr.contains("PCG:  Solving for x, Initial residual = 1, Final residual = "),
            "{stderr}"
        );
        let error = max_error(&stdout);
        assert!(error < 1e-10, "{precond} {equilibration}: {error}");
    }
}

#[test]
fn solves_given_rhs_and_writes_solution() {
    let out_path = common::unique_temp_dir("cli_solve_matrix_x").with_extension("mtx");
    let rhs = "tests/data/poisson2d_4x4_rhs.mtx";
    let out = fvpoisson(&[
        "solve-matrix",
        MATRIX,
        "--rhs",
        rhs,
        "--tol",
        "1e-12",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("max |x - 1|"));
    // Check A x = b independently of the solver.
    let a = read_matrix(Path::new(MATRIX)).unwrap();
    let b = read_vector(Path::new(rhs)).unwrap();
    let x = read_vector(&out_path).unwrap();
    std::fs::remove_file(&out_path).unwrap();
    let mut ax = vec![0.0; b.len()];
    a.spmv(&x, &mut ax);
    for (i, (ax, b)) in ax.iter().zip(&b).enumerate() {
        assert!((ax - b).abs() < 1e-10 * b.abs(), "row {i}: {ax} vs {b}");
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    let out = fvpoisson(&["solve-matrix", "tests/data/missing.mtx"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: tests/data/missing.mtx: "),
        "{}",
        text(&out.stderr)
    );

    // A right-hand side of the wrong length.
    let out = fvpoisson(&["solve-matrix", MATRIX, "--rhs", MATRIX]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("a vector needs one column, this matrix has 16"),
        "{}",
        text(&out.stderr)
    );

    let out = fvpoisson(&["solve-matrix", MATRIX, "--precond", "spai"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unknown preconditioner 'spai'"),
        "{}",
        text(&out.stderr)
    );
    let out = fvpoisson(&["solve-matrix", MATRIX, "--equilibration", "ruiz:tol=x"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bad value 'x' for tol"),
        "{}",
        text(&out.stderr)
    );

    // Not converged within --max-iter: a warning and exit code 1, with a summary line.
    let out = fvpoisson(&[
        "solve-matrix",
        MATRIX,
        "--precond",
        "jacobi",
        "--max-iter",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not converged: 2 iterations (--max-iter)"));
    assert!(text(&out.stdout).contains("converged false"));
    assert!(
        text(&out.stderr).contains("not converged after 2 iterations"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn gpu_options_choose_the_device_and_the_row_ordering() {
    // The ordering only applies on the GPU: on the CPU a warning, same answer.
    let out = fvpoisson(&[
        "solve-matrix",
        MATRIX,
        "--ordering",
        "metis",
        "--tol",
        "1e-12",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--ordering only applies to GPU solves"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("preconditioner dic, equilibration none; CPU"),
        "{}",
        text(&out.stdout)
    );

    let out = fvpoisson(&["solve-matrix", MATRIX, "--ordering", "amd"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown row ordering 'amd' (use natural, cm, rcm or metis)"),
        "{}",
        text(&out.stderr)
    );

    for ordering in ["natural", "cm", "rcm", "metis"] {
        let out = fvpoisson(&[
            "solve-matrix",
            MATRIX,
            "--device",
            "gpu",
            "--ordering",
            ordering,
            "--tol",
            "1e-12",
        ]);
        if fvpoisson::gpu::Gpu::new().is_err() {
            assert_eq!(out.status.code(), Some(2));
            assert!(
                text(&out.stderr).contains("no CUDA device"),
                "{}",
                text(&out.stderr)
            );
            return;
        }
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{ordering}: {}", text(&out.stderr));
        assert!(
            stdout.contains("preconditioner jacobi")
                && stdout.contains("; GPU ")
                && stdout.contains(&format!("{ordering} ordering")),
            "{stdout}"
        );
        let error = max_error(&stdout);
        assert!(error < 1e-10, "{ordering}: {error}");
    }
}

#[test]
fn gmres_and_bicgstab_solve_a_nonsymmetric_matrix() {
    // Upwind convection–diffusion in 1-D: tridiagonal (-2.5, 4, -1), written here.
    let n = 50;
    let mut body = format!(
        "%%MatrixMarket matrix coordinate real general\n{n} {n} {}\n",
        3 * n - 2
    );
    for i in 1..=n {
        if i > 1 {
            body += &format!("{i} {} -2.5\n", i - 1);
        }
        body += &format!("{i} {i} 4\n");
        if i < n {
            body += &format!("{i} {} -1\n", i + 1);
        }
    }
    let path = common::unique_temp_dir("fvpoisson_nonsym").with_extension("mtx");
    std::fs::write(&path, body).unwrap();
    let file = path.to_str().unwrap();
    for (args, log) in [
        (vec!["--solver", "gmres"], "GMRES:  Solving for x"),
        (
            vec![
                "--solver",
                "gmres",
                "--restart",
                "5",
                "--ortho",
                "cgs2",
                "--side",
                "left",
            ],
            "GMRES:  Solving for x",
        ),
        (
            vec!["--solver", "gmres", "--flexible"],
            "GMRES:  Solving for x",
        ),
        (
            vec!["--solver", "bicgstab", "--precond", "none"],
            "PBiCGStab:  Solving for x",
        ),
    ] {
        let mut all = vec!["solve-matrix", file, "--tol", "1e-12"];
        all.extend(&args);
        let out = fvpoisson(&all);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(log), "{args:?}: {stderr}");
        let error = max_error(&stdout);
        assert!(error < 1e-9, "{args:?}: {error}");
    }
    // PCG refuses it; GMRES refuses a flexible left side.
    let out = fvpoisson(&["solve-matrix", file]);
    assert!(!out.status.success() && text(&out.stderr).contains("not symmetric"));
    let out = fvpoisson(&[
        "solve-matrix",
        file,
        "--solver",
        "gmres",
        "--side",
        "left",
        "--flexible",
    ]);
    assert!(!out.status.success() && text(&out.stderr).contains("flexible"));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn ilu_dilu_and_schwarz_preconditioners_solve_with_each_method() {
    for (solver, precond) in [
        ("gmres", "ilu0"),
        ("gmres", "iluk:2"),
        ("bicgstab", "dilu"),
        ("bicgstab", "ras:subdomains=2:overlap=1:fill=1"),
        ("gmres", "ras:subdomains=2:nested=2"),
        ("pcg", "as:subdomains=2:overlap=1"),
        ("pcg", "ilu1"),
    ] {
        let out = fvpoisson(&[
            "solve-matrix",
            MATRIX,
            "--solver",
            solver,
            "--precond",
            precond,
            "--tol",
            "1e-12",
        ]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{solver} {precond}: {stdout}\n{stderr}"
        );
        let error = max_error(&stdout);
        assert!(error < 1e-9, "{solver} {precond}: {error}");
    }
    // PCG refuses the nonsymmetric RAS, and a bad fill level is a usage error.
    let out = fvpoisson(&[
        "solve-matrix",
        MATRIX,
        "--precond",
        "ras:subdomains=2:overlap=1",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not symmetric"),
        "{}",
        text(&out.stderr)
    );
    let out = fvpoisson(&["solve-matrix", MATRIX, "--precond", "iluk:x"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("fill level"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn fsai_from_the_command_line() {
    for precond in [
        "fsai",
        "fsai:steps=5,epsilon=0.001",
        "fsai:pattern=static:power=2",
    ] {
        let (stdout, _) = solve_to_1e12(precond);
        assert!(stdout.contains("preconditioner FSAI ("), "{stdout}");
        let error = max_error(&stdout);
        assert!(error < 1e-10, "{precond}: {error}");
    }
    let out = fvpoisson(&["solve-matrix", MATRIX, "--precond", "fsai:steps=40"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("steps * stepSize must be at most 31"),
        "{stderr}"
    );
}

#[test]
fn precision_and_block_jacobi_from_the_command_line() {
    // On the CPU mixed precision runs in f64 (the f32 sweeps are the GPU's).
    for (precond, shown) in [
        ("dic:precision=mixed", "preconditioner dic:precision=mixed,"),
        ("ic0:precision=mixed", "preconditioner ic0:precision=mixed,"),
        ("dic:precision=double", "preconditioner dic,"),
        (
            "block-jacobi:inner=CG:innerMaxIter=20:blockSize=32:precision=mixed",
            "blockJacobi (inner CG, tolerance 1e-08, at most 20 steps, 32-row blocks, \
             synchronous, mixed precision)",
        ),
        (
            "block-jacobi:inner=symGaussSeidel:innerMaxIter=2:innerTolerance=0:blockSize=32",
            "blockJacobi (inner symGaussSeidel, tolerance 0, at most 2 steps, 32-row blocks, \
             synchronous)",
        ),
    ] {
        let (stdout, _) = solve_to_1e12(precond);
        assert!(stdout.contains(shown), "{precond}: {stdout}");
        let error = max_error(&stdout);
        assert!(error < 1e-10, "{precond}: {error}");
    }
    for (precond, expected) in [
        ("dic:precision=half", "unknown precision 'half'"),
        ("block-jacobi:inner=GaussSeidel", "not symmetric"),
    ] {
        let out = fvpoisson(&["solve-matrix", MATRIX, "--precond", precond]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{precond}");
        assert!(stderr.contains(expected), "{precond}: {stderr}");
    }
}

#[test]
fn eisenstat_sgs_from_the_command_line() {
    // The same iterations and solution as sgs (SGS-PCG by Eisenstat's trick).
    let run = |precond: &str| {
        let (stdout, stderr) = solve_to_1e12(precond);
        let iterations = stdout
            .lines()
            .find_map(|l| l.strip_prefix("iterations "))
            .and_then(|l| l.split(',').next())
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no iteration line in {stdout}"));
        (iterations, stderr)
    };
    let (eisenstat, log) = run("eisenstatSGS");
    assert!(log.contains("PCG (Eisenstat SGS):  Solving for x"), "{log}");
    assert_eq!(eisenstat, run("sgs").0);
}

/// PCG on an indefinite system stops where r·z or p·Ap is exactly zero,
/// short of its tolerance and of `--max-iter`: exit code 1 with that reason,
/// not the iteration limit's message.
#[test]
fn a_stop_short_of_max_iter_is_named_as_a_breakdown() {
    let dir = common::unique_temp_dir("solve_matrix_indefinite");
    std::fs::create_dir_all(&dir).unwrap();
    let matrix = dir.join("indefinite.mtx");
    std::fs::write(
        &matrix,
        "%%MatrixMarket matrix coordinate real symmetric\n4 4 7\n1 1 1.0\n2 1 2.0\n2 2 1.0\n\
         3 3 1.0\n4 3 2.0\n4 4 1.0\n3 2 0.5\n",
    )
    .unwrap();
    let out = fvpoisson(&[
        "solve-matrix",
        matrix.to_str().unwrap(),
        "--precond",
        "blockJacobi",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("r·z or p·Ap exactly zero"), "{stderr}");
    assert!(!stderr.contains("--max-iter"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

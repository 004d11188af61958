//! Hostile input and failing runs, through the binary as a user meets them:
//! every case ends within seconds with exit code 2 and one `error:` naming
//! the entry, file or limit at fault (never a panic, an abort or a hang);
//! a run that does not converge ends with exit code 1 and a summary line.

mod common;
use common::{edit, Scratch};

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped laplacianFoam case (240 cells, residualControl 1e-7) copied to `dir/case`.
fn steady_case(dir: &Path) -> PathBuf {
    let case = dir.join("case");
    common::copy_case_inputs(&common::repo("cases/laplacian_foam_steady"), &case);
    case
}

/// Runs the binary with `args`, killed after `limit`: (exit code, stderr
/// and stdout), the time it took. The pipes are drained while it runs.
fn run_within(args: &[&str], limit: Duration) -> (Option<i32>, String, Duration) {
    run_env_within(args, &[], limit)
}

/// [`run_within`] with the environment variables `env` set.
fn run_env_within(
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, String, Duration) {
    let clock = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if clock.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!("{}{}", stderr.join().unwrap(), stdout.join().unwrap());
    let Some(status) = status else {
        panic!("{args:?} still running after {limit:?}:\n{}", shown(&text));
    };
    (status.code(), text, clock.elapsed())
}

/// At most the first 2000 characters of `text`, for assertion messages.
fn shown(text: &str) -> &str {
    text.char_indices()
        .nth(2000)
        .map_or(text, |(end, _)| &text[..end])
}

/// `args` must fail with exit code 2 within 20 s, with an error that contains `want`.
fn refused(args: &[&str], want: &str) -> String {
    let (code, text, _) = run_within(args, Duration::from_secs(20));
    let show = shown(&text);
    assert_eq!(code, Some(2), "{args:?}:\n{show}");
    assert!(text.contains("error: "), "{args:?}:\n{show}");
    assert!(
        text.contains(want),
        "{args:?}: '{want}' missing from:\n{show}"
    );
    assert!(!text.contains("panicked"), "{args:?}:\n{show}");
    text
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn counts_from_input_are_checked_before_allocating() {
    let dir = Scratch::new("counts");
    let case = steady_case(&dir);
    let solution = case.join("system/fvSolution");
    // 56 GB of solver records, then a capacity overflow, before the limit.
    for n in ["1000000000", "9223372036854775807"] {
        let text = fs::read_to_string(&solution).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("nNonOrthogonalCorrectors"))
            .unwrap();
        fs::write(
            &solution,
            text.replace(line, &format!("    nNonOrthogonalCorrectors {n};")),
        )
        .unwrap();
        let msg = refused(&["run", arg(&case)], "fvSolution");
        assert!(
            msg.contains(&format!(
                "nNonOrthogonalCorrectors {n} is more than the 1000 allowed"
            )),
            "{msg}"
        );
    }
    edit(
        &solution,
        "nNonOrthogonalCorrectors 9223372036854775807;",
        "nNonOrthogonalCorrectors 0;",
    );
    edit(
        &solution,
        "relTol          0;",
        "relTol 0; maxIter 1000000000000;",
    );
    refused(
        &["run", arg(&case)],
        "maxIter 1000000000000 is more than the 10000000 allowed",
    );
}

/// The preconditioner study refuses an iteration limit no solve takes and
/// more subdomains than rows or than its dense coarse matrix holds, before
/// any solve.
#[test]
fn the_preconditioner_study_checks_its_limits() {
    let dir = Scratch::new("study_limits");
    let case = steady_case(&dir);
    refused(
        &["preconditioners", arg(&case), "--max-iter", "1000000000000"],
        "maxIter 1000000000000 is more than the 10000000 allowed",
    );
    for k in ["0", "100000000"] {
        refused(
            &["preconditioners", arg(&case), "--subdomains", k],
            &format!("--subdomains {k}: expected 1 to"),
        );
    }
}

/// A transient case's deltaT that makes more steps than any run takes (a
/// typo) is refused before the mesh is read, naming controlDict's deltaT;
/// with `adjustTimeStep` deltaT is only the first step's start.
#[test]
fn a_transient_step_count_is_checked_before_the_run() {
    let dir = Scratch::new("transient_steps");
    let case = dir.join("case");
    common::copy_case_inputs(&common::repo("cases/cavity_ico"), &case);
    let control = case.join("system/controlDict");
    edit(
        &control,
        "deltaT          0.005;",
        "deltaT          1e-300;",
    );
    let msg = refused(&["run", "--device", "cpu", arg(&case)], "controlDict");
    assert!(
        msg.contains("deltaT") && msg.contains("more than the 1e+07 allowed"),
        "{msg}"
    );
    // pimpleFoam's adjustable step: maxDeltaT bounds the count from below.
    edit(
        &control,
        "deltaT          1e-300;",
        "deltaT          0.005;",
    );
    let text = fs::read_to_string(&control).unwrap();
    let text = text.replace("application     icoFoam;", "application     pimpleFoam;")
        + "\nadjustTimeStep yes;\nmaxCo 0.5;\nmaxDeltaT 1e-300;\n";
    fs::write(&control, text).unwrap();
    let msg = refused(&["run", "--device", "cpu", arg(&case)], "maxDeltaT");
    assert!(msg.contains("more than the 1e+07 allowed"), "{msg}");
}

#[test]
fn rank_counts_are_checked_before_the_ranks_exist() {
    let dir = Scratch::new("ranks");
    let case = steady_case(&dir);
    refused(&["run", arg(&case), "-np", "0"], "at least 1 rank");
    // n² channels (8 GB at 1000 ranks, the OOM killer at 2000) and a capacity
    // overflow came before the refusal.
    for n in ["1000", "2000", "18446744073709551615"] {
        let (code, text, took) =
            run_within(&["run", arg(&case), "-np", n], Duration::from_secs(20));
        assert_eq!(code, Some(2), "{text}");
        assert!(
            text.contains(&format!("cannot split 240 cells over {n} ranks")),
            "{text}"
        );
        assert!(took < Duration::from_secs(10), "-np {n}: {took:?}");
    }
}

#[test]
fn flow_cases_are_refused_a_distributed_run_by_name() {
    let dir = Scratch::new("flow_ranks");
    for (shipped, application, why) in [
        (
            "cavity_ico",
            "icoFoam",
            "transient cases do not run distributed",
        ),
        (
            "cavity_foam",
            "simpleFoam",
            "flow cases do not run distributed",
        ),
    ] {
        let case = dir.join(shipped);
        common::copy_case_inputs(&common::repo(&format!("cases/{shipped}")), &case);
        let args = ["run", arg(&case), "-np", "2"];
        let text = refused(&args, &format!("application {application}"));
        assert!(text.contains(why), "{}", shown(&text));
    }
}

#[test]
fn matrix_market_size_lines_are_checked_against_the_file() {
    let dir = Scratch::new("mtx");
    let big = dir.join("big.mtx");
    fs::write(
        &big,
        "%%MatrixMarket matrix coordinate real general\n400000000 400000000 1\n1 1 1.0\n",
    )
    .unwrap();
    refused(&["solve-matrix", arg(&big)], "would have no entry");
    fs::write(
        &big,
        "%%MatrixMarket matrix coordinate real general\n3 3 100000000000\n1 1 1.0\n",
    )
    .unwrap();
    refused(
        &["solve-matrix", arg(&big)],
        "big.mtx:3: file ends where an entry",
    );
    // Enough entries for the size line, yet row 2 of the symmetric matrix
    // has none: singular, refused.
    fs::write(
        &big,
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1.0\n3 3 1.0\n",
    )
    .unwrap();
    refused(&["solve-matrix", arg(&big)], "row 2 has no entry");
}

#[test]
fn special_files_are_refused_not_read_forever() {
    let dir = Scratch::new("special");
    let case = steady_case(&dir);
    let points = case.join("constant/polyMesh/points");
    // A FIFO: reading it waited for a writer forever.
    fs::remove_file(&points).unwrap();
    let fifo = Command::new("mkfifo").arg(&points).status();
    if fifo.is_ok_and(|s| s.success()) {
        refused(
            &["check-mesh", arg(&case)],
            "a FIFO (named pipe), not a regular file",
        );
        fs::remove_file(&points).unwrap();
    }
    // A device: /dev/zero never ends.
    std::os::unix::fs::symlink("/dev/zero", &points).unwrap();
    let msg = refused(&["check-mesh", arg(&case)], "a character device");
    assert!(msg.contains("points"), "{msg}");
    fs::remove_file(&points).unwrap();
    // A directory, and a symbolic link loop (was "no such file").
    fs::create_dir(&points).unwrap();
    refused(
        &["check-mesh", arg(&case)],
        "a directory, not a regular file",
    );
    fs::remove_dir(&points).unwrap();
    std::os::unix::fs::symlink(&points, &points).unwrap();
    refused(&["check-mesh", arg(&case)], "symbolic links");
    fs::remove_file(&points).unwrap();
    // Through #include in a dictionary.
    let case = steady_case(&dir.join("include"));
    edit(
        &case.join("system/fvSolution"),
        "solvers",
        "#include \"/dev/zero\"\nsolvers",
    );
    refused(&["run", arg(&case)], "a character device");
    // A blockMeshDict that is no regular file is named as such, not taken
    // for a case without a mesh.
    let case = dir.join("block_mesh");
    common::copy_case_inputs(&common::repo("cases/cavity_ico"), &case);
    let dict = case.join("system/blockMeshDict");
    fs::remove_file(&dict).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &dict).unwrap();
    let msg = refused(&["check-mesh", arg(&case)], "a character device");
    assert!(msg.contains("blockMeshDict"), "{msg}");
}

#[test]
fn long_tokens_are_not_echoed() {
    let dir = Scratch::new("token");
    let case = steady_case(&dir);
    let token = "A".repeat(10_000_000);
    edit(
        &case.join("system/fvSolution"),
        "solver          PCG;",
        &format!("solver {token};"),
    );
    let msg = refused(&["run", arg(&case)], "solver 'AAAA");
    assert!(msg.len() < 20_000, "{} bytes of messages", msg.len());
}

#[test]
fn a_failing_rank_reports_its_own_error() {
    let dir = Scratch::new("rank_fails");
    let case = steady_case(&dir);
    // Rank 1 cannot create its output directory: a file is in the way.
    fs::write(case.join("processor1"), "in the way").unwrap();
    let msg = refused(&["run", arg(&case), "-np", "2"], "processor1");
    assert!(!msg.contains("heard from it"), "{msg}");
}

#[test]
fn exit_codes_tell_whether_runs_converged() {
    let dir = Scratch::new("exit");
    let case = steady_case(&dir);
    let control = case.join("system/controlDict");
    // residualControl 1e-7 not met in 2 iterations: exit code 1, one summary line.
    edit(&control, "endTime         200;", "endTime 2;");
    edit(&control, "writeInterval   200;", "writeInterval 2;");
    let (code, text, _) = run_within(&["run", arg(&case)], Duration::from_secs(60));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("not converged: T: residualControl 1e-07 not reached in 2 iterations"),
        "{text}"
    );
    // Without residualControl a run that ends at endTime is a success, as in OpenFOAM.
    let solution = case.join("system/fvSolution");
    edit(&solution, "T               1e-7;", "");
    let (code, text, _) = run_within(&["run", arg(&case)], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{text}");
    // tolerance 0 with maxIter: OpenFOAM's fixed number of iterations, not a
    // breakdown once the residual underflows.
    edit(
        &solution,
        "tolerance       1e-12;",
        "tolerance 0; maxIter 400;",
    );
    let (code, text, _) = run_within(&["run", arg(&case)], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("not positive definite"), "{text}");

    let matrix = common::repo("tests/data/poisson2d_4x4.mtx");
    let (code, text, _) = run_within(
        &["solve-matrix", arg(&matrix), "--max-iter", "1"],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not converged: 1 iterations"), "{text}");
    let (code, text, _) = run_within(
        &[
            "solve-matrix",
            arg(&matrix),
            "--tol",
            "0",
            "--max-iter",
            "100",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(0), "{text}");
    let (code, text, _) = run_within(&["solve-matrix", arg(&matrix)], Duration::from_secs(20));
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn check_mesh_fails_on_non_finite_geometry_and_counts_regions() {
    let dir = Scratch::new("check");
    let case = steady_case(&dir);
    let (code, text, _) = run_within(&["check-mesh", arg(&case)], Duration::from_secs(20));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("    Number of regions: 1 (OK)."), "{text}");
    // A point far out: areas and volumes overflow (was "Mesh OK.", exit 0).
    let points = case.join("constant/polyMesh/points");
    let text = fs::read_to_string(&points).unwrap();
    let first = text
        .lines()
        .find(|l| l.starts_with('(') && l.len() > 2)
        .unwrap();
    fs::write(&points, text.replacen(first, "(1e300 1e300 1e300)", 1)).unwrap();
    let (code, text, _) = run_within(&["check-mesh", arg(&case)], Duration::from_secs(20));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(" ***Non-finite geometry: 0 points"), "{text}");
    assert!(text.contains("Failed "), "{text}");

    // Two blocks that share no face: checkMesh's warning, not a failure.
    let two = common::repo("tests/data/two_regions");
    let (code, text, _) = run_within(&["check-mesh", arg(&two)], Duration::from_secs(20));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("   *Number of regions: 2\n"), "{text}");
}

#[test]
fn duplicate_patch_names_are_refused() {
    let dir = Scratch::new("patches");
    let case = steady_case(&dir);
    let boundary = case.join("constant/polyMesh/boundary");
    edit(&boundary, "    cold\n", "    hot\n");
    refused(
        &["check-mesh", arg(&case)],
        "patches 0 and 1 are both named 'hot'",
    );
}

/// An all-Neumann problem on a mesh of two disconnected blocks: each block's
/// matrix is singular on its own. Its source sums to zero over the mesh but
/// not over each block (was: "matrix is not positive definite"); with
/// `project` each block's sum is removed and each block's level fixed to
/// zero mean on its own.
#[test]
fn disconnected_all_neumann_regions_get_a_level_each() {
    let dir = Scratch::new("regions");
    let mesh = common::repo("tests/data/two_regions");
    let case = format!(
        "[mesh]\nsource = \"{}\"\n[physics]\nsource = \"x - 1.5 + y\"\n\
         [boundary.default]\ntype = \"zeroGradient\"\n\
         [reference]\ntype = \"zeroMean\"\nproject = true\n\
         [time]\nscheme = \"steadyState\"\n\
         [solver.T]\nsolver = \"PCG\"\npreconditioner = \"DIC\"\ntolerance = 1e-12\n\
         [output]\nformats = []\n",
        mesh.display()
    );
    let file = dir.join("case.toml");
    fs::write(&file, case).unwrap();
    let setup =
        fvpoisson::case::case_toml::parse_case(&fs::read_to_string(&file).unwrap(), &file, &dir)
            .unwrap();
    let summary = fvpoisson::case::run_case(&setup, fvpoisson::case::Device::Cpu).unwrap();
    let loaded = setup.mesh.load().unwrap();
    let geometry = loaded.geometry().unwrap();
    let (n_regions, regions) = fvpoisson::mesh::check::cell_regions(&loaded);
    assert_eq!(n_regions, 2);
    for r in 0..n_regions {
        let cells = (0..loaded.n_cells()).filter(|&c| regions[c] as usize == r);
        let (weighted, volume) = cells.fold((0.0, 0.0), |(w, v), c| {
            let vc = geometry.cell_volumes[c];
            (w + summary.field[c] * vc, v + vc)
        });
        assert!(
            (weighted / volume).abs() < 1e-10,
            "region {r}: mean {}",
            weighted / volume
        );
    }
    assert!(
        summary.field.iter().any(|v| v.abs() > 1e-3),
        "{:?}",
        summary.field
    );
    // Both blocks hold the same problem shifted by x → x + 2, with the source
    // made consistent per block: the same solution in each.
    let mut first: Vec<f64> = (0..loaded.n_cells())
        .filter(|&c| regions[c] == 0)
        .map(|c| summary.field[c])
        .collect();
    let mut second: Vec<f64> = (0..loaded.n_cells())
        .filter(|&c| regions[c] == 1)
        .map(|c| summary.field[c])
        .collect();
    first.sort_by(f64::total_cmp);
    second.sort_by(f64::total_cmp);
    for (a, b) in first.iter().zip(&second) {
        assert!((a - b).abs() < 1e-8, "{first:?} vs {second:?}");
    }
}

/// A run that an MPI launcher started as one of N ranks, where this binary's
/// MPI (none, or another implementation's) cannot join them, refuses instead
/// of running the whole case N times over the same files; `-parallel`
/// without a launcher is refused too.
#[test]
fn runs_started_by_a_foreign_mpi_launcher_are_refused() {
    let dir = Scratch::new("launcher");
    let case = steady_case(&dir);
    // An MPI build (MPICH in CI) reads PMI_SIZE itself: only Open MPI's
    // variable is foreign to it.
    let variables: &[&str] = match cfg!(feature = "mpi") {
        true => &["OMPI_COMM_WORLD_SIZE"],
        false => &["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"],
    };
    for &variable in variables {
        let (code, text, _) = run_env_within(
            &["run", arg(&case)],
            &[(variable, "2")],
            Duration::from_secs(60),
        );
        let show = shown(&text);
        assert_eq!(code, Some(2), "{variable}:\n{show}");
        assert!(text.contains(&format!("2 ranks ({variable})")), "{show}");
        assert!(!text.contains("panicked"), "{show}");
        assert!(
            !case.join("1").exists() && !case.join("VTK").exists(),
            "{variable}: the refused run wrote results"
        );
    }
    refused(
        &["run", arg(&case), "-parallel"],
        "-parallel: start the ranks with mpirun",
    );
}

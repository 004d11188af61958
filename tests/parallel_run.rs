//! Distributed runs of a shipped case through the binary, as a user runs
//! them: `decompose`, `run --ranks N` (thread ranks) or `mpirun -np N fvpoisson
//! run` (cargo feature `mpi`), `reconstruct`, compared with the serial run to
//! solver tolerance.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

mod common;
use common::{fvpoisson, internal_field, max_diff_over_max, NamedScratch};

const CASE: &str = "cases/laplacian_foam_steady";
/// Its last written time and field.
const RESULT: &str = "10/T";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    t
}

/// A fresh copy of the shipped case.
fn case_copy(name: &str) -> NamedScratch {
    shipped_copy(CASE, name)
}

/// A fresh copy of the shipped case `case` in a directory named `name` (the
/// runs' VTK files are named after it).
fn shipped_copy(case: &str, name: &str) -> NamedScratch {
    let dir = NamedScratch::new(name);
    common::copy_case_inputs(&common::repo(case), &dir);
    dir
}

/// The serial run's field (computed once per test binary).
fn serial() -> Vec<f64> {
    static SERIAL: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    SERIAL
        .get_or_init(|| {
            let dir = case_copy("parallel_serial");
            ok(fvpoisson(&[
                "run",
                dir.to_str().unwrap(),
                "--device",
                "cpu",
            ]));
            internal_field(&dir.join(RESULT))
        })
        .clone()
}

/// The reconstructed field of a distributed run equals the serial one to the
/// case's tolerance (1e-12 on OpenFOAM's normalised residual).
fn assert_serial_answer(dir: &Path) {
    let t = ok(fvpoisson(&["reconstruct", dir.to_str().unwrap()]));
    assert!(t.contains("Writing"), "{t}");
    let (x, expected) = (internal_field(&dir.join(RESULT)), serial());
    let rel = max_diff_over_max(&x, &expected);
    println!(
        "{}: max |T - T_serial| / max |T| = {rel:.1e}",
        dir.display()
    );
    assert!(rel <= 1e-9, "{rel}");
}

#[test]
fn decompose_run_on_thread_ranks_and_reconstruct_give_the_serial_answer() {
    for (ranks, method) in [("2", "metis"), ("3", "simple")] {
        let dir = case_copy(&format!("parallel_threads_{ranks}"));
        let d = dir.to_str().unwrap();
        let t = ok(fvpoisson(&[
            "decompose",
            d,
            "-n",
            ranks,
            "--method",
            method,
        ]));
        assert!(t.contains(&format!("over {ranks} ranks ({method})")), "{t}");
        let addressing = dir.join("processor1/constant/polyMesh/cellProcAddressing");
        assert!(std::fs::read_to_string(addressing)
            .unwrap()
            .contains("class       labelList"));
        let t = ok(fvpoisson(&["run", d, "-np", ranks]));
        // Rank 0 logs the residual lines once, as the serial run does.
        assert_eq!(t.matches("SIMPLE solution converged").count(), 1, "{t}");
        assert!(t.contains("PCG:  Solving for T, Initial residual"), "{t}");
        assert!(t.contains(&format!("Decomposition: {d}")), "{t}");
        for rank in 0..ranks.parse().unwrap() {
            assert!(dir.join(format!("processor{rank}")).join(RESULT).exists());
        }
        assert!(
            !dir.join(RESULT).exists(),
            "the ranks write processorK only"
        );
        assert_serial_answer(&dir);
    }
    // Without a decomposition: METIS in memory.
    let dir = case_copy("parallel_threads_in_memory");
    let t = ok(fvpoisson(&["run", dir.to_str().unwrap(), "--ranks", "4"]));
    assert!(t.contains("METIS k-way in memory"), "{t}");
    assert_serial_answer(&dir);
}

#[test]
fn mismatched_or_missing_decompositions_are_errors_saying_what_to_do() {
    let dir = case_copy("parallel_errors");
    let d = dir.to_str().unwrap();
    let o = fvpoisson(&["reconstruct", d]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("run `fvpoisson decompose`"),
        "{}",
        text(&o)
    );
    ok(fvpoisson(&["decompose", d, "-n", "3"]));
    let o = fvpoisson(&["run", d, "--ranks", "2"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("decomposed for 3 ranks but the run has 2"),
        "{}",
        text(&o)
    );
    let o = fvpoisson(&["decompose", d, "-n", "0"]);
    assert!(text(&o).contains("cannot split"), "{}", text(&o));
    let o = fvpoisson(&["decompose", d, "-n", "2", "--method", "scotch"]);
    assert!(
        text(&o).contains("choose metis, simple or simple:NXxNYxNZ"),
        "{}",
        text(&o)
    );
    let o = fvpoisson(&["decompose", d, "-n", "3", "--method", "simple:2x2x1"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("simple:2x2x1 does not make 3 parts"),
        "{}",
        text(&o)
    );
    // A smaller decomposition replaces the larger one.
    ok(fvpoisson(&["decompose", d, "-n", "2"]));
    assert!(!dir.join("processor2").exists());
}

/// Replaces the T solver's `solver PCG; preconditioner FDIC;` lines of the
/// case copy's fvSolution by `entries`.
fn set_t_solver(dir: &Path, entries: &str) {
    let path = dir.join("system/fvSolution");
    let s = std::fs::read_to_string(&path).unwrap();
    let old = "solver          PCG;\n        preconditioner  FDIC;";
    assert!(s.contains(old), "the shipped fvSolution changed");
    std::fs::write(&path, s.replace(old, entries)).unwrap();
}

/// The iterations of the first `Solving for T` line of a run's log.
fn first_iterations(log: &str) -> usize {
    let line = log
        .lines()
        .find(|l| l.contains("Solving for T"))
        .expect("a residual line");
    line.rsplit("No Iterations ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no iteration count in {line}"))
}

/// GAMG on thread ranks runs as PCG with block-Jacobi AMG, and
/// `deflation subdomains;` adds one deflation vector per rank (to PCG with
/// FDIC and to GAMG): each gives the serial answer; the iterations of the
/// last solve are printed.
#[test]
fn gamg_and_subdomain_deflation_on_thread_ranks_give_the_serial_answer() {
    for (name, entries) in [
        ("gamg", "solver          GAMG;\n        smoother        GaussSeidel;"),
        (
            "fdic_deflated",
            "solver          PCG;\n        preconditioner  FDIC;\n        deflation       subdomains;",
        ),
        (
            "gamg_deflated",
            "solver          GAMG;\n        smoother        GaussSeidel;\n        deflation       subdomains;",
        ),
    ] {
        for ranks in ["2", "4"] {
            let dir = case_copy(&format!("parallel_{name}_{ranks}"));
            set_t_solver(&dir, entries);
            let t = ok(fvpoisson(&["run", dir.to_str().unwrap(), "--ranks", ranks]));
            println!(
                "{name} on {ranks} ranks: {} iterations in the first solve",
                first_iterations(&t)
            );
            assert_serial_answer(&dir);
        }
    }
}

/// A bad `deflation` value names the file, line and the choices; deflation
/// on a smoothSolver is refused.
#[test]
fn bad_deflation_settings_are_errors_saying_what_to_do() {
    let dir = case_copy("parallel_bad_deflation");
    set_t_solver(
        &dir,
        "solver          PCG;\n        preconditioner  FDIC;\n        deflation       ranks;",
    );
    let o = fvpoisson(&["run", dir.to_str().unwrap(), "--ranks", "2"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("fvSolution"), "{t}");
    assert!(
        t.contains("unknown deflation 'ranks' (one of: none, subdomains)"),
        "{t}"
    );
    set_t_solver_from(
        &dir,
        "deflation       ranks;",
        "deflation       subdomains;\n        solver          smoothSolver;\n        smoother        GaussSeidel;",
    );
    let o = fvpoisson(&["run", dir.to_str().unwrap(), "--ranks", "2"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("deflation applies to PCG and GAMG"),
        "{}",
        text(&o)
    );
}

fn set_t_solver_from(dir: &Path, old: &str, new: &str) {
    let path = dir.join("system/fvSolution");
    let s = std::fs::read_to_string(&path).unwrap();
    assert!(s.contains(old));
    std::fs::write(&path, s.replace(old, new)).unwrap();
}

/// The value of `key="..."` in the first `<tag ...>` of a VTK file's XML
/// (before its appended binary data).
fn vtk_attribute(path: &Path, tag: &str, key: &str) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let end = bytes
        .windows(13)
        .position(|w| w == b"<AppendedData")
        .unwrap_or(bytes.len());
    let xml = String::from_utf8_lossy(&bytes[..end]);
    let at = xml.find(&format!("<{tag} ")).expect("tag");
    let rest = &xml[at..];
    let value = &rest[rest.find(&format!(" {key}=\"")).expect("key") + key.len() + 3..];
    value[..value.find('"').unwrap()].to_string()
}

/// `run -np 2` of a case with VTK output: each thread rank writes its cells
/// as `processorK.vtu` of the step, rank 0 the `.pvtu` listing both pieces
/// and the `.vtm` whose "internal" entry lists them as a multi-piece data
/// set; the pieces' cells add up to the mesh (24³), and VTK's own reader
/// opens the `.pvd` with every cell (scripts/check_vtk.py, where `import
/// vtk` works in python3; skipped otherwise).
#[test]
fn thread_ranks_write_vtk_pieces_and_a_pvd_that_opens_with_every_cell() {
    let dir = shipped_copy("cases/mms_cube", "parallel_vtk");
    let _ = std::fs::remove_dir_all(dir.join("results"));
    let log = ok(fvpoisson(&[
        "run",
        dir.to_str().unwrap(),
        "-np",
        "2",
        "--device",
        "cpu",
        "--vtk",
        "zlib",
    ]));
    let step = dir.join("results/parallel_vtk_000000");
    let pvtu = std::fs::read_to_string(step.join("internal.pvtu")).unwrap();
    assert_eq!(pvtu.matches("<Piece Source=").count(), 2, "{pvtu}");
    let vtm = std::fs::read_to_string(dir.join("results/parallel_vtk_000000.vtm")).unwrap();
    let mut cells = 0;
    for rank in 0..2 {
        let piece = format!("processor{rank}.vtu");
        assert!(
            pvtu.contains(&format!("<Piece Source=\"{piece}\"/>")),
            "{pvtu}"
        );
        assert!(
            vtm.contains(&format!("file=\"parallel_vtk_000000/{piece}\"")),
            "{vtm}"
        );
        let n: usize = vtk_attribute(&step.join(&piece), "Piece", "NumberOfCells")
            .parse()
            .unwrap();
        assert!(n > 0);
        cells += n;
    }
    assert_eq!(cells, 24 * 24 * 24);
    assert!(!step.join("internal.vtu").exists());
    assert!(
        vtm.contains("<Piece index=\"0\" name=\"internal\">"),
        "{vtm}"
    );
    let pvd = dir.join("results/parallel_vtk.pvd");
    assert!(pvd.exists());
    assert!(log.contains("Wrote 1 VTK step(s)"), "{log}");
    if let Some(t) = common::check_vtk(
        &pvd,
        &["--cells", "13824", "--field", "T", "--field", "error"],
    ) {
        assert!(t.contains("internal 13824 cells in 2 piece(s)"), "{t}");
    }
}

/// `run -np N --device gpu`: each thread rank solves its rows on a GPU (rank
/// r on device r % count, or of `--gpus`), block DIC (the case's FDIC) over
/// the ranks; 2 ranks on the devices present and 3 ranks sharing device 0
/// give the serial answer. `skipped: no CUDA device` without a GPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn thread_ranks_on_gpus_give_the_serial_answer() {
    let Some(_gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    for (ranks, gpus) in [("2", None), ("3", Some("0"))] {
        let dir = case_copy(&format!("parallel_gpu_{ranks}"));
        let d = dir.to_str().unwrap();
        ok(fvpoisson(&["decompose", d, "-n", ranks]));
        let mut args = vec!["run", d, "-np", ranks, "--device", "gpu"];
        if let Some(list) = gpus {
            args.extend(["--gpus", list]);
        }
        let t = ok(fvpoisson(&args));
        assert!(
            t.contains(&format!("distributed over {ranks} ranks (GPUs")),
            "{t}"
        );
        assert!(t.contains("PCG:  Solving for T, Initial residual"), "{t}");
        assert_serial_answer(&dir);
    }
}

/// `run -np N --device gpu` with Jacobi (`preconditioner diagonal`): the
/// thread ranks run PCG's NCCL device loop where each has a GPU of its own
/// and NCCL loads (2 ranks on 2+ devices, 4 on 4+), else the host-driven
/// steps, and the log says which; both give the serial answer. `skipped: no
/// CUDA device` without a GPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn thread_ranks_on_gpus_run_the_nccl_device_loop_with_jacobi() {
    let Some(_gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    let count = fvpoisson::gpu::Gpu::device_count().unwrap();
    let nccl = fvpoisson::gpu::multi::nccl_available().is_ok();
    for ranks in [2usize, 4] {
        let dir = case_copy(&format!("parallel_gpu_jacobi_{ranks}"));
        let (d, n) = (dir.to_str().unwrap(), ranks.to_string());
        set_t_solver(
            &dir,
            "solver          PCG;\n        preconditioner  diagonal;",
        );
        ok(fvpoisson(&["decompose", d, "-n", &n]));
        let t = ok(fvpoisson(&["run", d, "-np", &n, "--device", "gpu"]));
        let want = if ranks > count {
            "PCG runs host-driven steps (ranks share a device"
        } else if !nccl {
            "PCG runs host-driven steps (NCCL (libnccl.so) does not load"
        } else {
            "PCG runs the NCCL device loop"
        };
        assert!(t.contains(want), "{ranks} ranks on {count} GPUs: {t}");
        println!(
            "{ranks} ranks on {count} GPUs: {want}, {} iterations",
            first_iterations(&t)
        );
        assert_serial_answer(&dir);
    }
}

/// `run -np 2 --device gpu` of a GAMG case: PCG with the GPU AMG of each
/// rank's owned block gives the serial answer, and so does it with
/// `deflation subdomains` (one deflation vector per GPU rank). `skipped: no
/// CUDA device` without a GPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gamg_on_gpu_ranks_gives_the_serial_answer() {
    let Some(_gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    let dir = case_copy("parallel_gpu_gamg");
    let d = dir.to_str().unwrap();
    set_t_solver(
        &dir,
        "solver          GAMG;\n        smoother        GaussSeidel;",
    );
    let t = ok(fvpoisson(&["run", d, "-np", "2", "--device", "gpu"]));
    assert!(t.contains("distributed over 2 ranks (GPUs"), "{t}");
    println!("GAMG on 2 GPU ranks: {} iterations", first_iterations(&t));
    assert_serial_answer(&dir);
    set_t_solver_from(
        &dir,
        "smoother        GaussSeidel;",
        "smoother        GaussSeidel;\n        deflation       subdomains;",
    );
    let t = ok(fvpoisson(&["run", d, "-np", "2", "--device", "gpu"]));
    println!(
        "GAMG + subdomain deflation on 2 GPU ranks: {} iterations",
        first_iterations(&t)
    );
    assert_serial_answer(&dir);
}

/// `run -np 4 --device gpu --gpus 0` with `deflation subdomains;` (block DIC
/// over four GPU ranks sharing device 0, one deflation vector per rank)
/// gives the serial answer in fewer iterations than without deflation.
/// `skipped: no CUDA device` without a GPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn subdomain_deflation_on_gpu_ranks_gives_the_serial_answer_in_fewer_iterations() {
    let Some(_gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    let mut iterations = Vec::new();
    for (name, entries) in [
        ("fdic", "solver          PCG;\n        preconditioner  FDIC;"),
        (
            "fdic_deflated",
            "solver          PCG;\n        preconditioner  FDIC;\n        deflation       subdomains;",
        ),
    ] {
        let dir = case_copy(&format!("parallel_gpu_{name}_4"));
        let d = dir.to_str().unwrap();
        set_t_solver(&dir, entries);
        let t = ok(fvpoisson(&[
            "run", d, "-np", "4", "--device", "gpu", "--gpus", "0",
        ]));
        assert!(t.contains("distributed over 4 ranks (GPUs"), "{t}");
        println!(
            "{name} on 4 GPU ranks: {} iterations in the first solve",
            first_iterations(&t)
        );
        iterations.push(first_iterations(&t));
        assert_serial_answer(&dir);
    }
    assert!(iterations[1] < iterations[0], "{iterations:?}");
}

/// `--gpus` without `--device gpu`, a device that does not exist and
/// `--device gpu` with no GPU are errors (never a silent CPU run).
#[test]
fn gpu_ranks_without_usable_gpus_are_errors() {
    let dir = case_copy("parallel_gpu_errors");
    let d = dir.to_str().unwrap();
    let o = fvpoisson(&["run", d, "-np", "2", "--device", "cpu", "--gpus", "0"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("add --device gpu"), "{}", text(&o));
    let o = fvpoisson(&["run", d, "-np", "2", "--device", "gpu", "--gpus", "99,0"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("no CUDA device") || t.contains("CUDA device 99 asked for"),
        "{t}"
    );
    assert!(!dir.join("processor0").join(RESULT).exists(), "{t}");
    if fvpoisson::gpu::Gpu::device_count().is_err() {
        let o = fvpoisson(&["run", d, "-np", "2", "--device", "gpu"]);
        assert!(!o.status.success());
        assert!(text(&o).contains("no CUDA device"), "{}", text(&o));
    }
}

/// The MPI launcher of the library the binary was built with: `FVPOISSON_MPIRUN`
/// when set, else MPICH's own `mpiexec.mpich` where it is installed (a Debian
/// machine with OpenFOAM also has Open MPI, whose `mpirun` would start N
/// one-rank runs of an MPICH build), else `mpirun`.
#[cfg(feature = "mpi")]
fn mpi_launcher() -> String {
    if let Ok(launcher) = std::env::var("FVPOISSON_MPIRUN") {
        return launcher;
    }
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()))
    };
    match on_path("mpiexec.mpich") {
        true => "mpiexec.mpich".into(),
        false => "mpirun".into(),
    }
}

/// Runs `command` with its output to `log_path` and a deadline: a hung rank
/// fails the test (after `limit`) instead of CI. Its exit status, output and
/// wall time.
fn run_logged(
    mut command: std::process::Command,
    log_path: &Path,
    limit: Duration,
) -> (std::process::ExitStatus, String, Duration) {
    let log = std::fs::File::create(log_path).unwrap();
    let name = command.get_program().to_string_lossy().into_owned();
    let clock = Instant::now();
    let mut child = command
        .env_remove("RUST_LOG")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e} (Debian: apt-get install mpich)"));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if clock.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name} did not finish in {limit:?}:\n{}",
                std::fs::read_to_string(log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = clock.elapsed();
    (status, std::fs::read_to_string(log_path).unwrap(), took)
}

/// `mpirun -np 2 fvpoisson run DIR`, killed after `limit`.
#[cfg(feature = "mpi")]
fn mpirun_two_ranks(dir: &Path, limit: Duration) -> (std::process::ExitStatus, String, Duration) {
    let mut command = std::process::Command::new(mpi_launcher());
    command
        .args(["-np", "2", env!("CARGO_BIN_EXE_fvpoisson"), "run"])
        .arg(dir);
    run_logged(command, &dir.join("mpirun.log"), limit)
}

/// Two MPI processes give the serial answer.
#[cfg(feature = "mpi")]
#[test]
fn mpirun_with_two_ranks_gives_the_serial_answer() {
    let dir = case_copy("parallel_mpi");
    let (status, t, _) = mpirun_two_ranks(&dir, Duration::from_secs(120));
    assert!(status.success(), "{t}");
    assert!(t.contains("2 MPI ranks"), "{t}");
    assert_eq!(t.matches("SIMPLE solution converged").count(), 1, "{t}");
    assert_serial_answer(&dir);
}

/// A copy of the shipped case, decomposed for 2 ranks, that writes every
/// iteration, where rank 1 cannot write its first time directory
/// `processor1/1`: `processor1` has no write permission, or (for root, who
/// writes there all the same) a file is in the way. The path and the OS's
/// reason, as the error must name them.
fn case_where_rank_1_cannot_write(name: &str) -> (NamedScratch, String) {
    use std::os::unix::fs::PermissionsExt;
    let writable = std::fs::Permissions::from_mode(0o755);
    let dir = case_copy(name);
    ok(fvpoisson(&["decompose", dir.to_str().unwrap(), "-n", "2"]));
    let control = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    assert!(text.contains("writeInterval   200;"));
    std::fs::write(
        &control,
        text.replace("writeInterval   200;", "writeInterval   1;"),
    )
    .unwrap();
    let rank_1 = dir.join("processor1");
    std::fs::set_permissions(&rank_1, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = rank_1.join("probe");
    let reason = if std::fs::write(&probe, "").is_ok() {
        std::fs::remove_file(&probe).unwrap();
        std::fs::set_permissions(&rank_1, writable).unwrap();
        std::fs::write(rank_1.join("1"), "in the way").unwrap();
        "File exists (os error 17)"
    } else {
        "Permission denied (os error 13)"
    };
    let blocked = format!("{}: {reason}", rank_1.join("1").display());
    (dir, blocked)
}

/// Gives rank 1's directory of [`case_where_rank_1_cannot_write`] its write
/// permission back, so that the scratch case can be removed.
fn let_rank_1_write(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("processor1"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

/// The lines of `log` that report an error.
fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.starts_with("error: ")).collect()
}

/// A thread rank that cannot write its output stops every rank at that
/// write: exit code 2 and one error naming the rank, the file and the OS's
/// reason (the other rank neither goes on to the next iteration nor lists
/// its own piece).
#[test]
fn thread_ranks_stop_with_the_error_of_a_rank_that_cannot_write() {
    let (dir, blocked) = case_where_rank_1_cannot_write("parallel_threads_fail");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fvpoisson"));
    command.args(["run", dir.to_str().unwrap(), "-np", "2"]);
    let (status, t, took) = run_logged(command, &dir.join("run.log"), Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{t}");
    assert_eq!(
        error_lines(&t),
        [format!("error: rank 1: {blocked}")],
        "{t}"
    );
    assert!(!t.lines().any(|l| l == "Time = 2"), "{t}");
    assert!(!t.contains("Writing"), "{t}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let_rank_1_write(&dir);
}

/// A thread rank that cannot write its VTK piece of a step stops every rank
/// before the step is listed: the series lists the steps whose pieces are
/// all on disk, never one with a piece missing.
#[test]
fn a_vtk_step_with_a_piece_missing_is_not_listed() {
    let dir = case_copy("parallel_threads_vtk_fail");
    let control = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    let text = text
        .replace("writeInterval   200;", "writeInterval   1;")
        .replace("endTime         200;", "endTime         2;");
    std::fs::write(&control, text).unwrap();
    // Rank 1's piece of the second step: a directory is in the way.
    let blocked = dir.join("VTK/parallel_threads_vtk_fail_000001/processor1.vtu");
    std::fs::create_dir_all(blocked.join("in_the_way")).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fvpoisson"));
    command.args(["run", dir.to_str().unwrap(), "-np", "2"]);
    let (status, t, _) = run_logged(command, &dir.join("run.log"), Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{t}");
    let errors = error_lines(&t);
    assert_eq!(errors.len(), 1, "{t}");
    assert!(errors[0].starts_with("error: rank 1: "), "{t}");
    assert!(errors[0].contains("processor1.vtu"), "{t}");
    let pvd = std::fs::read_to_string(dir.join("VTK/parallel_threads_vtk_fail.pvd")).unwrap();
    assert!(pvd.contains("timestep=\"1.0\""), "{pvd}");
    assert!(!pvd.contains("timestep=\"2.0\""), "{pvd}");
}

/// MPI ranks of which one fails stop together within seconds, each process
/// with exit code 2 and an error naming the failing rank, the file and the
/// OS's reason: rank 1 cannot write its output (it failed alone, in the
/// middle of the run, where rank 0 would wait for it in the next
/// iteration's sums), or a piece of the decomposition is corrupt (rank 0
/// reads it; rank 1 would wait for the owners).
#[cfg(feature = "mpi")]
#[test]
fn mpirun_ranks_stop_with_the_error_of_a_failing_rank() {
    let limit = Duration::from_secs(20);
    let (dir, blocked) = case_where_rank_1_cannot_write("parallel_mpi_fail_write");
    let (status, t, took) = mpirun_two_ranks(&dir, Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{t}");
    let mut errors = error_lines(&t);
    errors.sort();
    assert_eq!(
        errors,
        [
            format!("error: rank 1 failed: {blocked}"),
            format!("error: rank 1: {blocked}"),
        ],
        "{t}"
    );
    assert!(!t.lines().any(|l| l == "Time = 2"), "{t}");
    assert!(!t.contains("MPI_Abort"), "{t}");
    assert!(took < limit, "{took:?}");
    let_rank_1_write(&dir);

    let dir = case_copy("parallel_mpi_fail_piece");
    ok(fvpoisson(&["decompose", dir.to_str().unwrap(), "-n", "2"]));
    let piece = dir.join("processor1/constant/polyMesh/cellProcAddressing");
    let text = std::fs::read_to_string(&piece).unwrap();
    std::fs::write(&piece, text.replacen("120\n(", "120\n(\n99999", 1)).unwrap();
    let (status, t, took) = mpirun_two_ranks(&dir, Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{t}");
    let errors = error_lines(&t);
    assert_eq!(errors.len(), 2, "{t}");
    for e in errors {
        assert!(e.contains(&piece.display().to_string()), "{t}");
        assert!(e.starts_with("error: rank 0"), "{t}");
    }
    assert!(took < limit, "{took:?}");
}

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the mpi feature: cargo test --features mpi"]
fn mpirun_with_two_ranks_gives_the_serial_answer() {}

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the mpi feature: cargo test --features mpi"]
fn mpirun_ranks_stop_with_the_error_of_a_failing_rank() {}

/// The field of the latest time directory of `dir` (`T`).
fn latest_field(dir: &Path) -> Vec<f64> {
    let latest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            Some((name.parse::<f64>().ok()?, name))
        })
        .filter(|(time, _)| *time > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or_else(|| panic!("{}: no time directory", dir.display()));
    internal_field(&dir.join(latest.1).join("T"))
}

/// An all-Neumann problem on a mesh of two disconnected blocks (cells 0–3
/// and 4–7), each block split over both thread ranks: every rank fixes the
/// level of each region as the serial run does (zero mean per region, or
/// the reference cell and the first cell of the other region), so the
/// reconstructed field is the serial one.
#[test]
fn two_region_all_neumann_cases_on_thread_ranks_give_the_serial_answer() {
    let mesh = common::repo("tests/data/two_regions");
    for (tag, reference) in [
        ("mean", "type = \"zeroMean\""),
        ("cell", "type = \"cell\"\ncell = 5\nvalue = 0.25"),
    ] {
        let case = format!(
            "[mesh]\nsource = \"{}\"\n[physics]\nsource = \"x - 1.5 + y\"\n\
             [boundary.default]\ntype = \"zeroGradient\"\n\
             [reference]\n{reference}\nproject = true\n\
             [time]\nscheme = \"steadyState\"\n\
             [solver.T]\nsolver = \"PCG\"\npreconditioner = \"DIC\"\ntolerance = 1e-12\n\
             [output]\nformats = [\"foam\"]\n",
            mesh.display()
        );
        let dirs = ["serial", "ranks"].map(|run| {
            let dir = common::Scratch::new(&format!("regions_{tag}_{run}"));
            common::write_case_toml(&dir, &case);
            dir
        });
        let [serial_dir, ranks_dir] = &dirs;
        ok(fvpoisson(&["run", serial_dir.to_str().unwrap()]));
        let d = ranks_dir.to_str().unwrap();
        ok(fvpoisson(&["decompose", d, "-n", "2"]));
        // Even cells on rank 0, odd cells on rank 1: both regions on both ranks.
        for rank in 0..2 {
            let path = ranks_dir.join(format!(
                "processor{rank}/constant/polyMesh/cellProcAddressing"
            ));
            let text = std::fs::read_to_string(&path).unwrap();
            let (head, _) = text.split_once("\n4\n(").unwrap();
            let cells: Vec<String> = (rank..8).step_by(2).map(|c| c.to_string()).collect();
            std::fs::write(&path, format!("{head}\n4\n(\n{}\n)\n", cells.join("\n"))).unwrap();
        }
        let t = ok(fvpoisson(&["run", d, "-np", "2"]));
        assert!(
            t.contains("2 disconnected regions, 2 of them without a fixed value"),
            "{t}"
        );
        ok(fvpoisson(&["reconstruct", d]));
        let (x, expected) = (latest_field(ranks_dir), latest_field(serial_dir));
        assert!(expected.iter().any(|v| v.abs() > 1e-3), "{expected:?}");
        let rel = max_diff_over_max(&x, &expected);
        assert!(rel <= 1e-9, "{tag}: {x:?} vs {expected:?}");
    }
}

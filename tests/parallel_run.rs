//! Distributed runs of a shipped case through the binary, as a user runs
//! them: `decompose`, `run --ranks N` (thread ranks) or `mpirun -np N fvpoisson
//! run` (cargo feature `mpi`), `reconstruct`, compared with the serial run to
//! solver tolerance.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{copy_dir, fvpoisson, internal_field, max_diff_over_max};

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
fn case_copy(name: &str) -> PathBuf {
    shipped_copy(CASE, name)
}

/// A fresh copy of the shipped case `case` named `name`.
fn shipped_copy(case: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join(case), &dir);
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
    assert!(text(&o).contains("choose metis or simple"), "{}", text(&o));
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
    if !python_vtk() {
        eprintln!("skipped the VTK reader check: python3 with the vtk module is not available");
        return;
    }
    let check = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_vtk.py"))
        .arg(&pvd)
        .args(["--cells", "13824", "--field", "T", "--field", "error"])
        .output()
        .unwrap();
    let t = text(&check);
    assert!(check.status.success(), "{t}");
    assert!(t.contains("internal 13824 cells in 2 piece(s)"), "{t}");
}

/// Whether `python3 -c 'import vtk'` works.
fn python_vtk() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import vtk"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `run -np N --device gpu`: each thread rank solves its rows on a GPU (rank
/// r on device r % count, or of `--gpus`), block DIC (the case's FDIC) over
/// the ranks; 2 ranks on the devices present and 3 ranks sharing device 0
/// give the serial answer. `skipped: no CUDA device` without a GPU.
#[test]
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

/// The CI check of issue 10: two MPI processes give the serial answer.
#[cfg(feature = "mpi")]
#[test]
fn mpirun_with_two_ranks_gives_the_serial_answer() {
    let dir = case_copy("parallel_mpi");
    // Output to a file and a deadline: a hung rank fails the test instead of CI.
    let log_path = dir.join("mpirun.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = std::process::Command::new("mpirun")
        .args(["-np", "2", env!("CARGO_BIN_EXE_fvpoisson"), "run"])
        .arg(&dir)
        .env_remove("RUST_LOG")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("mpirun is on PATH (Debian: apt-get install mpich)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "mpirun did not finish in 120 s:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let t = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "{t}");
    assert!(t.contains("2 MPI ranks"), "{t}");
    assert_eq!(t.matches("SIMPLE solution converged").count(), 1, "{t}");
    assert_serial_answer(&dir);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn mpirun_with_two_ranks_gives_the_serial_answer() {
    println!("skipped: built without the mpi feature (cargo test --features mpi runs it)");
}

//! What `fvpoisson run` writes and where, through the binary: steady runs
//! write their last iteration (or every `interval`-th), the log ends naming
//! the files, nothing lands in the current directory; OpenFOAM cases get a
//! VTK series in `VTK/`; `foam-to-vtk` converts written times (ascii and
//! binary fields); a second run of a case is refused while the first lives.

use std::path::Path;
use std::process::{Command, Output};

mod common;

use common::{mms_case, write_case_toml, NamedScratch};

/// A fresh empty directory `output_NAME` (the runs' files are named after it).
fn scratch(name: &str) -> NamedScratch {
    NamedScratch::new(&format!("output_{name}"))
}

fn shipped_copy(case: &str, name: &str) -> NamedScratch {
    let dir = scratch(name);
    common::copy_case_inputs(&common::repo(case), &dir);
    dir
}

/// The binary run in `cwd`.
fn fvpoisson_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn log_of(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    let log = log_of(&o);
    assert!(o.status.success(), "{log}");
    log
}

fn pvd_times(pvd: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(pvd).unwrap_or_else(|e| panic!("{}: {e}", pvd.display()));
    fvpoisson::io::vtk::pvd_datasets(&text)
        .unwrap_or_else(|| panic!("{}: a step without a time or file", pvd.display()))
        .into_iter()
        .map(|(time, _)| time.to_string())
        .collect()
}

/// scripts/check_vtk.py on `pvd`: every step opens with `cells` cells.
fn check_with_vtk(pvd: &Path, cells: usize, field: &str) {
    common::check_vtk(pvd, &["--cells", &cells.to_string(), "--field", field]);
}

/// A steady case without an interval writes one step (the last of its 2
/// iterations), with `interval = 1` one per iteration; the log's last
/// lines name the series; the current directory stays empty.
#[test]
fn steady_runs_write_the_last_iteration_unless_an_interval_is_given() {
    let case = scratch("steady_case");
    let cwd = scratch("steady_cwd");
    for (extra, steps) in [("", 1), ("[output]\ninterval = 1\n", 2)] {
        write_case_toml(&case, &mms_case("8x8x8", extra));
        let _ = std::fs::remove_dir_all(case.join("results"));
        let log = ok(fvpoisson_in(&cwd, &["run", case.to_str().unwrap()]));
        assert!(
            log.contains("SIMPLE solution converged in 2 iterations"),
            "{log}"
        );
        let pvd = case.join("results/output_steady_case.pvd");
        assert_eq!(pvd_times(&pvd).len(), steps, "{extra}");
        // The run's log ends naming what it wrote: after that line come only
        // `End` and the phase table.
        let lines: Vec<&str> = log.lines().collect();
        let wrote = lines
            .iter()
            .rposition(|l| {
                l.starts_with(&format!("Wrote {steps} VTK step(s)"))
                    && l.ends_with(&pvd.display().to_string())
            })
            .unwrap_or_else(|| panic!("no 'Wrote' line:\n{log}"));
        let table = lines[wrote..]
            .iter()
            .position(|l| l.starts_with("Wall time by phase"))
            .map_or(lines.len(), |at| wrote + at);
        assert!(lines[wrote + 1..table].iter().all(|l| *l == "End"), "{log}");
        check_with_vtk(&pvd, 512, "T");
    }
    let cwd_entries: Vec<_> = std::fs::read_dir(&cwd).unwrap().collect();
    assert!(
        cwd_entries.is_empty(),
        "written into the current directory: {cwd_entries:?}"
    );
    assert!(
        !case.join(".fvpoisson.lock").exists(),
        "the lock is released"
    );
}

/// `run --vtk ascii|zlib|none` overrides the case's VTK output.
#[test]
fn vtk_option_chooses_the_encoding_or_none() {
    let case = scratch("vtk_option");
    write_case_toml(&case, &mms_case("8x8x8", ""));
    let dir = case.to_str().unwrap();
    let vtu = case.join("results/output_vtk_option_000000/internal.vtu");
    ok(fvpoisson_in(&case, &["run", dir, "--vtk", "ascii"]));
    let text = std::fs::read_to_string(&vtu).unwrap();
    assert!(text.contains("format=\"ascii\"") && !text.contains("AppendedData"));
    ok(fvpoisson_in(&case, &["run", dir, "--vtk", "zlib"]));
    let head = std::fs::read(&vtu).unwrap();
    let head = String::from_utf8_lossy(&head[..400]);
    assert!(
        head.contains("compressor=\"vtkZLibDataCompressor\""),
        "{head}"
    );
    std::fs::remove_dir_all(case.join("results")).unwrap();
    let log = ok(fvpoisson_in(&case, &["run", dir, "--vtk", "none"]));
    assert!(!case.join("results").exists());
    assert!(log.contains("Wrote no result files"), "{log}");
    let o = fvpoisson_in(&case, &["run", dir, "--vtk", "hdf5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        log_of(&o).contains("unknown VTK encoding 'hdf5'"),
        "{}",
        log_of(&o)
    );
}

/// An OpenFOAM laplacianFoam case writes its time directories and the same
/// times as `VTK/NAME.pvd`; `foam-to-vtk` converts the written times
/// (all, `-time` ranges, `-latestTime`), ascii or binary (`writeFormat
/// binary`), to the same cell values.
#[test]
fn openfoam_cases_get_vtk_and_foam_to_vtk_converts_written_times() {
    let case = shipped_copy("cases/laplacian_foam_steady", "foam_vtk");
    let control = case.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    std::fs::write(
        &control,
        text.replace("writeInterval   200;", "writeInterval   4;"),
    )
    .unwrap();
    let dir = case.to_str().unwrap();
    let log = ok(fvpoisson_in(&case, &["run", dir]));
    let pvd = case.join("VTK/output_foam_vtk.pvd");
    let run_times = pvd_times(&pvd);
    assert_eq!(run_times.first().map(String::as_str), Some("4.0"), "{log}");
    assert!(log.contains(&pvd.display().to_string()), "{log}");
    let last = run_times.last().unwrap().trim_end_matches(".0").to_string();
    assert!(case.join(&last).join("T").is_file());
    check_with_vtk(&pvd, 240, "T");

    std::fs::remove_dir_all(case.join("VTK")).unwrap();
    let log = ok(fvpoisson_in(&case, &["foam-to-vtk", dir]));
    let mut all = vec!["0.0".to_string()];
    all.extend(run_times.iter().cloned());
    assert_eq!(pvd_times(&pvd), all, "{log}");
    check_with_vtk(&pvd, 240, "T");
    ok(fvpoisson_in(&case, &["foam-to-vtk", dir, "-time", "5:12"]));
    let expected: Vec<String> = run_times
        .iter()
        .filter(|t| (5.0..=12.0).contains(&t.parse::<f64>().unwrap()))
        .cloned()
        .collect();
    assert_eq!(pvd_times(&pvd), expected);
    ok(fvpoisson_in(&case, &["foam-to-vtk", dir, "-latestTime"]));
    assert_eq!(pvd_times(&pvd), [run_times.last().unwrap().clone()]);
    let ascii_vtu = std::fs::read(case.join("VTK/output_foam_vtk_000000/internal.vtu")).unwrap();

    // The same run with binary fields: the converter reads them back to the
    // same bytes of VTK.
    std::fs::write(
        &control,
        std::fs::read_to_string(&control)
            .unwrap()
            .replace("writeFormat     ascii;", "writeFormat     binary;"),
    )
    .unwrap();
    ok(fvpoisson_in(&case, &["run", dir, "--vtk", "none"]));
    let field = std::fs::read(case.join(&last).join("T")).unwrap();
    assert!(
        String::from_utf8_lossy(&field[..field.len().min(1000)]).contains("format      binary;"),
        "the field is written in binary"
    );
    ok(fvpoisson_in(&case, &["foam-to-vtk", dir, "-latestTime"]));
    let binary_vtu = std::fs::read(case.join("VTK/output_foam_vtk_000000/internal.vtu")).unwrap();
    assert!(
        ascii_vtu == binary_vtu,
        "binary fields read back differently"
    );

    let o = fvpoisson_in(&case, &["foam-to-vtk", dir, "-time", "1000:"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        log_of(&o).contains("no time directory matches"),
        "{}",
        log_of(&o)
    );

    // A later time that cannot be read fails the conversion and leaves the
    // series converted before as it was: its listing and its steps.
    ok(fvpoisson_in(&case, &["foam-to-vtk", dir]));
    let before = std::fs::read(&pvd).unwrap();
    std::fs::write(
        case.join(&last).join("T"),
        "FoamFile { version 2.0; format ascii; class volScalarField; object T; }\n\
         dimensions [0 0 0 1 0 0 0];\ninternalField uniform;\nboundaryField {}\n",
    )
    .unwrap();
    let o = fvpoisson_in(&case, &["foam-to-vtk", dir]);
    assert_eq!(o.status.code(), Some(2), "{}", log_of(&o));
    assert!(log_of(&o).contains(&last), "{}", log_of(&o));
    assert_eq!(std::fs::read(&pvd).unwrap(), before);
    check_with_vtk(&pvd, 240, "T");
    let left: Vec<_> = std::fs::read_dir(case.join("VTK"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A second run of a case is refused while the first (here: a lock held by
/// a live process) runs, with the holder's pid; once that process is gone
/// its lock is stale and the next run takes it over and releases it.
#[test]
fn second_run_of_a_case_is_refused_while_the_first_lives() {
    let case = scratch("lock");
    write_case_toml(&case, &mms_case("8x8x8", ""));
    let mut holder = Command::new("sleep").arg("30").spawn().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let lock = case.join(".fvpoisson.lock");
    std::fs::write(&lock, format!("{} {host}\n", holder.id())).unwrap();
    let o = fvpoisson_in(&case, &["run", case.to_str().unwrap()]);
    let log = log_of(&o);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(
        log.contains(&format!("the case is in use by process {}", holder.id())),
        "{log}"
    );
    assert!(!case.join("results").exists(), "nothing written: {log}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let log = ok(fvpoisson_in(&case, &["run", case.to_str().unwrap()]));
    assert!(log.contains("taking over the lock of process"), "{log}");
    assert!(!lock.exists());
}

/// A binary field written by OpenFOAM v1912's laplacianFoam
/// (tests/data/foam_binary/T, `regenerate.sh`) read and written back with
/// `writeFormat binary`: the internalField list (count, raw little-endian
/// doubles) is byte for byte OpenFOAM's.
#[test]
fn binary_fields_are_laid_out_as_openfoams() {
    use fvpoisson::foam::FoamFormat;
    use fvpoisson::io::foam_field::{write_internal_field, FoamWriteOptions, ScalarFieldFile};
    let data = common::repo("tests/data/foam_binary/T");
    let mesh = fvpoisson::mesh::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/cases/laplacian_foam_steady"
    ))
    .unwrap();
    let field = ScalarFieldFile::read(&data, mesh.n_cells()).unwrap();
    let cells = field.internal.expand(mesh.n_cells());
    let dir = scratch("foam_binary");
    let options = FoamWriteOptions {
        format: FoamFormat::Binary,
        ..FoamWriteOptions::default()
    };
    let ours = write_internal_field(&dir, 10.0, "T", &cells, &options).unwrap();
    let list = |bytes: &[u8]| -> Vec<u8> {
        let start = bytes
            .windows(13)
            .position(|w| w == b"internalField")
            .unwrap();
        let rest = &bytes[start..];
        let open = rest.iter().position(|&b| b == b'(').unwrap();
        rest[..open + 1 + 8 * mesh.n_cells() + 1].to_vec()
    };
    let theirs = list(&std::fs::read(&data).unwrap());
    assert_eq!(
        theirs.last(),
        Some(&b')'),
        "the reference ends its list here"
    );
    assert!(list(&std::fs::read(ours).unwrap()) == theirs);
}

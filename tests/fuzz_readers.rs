//! Property-based fuzzing of every input reader: polyMesh (ascii and
//! binary), Gmsh, OpenFOAM dictionaries, case.toml, Matrix Market and
//! expressions. Each property mutates a valid input (byte changes,
//! truncation, a huge number or a long token spliced in) and asserts that
//! the reader returns `Ok` or `Err` without a panic, within a time bound.
//!
//! Cases per reader: `FVPOISSON_FUZZ_CASES` (default 48, a few seconds per
//! reader in CI; each reader prints `fuzz NAME: N inputs in T` to the log,
//! also without `--nocapture`); a longer search, e.g. `FVPOISSON_FUZZ_CASES=20000 cargo
//! test --test fuzz_readers`. A failing input is shrunk by proptest and
//! printed with its seed.

mod common;

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Longest any one input may take to read (generous for a loaded CI machine;
/// the inputs are a few kB).
const TIME_LIMIT: Duration = Duration::from_secs(5);

fn cases() -> u32 {
    std::env::var("FVPOISSON_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// One mutation of a byte string.
#[derive(Clone, Debug)]
enum Mutation {
    /// Set the byte at (position mod length).
    Byte(usize, u8),
    /// Keep the first (position mod length) bytes.
    Truncate(usize),
    /// Insert text at (position mod length): huge counts, long tokens, syntax.
    Insert(usize, String),
    /// Remove up to 64 bytes from (position mod length).
    Delete(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let text = prop_oneof![
        Just("18446744073709551615".to_string()),
        Just("9223372036854775807".to_string()),
        Just("400000000".to_string()),
        Just("-1".to_string()),
        Just("1e300".to_string()),
        Just("nan".to_string()),
        Just("(".repeat(200)),
        Just("{".repeat(200)),
        Just("A".repeat(100_000)),
        Just("#include \"/dev/zero\"\n".to_string()),
        "[ -~]{0,12}",
    ];
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Byte(p, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        3 => (any::<usize>(), text).prop_map(|(p, t)| Mutation::Insert(p, t)),
        2 => (any::<usize>(), 1usize..64).prop_map(|(p, n)| Mutation::Delete(p, n)),
    ]
}

fn apply(original: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for m in mutations {
        let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
        match m {
            Mutation::Byte(p, b) if !bytes.is_empty() => {
                let i = at(*p, bytes.len());
                bytes[i] = *b;
            }
            Mutation::Byte(..) => {}
            Mutation::Truncate(p) => bytes.truncate(at(*p, bytes.len())),
            Mutation::Insert(p, t) => {
                let i = at(*p, bytes.len() + 1);
                bytes.splice(i..i, t.bytes());
            }
            Mutation::Delete(p, n) => {
                let i = at(*p, bytes.len());
                let end = (i + n).min(bytes.len());
                bytes.drain(i..end);
            }
        }
    }
    bytes
}

/// Runs `read` on mutations of `original`: never a panic, never over [`TIME_LIMIT`].
fn fuzz(name: &str, original: &[u8], read: impl Fn(&[u8])) {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let clock = Instant::now();
    let result = runner.run(&prop::collection::vec(mutation(), 1..6), |mutations| {
        let bytes = apply(original, &mutations);
        let start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| read(&bytes)));
        prop_assert!(outcome.is_ok(), "{name}: the reader panicked");
        prop_assert!(
            start.elapsed() < TIME_LIMIT,
            "{name}: {:?} for one input",
            start.elapsed()
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    // Straight to the process's stderr, not through `eprintln!`, which the
    // test harness captures for passing tests: the CI log shows how long each
    // reader was fuzzed, with how many inputs.
    let line = format!(
        "fuzz {name}: {} inputs in {:.2?}\n",
        cases(),
        clock.elapsed()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A scratch polyMesh directory holding copies of `source`'s files.
fn scratch_mesh(tag: &str, source: &Path) -> PathBuf {
    let dir = common::unique_temp_dir(&format!("fvp_fuzz_{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["points", "faces", "owner", "neighbour", "boundary"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    dir
}

fn fuzz_polymesh(tag: &str, mesh: &str) {
    let source = common::repo(&format!("meshes/foam/{mesh}/constant/polyMesh"));
    let dir = scratch_mesh(tag, &source);
    for file in ["points", "faces", "owner", "boundary"] {
        let original = std::fs::read(source.join(file)).unwrap();
        fuzz(&format!("polyMesh {mesh}/{file}"), &original, |bytes| {
            std::fs::write(dir.join(file), bytes).unwrap();
            if let Ok(mesh) = fvpoisson::mesh::polymesh::read_polymesh(&dir) {
                let _ = fvpoisson::mesh::MeshReport::new(&mesh);
            }
        });
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn polymesh_ascii() {
    fuzz_polymesh("ascii", "cavity");
}

#[test]
fn polymesh_binary() {
    fuzz_polymesh("binary", "warped_binary");
}

#[test]
fn gmsh() {
    for file in [
        "tet_cube.v41.msh",
        "tet_cube.v22.msh",
        "prism_wedge.v41bin.msh",
    ] {
        let path = common::repo("meshes/gmsh").join(file);
        let original = std::fs::read(&path).unwrap();
        fuzz(&format!("Gmsh {file}"), &original, |bytes| {
            let _ = fvpoisson::mesh::gmsh::parse_msh(&path, bytes);
        });
    }
}

#[test]
fn openfoam_dictionary() {
    let path = common::repo("cases/laplacian_foam_steady/system/fvSolution");
    let original = std::fs::read(&path).unwrap();
    fuzz("OpenFOAM dictionary fvSolution", &original, |bytes| {
        if let Ok(file) = fvpoisson::foam::FoamFile::from_bytes(path.clone(), bytes.to_vec()) {
            let _ = fvpoisson::foam::FoamDict::from_file(&file);
        }
    });
}

#[test]
fn case_toml() {
    let dir = common::repo("cases/mms_cube");
    let path = dir.join("case.toml");
    let original = std::fs::read(&path).unwrap();
    fuzz("case.toml", &original, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let _ = fvpoisson::case::case_toml::parse_case(&text, &path, &dir);
    });
}

#[test]
fn matrix_market() {
    let path = common::repo("tests/data/poisson2d_4x4.mtx");
    let original = std::fs::read(&path).unwrap();
    fuzz("Matrix Market", &original, |bytes| {
        let _ = fvpoisson::sparse::mtx::parse_matrix(bytes, &path);
        let _ = fvpoisson::sparse::mtx::parse_vector(bytes, &path);
    });
}

#[test]
fn expressions() {
    let original = b"3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z) + 1e-3*step(z - 0.5) - t/2";
    fuzz("expression", original, |bytes| {
        if let Ok(f) = fvpoisson::case::expr::compile(&String::from_utf8_lossy(bytes)) {
            let _ = f.eval(fvpoisson::mesh::Vec3::new(0.5, 0.25, 0.125), 1.0);
        }
    });
}

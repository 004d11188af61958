//! Helpers shared by the integration tests.

use std::process::{Command, Output};

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::random_systems;
use fvpoisson::sparse::Csr;

/// Runs the `fvpoisson` binary as a user would, from the crate root, without
/// the caller's `RUST_LOG` (the tests read its default output).
#[allow(dead_code)] // not every test that shares this module runs the binary
pub fn fvpoisson(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the fvpoisson binary runs")
}

/// The path of `rel`, a file or folder of the repository (`cases/…`,
/// `tests/data/…`), for reading: a test that writes copies it first
/// ([`case_inputs_copy`], [`copy_dir`] into a [`Scratch`]).
#[allow(dead_code)] // not every test that shares this module reads repository files
pub fn repo(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Copies the directory tree `from` to `to` (created), e.g. a shipped case.
#[allow(dead_code)] // not every test that shares this module copies cases
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The internalField values of an ascii OpenFOAM field file.
#[allow(dead_code)] // not every test that shares this module reads fields
pub fn internal_field(path: &std::path::Path) -> Vec<f64> {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rest = &s[s.find("internalField").expect("internalField")..];
    let list = &rest[rest.find('(').unwrap() + 1..rest.find(')').unwrap()];
    list.split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// max |x − expected| / max |expected| (the same length asserted).
#[allow(dead_code)] // not every test that shares this module compares fields
pub fn max_diff_over_max(x: &[f64], expected: &[f64]) -> f64 {
    assert_eq!(x.len(), expected.len());
    let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = x
        .iter()
        .zip(expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    diff / scale
}

/// Deterministic corruptions of a file's bytes for no-panic tests: truncations at
/// many lengths, and single-byte replacements by characters that break tokens
/// and numbers. `count` bounds how many of each kind are produced.
#[allow(dead_code)] // not every test that shares this module reads corrupted files
pub fn corruptions(bytes: &[u8], count: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let n = bytes.len();
    if n == 0 {
        return out;
    }
    let step = (n / count.max(1)).max(1);
    for cut in (0..n).step_by(step) {
        out.push(bytes[..cut].to_vec());
    }
    // xorshift: reproducible without a dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let replacements = b"()9-;{}x.\n \0e+";
    for _ in 0..count {
        let mut m = bytes.to_vec();
        let at = (next() % n as u64) as usize;
        m[at] = replacements[(next() % replacements.len() as u64) as usize];
        out.push(m);
    }
    out
}

/// The Poisson systems (`fvm::testing::poisson_system`) of the mesh specs,
/// each named by the last part of its path. Mesh files are relative to the
/// repository root, the working directory of `cargo test` and of the device
/// runs.
#[allow(dead_code)] // not every test that shares this module solves mesh systems
pub fn poisson_systems(specs: &[&str]) -> Vec<(String, Csr, Vec<f64>)> {
    specs
        .iter()
        .map(|spec| {
            let (a, b) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            (spec.rsplit('/').next().unwrap().to_string(), a, b)
        })
        .collect()
}

/// Random SPD matrices (`sparse::testing::random_systems`) and the Poisson
/// systems of `specs` in RCM order (named "NAME RCM").
#[allow(dead_code)] // not every test that shares this module solves mesh systems
pub fn random_and_rcm_systems(specs: &[&str]) -> Vec<(String, Csr, Vec<f64>)> {
    let mut all = random_systems();
    for (name, a, b) in poisson_systems(specs) {
        let p = reverse_cuthill_mckee(&a);
        all.push((format!("{name} RCM"), p.apply_symmetric(&a), p.to_new(&b)));
    }
    all
}

/// Whether `name`, an entry at the top of a case directory, is something a run
/// writes (results, VTK, post-processing, processor directories, time
/// directories other than `0`, logs) rather than an input of the case.
fn is_generated_case_entry(name: &str) -> bool {
    const GENERATED: [&str; 3] = ["results", "VTK", "postProcessing"];
    GENERATED.contains(&name)
        || name.starts_with("processor")
        || name.starts_with("log.")
        || name.ends_with(".lock")
        || (name != "0" && name.parse::<f64>().is_ok())
}

/// A path in the temporary directory starting with `stem`, unique to this
/// process and call (the tests of one binary run side by side in one
/// process, and two of them may pick the same tag), and free: what an
/// earlier process of the same id left there (a failed test keeps its
/// files) is removed.
#[allow(dead_code)] // not every test that shares this module needs one
pub fn unique_temp_dir(stem: &str) -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("{stem}_{}_{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}

/// A scratch copy of the shipped case `rel` (relative to the crate root) in a
/// fresh directory named after `tag`: only the case's inputs are copied, so
/// results a user wrote into `cases/` (by running them as the README shows)
/// never reach a test.
#[allow(dead_code)] // not every test that shares this module copies cases
pub fn case_inputs_copy(rel: &str, tag: &str) -> std::path::PathBuf {
    let from = repo(rel);
    let to = unique_temp_dir(&format!("fvpoisson_case_{}_{tag}", rel.replace('/', "_")));
    copy_case_inputs(&from, &to);
    to
}

/// Copies the inputs of case directory `from` into `to` (see
/// [`case_inputs_copy`]).
#[allow(dead_code)] // not every test that shares this module copies cases
pub fn copy_case_inputs(from: &std::path::Path, to: &std::path::Path) {
    fn copy(from: &std::path::Path, to: &std::path::Path, top: bool) {
        std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        let entries = std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if top && is_generated_case_entry(&name.to_string_lossy()) {
                continue;
            }
            let target = to.join(&name);
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target, false);
            } else {
                std::fs::copy(entry.path(), &target)
                    .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
            }
        }
    }
    copy(from, to, true);
}

/// Replaces the first `from` in the file `path` by `to`; `from` must be there.
#[allow(dead_code)] // not every test that shares this module edits case files
pub fn edit(path: &std::path::Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{}: no '{from}'", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The cell values of U and p in the time directory `at` (OpenFOAM files,
/// plain or gzipped) of a mesh of `n` cells.
#[allow(dead_code)] // not every test that shares this module reads flow fields
pub fn flow_fields(at: &std::path::Path, n: usize) -> (Vec<fvpoisson::mesh::Vec3>, Vec<f64>) {
    use fvpoisson::io::foam_field::{ScalarFieldFile, VectorFieldFile};
    (
        VectorFieldFile::read(&at.join("U"), n)
            .unwrap()
            .internal
            .expand(n),
        ScalarFieldFile::read(&at.join("p"), n)
            .unwrap()
            .internal
            .expand(n),
    )
}

/// An empty scratch directory unique to this test process and `tag`, removed
/// when dropped (kept when the test panics, to look at).
#[allow(dead_code)] // not every test that shares this module needs one
pub struct Scratch(pub std::path::PathBuf);

#[allow(dead_code)]
impl Scratch {
    pub fn new(tag: &str) -> Self {
        let dir = unique_temp_dir(&format!("fvpoisson_scratch_{tag}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// An empty directory `…/UNIQUE/name`, for a case whose directory name a
/// test reads back (a run names its VTK series and plots after its case
/// directory); removed with its unique parent when dropped, as a
/// [`Scratch`].
#[allow(dead_code)] // not every test that shares this module needs one
pub struct NamedScratch {
    path: std::path::PathBuf,
    _parent: Scratch,
}

#[allow(dead_code)]
impl NamedScratch {
    pub fn new(name: &str) -> Self {
        let parent = Scratch::new("named");
        let path = parent.join(name);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self {
            path,
            _parent: parent,
        }
    }
}

impl std::ops::Deref for NamedScratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for NamedScratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

/// Turns the copy of `cases/cavity_ico` in `dir` into a pimpleFoam case of
/// simulation type `simulation`: Newtonian transport, the laminar stress's
/// `Gauss linear` scheme, `constant/turbulenceProperties` (fvSolution and
/// controlDict are the caller's).
#[allow(dead_code)] // not every test that shares this module runs pimpleFoam
pub fn make_pimple_foam(dir: &std::path::Path, simulation: &str) {
    let transport = dir.join("constant/transportProperties");
    let text = std::fs::read_to_string(&transport)
        .unwrap()
        .replace("\nnu ", "\ntransportModel  Newtonian;\nnu ");
    std::fs::write(&transport, text).unwrap();
    let schemes = std::fs::read_to_string(dir.join("system/fvSchemes"))
        .unwrap()
        .replace(
            "div(phi,U)      Gauss linear;",
            "div(phi,U)      Gauss linear;\n    div((nuEff*dev2(T(grad(U))))) Gauss linear;",
        );
    std::fs::write(dir.join("system/fvSchemes"), schemes).unwrap();
    std::fs::write(
        dir.join("constant/turbulenceProperties"),
        format!(
            "FoamFile {{ version 2.0; format ascii; class dictionary; object \
             turbulenceProperties; }}\nsimulationType {simulation};\n"
        ),
    )
    .unwrap();
}

/// Writes `text` as the case file `dir/case.toml`, creating `dir`.
#[allow(dead_code)] // not every test that shares this module writes a case
pub fn write_case_toml(dir: &std::path::Path, text: &str) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let file = dir.join("case.toml");
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
}

/// The manufactured-solution Poisson case on the unit box of `cells` cells
/// (`"8x8x8"`): −∇²u = 3π² sin(πx) sin(πy) sin(πz), the exact u on every
/// boundary, PCG to 1e-10; then `more` (an `[output]` table, …).
#[allow(dead_code)] // not every test that shares this module runs one
pub fn mms_case(cells: &str, more: &str) -> String {
    format!(
        r#"
[mesh]
source = "box:{cells}"
[physics]
source = "3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)"
exact = "sin(pi*x)*sin(pi*y)*sin(pi*z)"
[boundary.default]
type = "fixedValue"
value = "exact"
[solver.T]
tolerance = 1e-10
{more}"#
    )
}

/// The lid-driven cavity as a SIMPLE case on the mesh `mesh`
/// (`"box:16x16x1:2d"`): ν = 0.01, the lid `ymax` moving at (1, 0, 0), no
/// slip elsewhere, p zero-gradient everywhere; then `more` (`[SIMPLE]`,
/// `[relaxationFactors]`, solvers, …). The boundary conditions end on line
/// 12 (line 1 is empty).
#[allow(dead_code)] // not every test that shares this module runs one
pub fn cavity_case(mesh: &str, more: &str) -> String {
    format!(
        r#"
[mesh]
source = "{mesh}"
[physics]
kind = "simple"
nu = 0.01
[boundary.ymax]
U = {{ type = "fixedValue", value = [1.0, 0.0, 0.0] }}
p = {{ type = "zeroGradient" }}
[boundary.default]
U = {{ type = "noSlip" }}
p = {{ type = "zeroGradient" }}
{more}"#
    )
}

/// What p by `PCG` with `DIC`, converged by `controls`, becomes on the GPU:
/// the device pressure solver with the GPU's default in its place (AMG-PCG,
/// `case::SolveTarget::adapt`) and the same controls.
#[allow(dead_code)] // not every test that shares this module solves on the device
pub fn dic_as_the_gpu_runs_it(
    controls: fvpoisson::solve::SolverControls,
) -> fvpoisson::gpu::simple::DevicePressureSolver {
    use fvpoisson::case::{LinearSolver, SolveTarget};
    use fvpoisson::solve::{Preconditioner, PreconditionerKind};
    let given = LinearSolver {
        preconditioner: PreconditionerKind::Dic.into(),
        controls,
        ..LinearSolver::default()
    };
    let Preconditioner::Amg(amg) = SolveTarget::Gpu.adapt(&given).preconditioner else {
        panic!("DIC runs AMG-PCG on the GPU");
    };
    fvpoisson::gpu::simple::DevicePressureSolver {
        jacobi: false,
        controls,
        amg: Some(amg),
        polynomial: None,
    }
}

/// `scripts/check_vtk.py` on the VTK series `pvd` with `args` (`--cells N`,
/// `--field NAME`, …), which must pass: its output (stdout, then stderr).
/// `None`, said on stderr, where python3 has no `vtk` module to read it with.
#[allow(dead_code)] // not every test that shares this module writes VTK
pub fn check_vtk(pvd: &std::path::Path, args: &[&str]) -> Option<String> {
    let python_vtk = Command::new("python3")
        .args(["-c", "import vtk"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_vtk {
        eprintln!("skipped the VTK reader check: python3 with the vtk module is not available");
        return None;
    }
    let out = Command::new("python3")
        .arg(repo("scripts/check_vtk.py"))
        .arg(pvd)
        .args(args)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{}: {text}", pvd.display());
    Some(text)
}

/// The largest |a_i − b_i| as a share of the range of `a`'s values.
#[allow(dead_code)] // not every test that shares this module compares fields
pub fn range_difference(a: &[f64], b: &[f64]) -> f64 {
    let (lo, hi) = a
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / (hi - lo).max(f64::MIN_POSITIVE)
}

/// `dir`'s `system/fvSchemes` with `ddtSchemes { default backward; }` in
/// place of the shipped cavity's Euler.
#[allow(dead_code)] // not every test that shares this module steps in time
pub fn backward_time_steps(dir: &std::path::Path) {
    let path = dir.join("system/fvSchemes");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("default         Euler;"), "{text}");
    std::fs::write(
        &path,
        text.replacen("default         Euler;", "default backward;", 1),
    )
    .unwrap();
}

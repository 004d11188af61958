//! `fvpoisson bench`: device copy bandwidth; per case and row ordering the
//! bandwidth and λ of the matrix, SpMV per format (ours: CSR, SELL,
//! mod-SELL; cuSPARSE: CSR ALG1/ALG2 and sliced ELL on the same device
//! buffers), Jacobi-PCG on the device against its bandwidth floor (per
//! launch mode, and against Jacobi-scaled and Ruiz-equilibrated CG), the
//! assembly on the device against the CPU's; the solve against the CPU.
//!
//! Every SpMV is timed alike: CUDA events around each call, 5 warm-up calls,
//! the median of `reps`, x/y pairs rotated so that the vectors are not in L2
//! from the previous call. Each result is checked against our CSR kernel on
//! the same x (max |y − y_csr| / max |y_csr|).
//!
//! Bytes counted (the minimum each kernel must move, each array once):
//! CSR 12·nnz + 8(n+1) + 16n (values + column indices, row pointers, x, y);
//! SELL 12·nnz + 16n (values + columns, x, y; padding not counted);
//! mod-SELL 12(nnz − n) + 24n (off-diagonal values + codes, diagonal, x, y).
//! One fused PCG iteration ([`pcg_iteration_bytes`]): mod-SELL SpMV +
//! direction (read z, p; write p: 24n) + update (read p, q, x, r; write x, r:
//! 48n; Jacobi also reads D⁻¹ and writes z: +16n; an equilibrated system
//! reads the residual weights 1/s: +8n). Jacobi-PCG: SpMV + 88n; CG on an
//! equilibrated system (z = r, not stored): SpMV + 80n.
//!
//! Assembly on the device (`gpu::assembly`; n cells, f internal faces, b
//! boundary faces; corrected scheme, so Γ_f|S_f| is written too):
//! face coefficients 48f + 8n (owner, neighbour, w, |S|, Δ, Γ; write the
//! coefficient and Γ_f|S_f|), 32f with uniform Γ (|S|, Δ; two writes); matrix
//! rows 34f + 44n + 32b (face codes and slots of both sides 10f, coefficients
//! 8f, off-diagonal writes 16f; boundary pointers, V, q, diagonal, explicit
//! rhs, rhs; Γ_b, |S_b|, gradient coefficients). Assembly: 82f + 52n + 32b
//! (66f + 44n + 32b with uniform Γ). The explicit correction (`update_rhs`,
//! Gauss gradient): gradient 50f + 44n + 40b (mod-SELL codes, face codes and
//! slots, w, S_f; p, boundary pointers, V, the gradient; p_b coefficients and
//! S_b), face flux 56f + 24n (owner, neighbour, w, k, Γ_f|S_f|, flux; the
//! gradient), rhs 18f + 20n: 124f + 88n + 40b.

use std::path::PathBuf;
use std::time::Instant;

use cudarc::driver::CudaSlice;

use fvpoisson::fvm::testing::{poisson_problem, poisson_system_on};
use fvpoisson::fvm::{CellField, LaplacianSystem, Schemes};
use fvpoisson::gpu::assembly::DeviceLaplacian;
use fvpoisson::gpu::cusparse::{Cusparse, CusparseKind, CusparseSpmv, DenseVector};
use fvpoisson::gpu::matrix::{DeviceMatrix, Format};
use fvpoisson::gpu::pcg::{
    solve_pcg_gpu, DeviceSolve, GpuCgBackend, GpuSolveOptions, GpuVector, LaunchMode,
};
use fvpoisson::gpu::{Gpu, GpuError};
use fvpoisson::mesh::{Geometry, Mesh, PatchKind};
use fvpoisson::solve::{
    pcg, solve_pcg, EquilibrationKind, Executor, PreconditionerKind, RuizNorm, RuizSettings,
    SolverControls, SolverPerformance,
};
use fvpoisson::sparse::ordering::{bandwidth, reverse_cuthill_mckee};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::{mtx, Csr, ModSell, Reordered, RowOrdering};

/// Bench cases `bubble:MESH`: the density-contrast problem of [`BUBBLE_CASE`]
/// (Gupta et al. 2011's 3-D bubble, density ratio 1000, harmonic Γ; p fixed at ymax,
/// walls zeroGradient) on the mesh source MESH, e.g.
/// `bubble:box:110x110x110:tet:perturb=0.2:renumber`; b = A x* for a random x*.
pub const BUBBLE_PREFIX: &str = "bubble:";
/// The case whose Γ and boundary conditions `bubble:` cases take (relative to
/// the repository root, the working directory of the benches).
pub const BUBBLE_CASE: &str = "cases/bubble_tet_3d";

/// A bench case: a mesh source (`box:` spec, OpenFOAM case, Gmsh file; see
/// `mesh::source`) gives its mesh and geometry and the FVM Poisson system of
/// [`poisson_problem`] (`fvm::testing`) with Γ = 1; a Matrix Market file (`.mtx`) gives no
/// mesh, its matrix and the right-hand side A·1 (the solution is all ones);
/// `bubble:MESH` ([`BUBBLE_PREFIX`]) no mesh, the density-contrast matrix.
type BenchCase = (Option<(Mesh, Geometry)>, Csr, Vec<f64>);

fn load_case(case: &str) -> anyhow::Result<BenchCase> {
    if let Some(mesh) = case.strip_prefix(BUBBLE_PREFIX) {
        let mesh = fvpoisson::mesh::source::load(mesh)?;
        let a = fvpoisson::case::initial_matrix_on(std::path::Path::new(BUBBLE_CASE), Some(mesh))?;
        let b = rhs_of_random_solution(&a);
        return Ok((None, a, b));
    }
    if case.ends_with(".mtx") {
        let a = fvpoisson::sparse::mtx::read_matrix(std::path::Path::new(case))?;
        let mut b = vec![0.0; a.n_rows()];
        a.spmv(&vec![1.0; a.n_cols()], &mut b);
        return Ok((None, a, b));
    }
    let mesh = fvpoisson::mesh::source::load(case)?;
    let geometry = mesh.geometry()?;
    let (a, b) = poisson_system_on(&mesh, &geometry)?;
    Ok((Some((mesh, geometry)), a, b))
}

/// The system `a` x = `b` in reverse Cuthill–McKee order (the rows' "rcm"
/// ordering).
pub fn rcm_system(a: &Csr, b: &[f64]) -> (Csr, Vec<f64>) {
    let rcm = reverse_cuthill_mckee(a);
    (rcm.apply_symmetric(a), rcm.to_new(b))
}

/// The matrix and right-hand side of a bench case ([`load_case`]).
pub fn poisson_system(case: &str) -> anyhow::Result<(Csr, Vec<f64>)> {
    load_case(case).map(|(_, a, b)| (a, b))
}

/// Median of a sample (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median device time (ms) of `reps` runs of `work(i)` after `warmup` runs.
pub(super) fn time_median(
    gpu: &Gpu,
    warmup: usize,
    reps: usize,
    mut work: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    for i in 0..warmup {
        work(i)?;
    }
    let mut t = Vec::with_capacity(reps);
    for i in 0..reps {
        t.push(gpu.time_ms(|| work(i))?);
    }
    Ok(median(&mut t))
}

/// One row of the results.
#[derive(Clone, Debug)]
pub struct Row {
    pub case: String,
    /// Row ordering of the matrix (empty where none applies).
    pub ordering: String,
    pub what: String,
    pub n: usize,
    pub nnz: usize,
    pub bytes: f64,
    pub ms: f64,
    pub gb_s: f64,
    pub of_copy: f64,
    pub note: String,
}

impl Row {
    /// A row of a time-to-solution table (no bytes counted, so no bandwidth
    /// columns).
    pub(super) fn timing(
        case: &str,
        ordering: &str,
        what: String,
        (n, nnz): (usize, usize),
        ms: f64,
        note: String,
    ) -> Row {
        Row {
            case: case.to_string(),
            ordering: ordering.into(),
            what,
            n,
            nnz,
            bytes: 0.0,
            ms,
            gb_s: 0.0,
            of_copy: 0.0,
            note,
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"case\":\"{}\",\"ordering\":\"{}\",\"what\":\"{}\",\"n\":{},\"nnz\":{},\"bytes\":{},\"ms\":{},\"gb_s\":{},\"of_copy\":{},\"note\":\"{}\"}}",
            self.case, self.ordering, self.what, self.n, self.nnz, self.bytes, self.ms, self.gb_s,
            self.of_copy, self.note.replace('"', "'")
        )
    }
}

/// The time-to-solution rows of one case, each logged to stderr as it is
/// measured (`case: what (ordering): ms, note`).
pub(super) struct TimingRows<'c> {
    case: &'c str,
    /// Rows and nonzeros of the case's matrix.
    size: (usize, usize),
    rows: Vec<Row>,
}

impl<'c> TimingRows<'c> {
    /// No rows yet of `case`, whose matrix is `a`.
    pub(super) fn new(case: &'c str, a: &Csr) -> Self {
        Self {
            case,
            size: (a.n_rows(), a.nnz()),
            rows: Vec::new(),
        }
    }

    /// Logs and keeps the row `what` of the matrix in `ordering`.
    pub(super) fn push(&mut self, what: String, ordering: &str, ms: f64, note: String) {
        let case = self.case;
        eprintln!("{case}: {what} ({ordering}): {ms:.1} ms, {note}");
        self.rows
            .push(Row::timing(case, ordering, what, self.size, ms, note));
    }

    /// Logs and keeps the row of the Jacobi-PCG baseline on the RCM order,
    /// its note ending in `tail`.
    pub(super) fn push_baseline(&mut self, baseline: &JacobiBaseline, tail: &str) {
        self.push("PCG Jacobi".into(), "rcm", baseline.ms, baseline.note(tail));
    }

    pub(super) fn into_rows(self) -> Vec<Row> {
        self.rows
    }
}

/// What a row's note ends with for a solve that stopped short of its
/// tolerance (nothing for one that converged).
pub(super) fn convergence_mark(converged: bool) -> &'static str {
    if converged {
        ""
    } else {
        " NOT CONVERGED"
    }
}

/// Minimum bytes one SpMV moves in `format` (module documentation).
pub fn spmv_bytes(format: Format, n: usize, nnz: usize) -> f64 {
    if format == Format::ModSell {
        return fvpoisson::gpu::matrix::mod_sell_spmv_bytes(n, nnz - n);
    }
    let (n, nnz) = (n as f64, nnz as f64);
    match format {
        Format::Csr => 12.0 * nnz + 8.0 * (n + 1.0) + 16.0 * n,
        _ => 12.0 * nnz + 16.0 * n,
    }
}

/// Minimum bytes of one fused PCG iteration (module documentation).
pub fn pcg_iteration_bytes(n: usize, nnz: usize, jacobi: bool, equilibrated: bool) -> f64 {
    fvpoisson::gpu::pcg::iteration_bytes(n, nnz - n, jacobi, equilibrated)
}

/// Device time (ms) per iteration of `iterations` PCG iterations from x = 0
/// with no convergence test, after one untimed chunk (which captures the CUDA
/// graph where the backend uses one). `x` is rewritten in place, so the
/// graph stays valid.
fn time_per_iteration(
    gpu: &Gpu,
    backend: &GpuCgBackend,
    b: &GpuVector,
    x: &mut GpuVector,
    iterations: usize,
    check_interval: usize,
) -> Result<f64, GpuError> {
    let fixed = |max_iter| SolverControls::absolute(0.0, max_iter);
    let zeros = vec![0.0; backend.n()];
    let run = |x: &mut GpuVector, max_iter| -> Result<(), GpuError> {
        backend.write(x, &zeros)?;
        pcg(backend, b, x, &fixed(max_iter), "p")
            .map(|_| ())
            .map_err(|e| GpuError::Invalid(e.to_string()))
    };
    run(x, check_interval.min(iterations))?;
    let ms = gpu.time_ms(|| run(x, iterations))?;
    Ok(ms / iterations as f64)
}

/// Minimum bytes of one device assembly (module documentation): n cells,
/// f internal faces, b boundary faces.
pub fn assembly_bytes(n: usize, f: usize, b: usize, uniform_gamma: bool) -> f64 {
    let (n, f, b) = (n as f64, f as f64, b as f64);
    if uniform_gamma {
        66.0 * f + 44.0 * n + 32.0 * b
    } else {
        82.0 * f + 52.0 * n + 32.0 * b
    }
}

/// Minimum bytes of the explicit correction on the device (Gauss gradient).
pub fn correction_bytes(n: usize, f: usize, b: usize) -> f64 {
    let (n, f, b) = (n as f64, f as f64, b as f64);
    124.0 * f + 88.0 * n + 40.0 * b
}

/// Settings of `fvpoisson bench`.
#[derive(Clone, Debug)]
pub struct BenchSettings {
    /// The cases: mesh sources or `.mtx` files ([`load_case`]).
    pub meshes: Vec<String>,
    /// Row orderings measured, in this order; the first one is used for the
    /// end-to-end solve and the CPU comparison.
    pub orderings: Vec<RowOrdering>,
    pub slice_height: usize,
    pub reps: usize,
    /// Time PCG on the GPU (and on the CPU when `cpu_solve`).
    pub pcg: bool,
    /// Also time the CPU solve (slow on big meshes).
    pub cpu_solve: bool,
    /// Time the assembly on the device and on the CPU (mesh cases).
    pub assembly: bool,
    pub check_interval: usize,
    /// Time cuSPARSE's SpMV as well (a note, not an error, where it cannot
    /// be loaded).
    pub cusparse: bool,
    /// Write each case's matrix in each ordering as Matrix Market
    /// (`DIR/<case>.<ordering>.mtx`) for `benches/cusparse_cupy.py`.
    pub write_mtx: Option<PathBuf>,
    /// Also the smoother rows (Wikberg 2024, Table 4.1's shape) and PCG with each
    /// smoother as preconditioner (`smooth`).
    pub smoothers: bool,
    /// Sweeps per smoother row (the seed: 1000).
    pub smoother_sweeps: usize,
    /// Also PCG with each polynomial preconditioner, f64 and mixed precision,
    /// against Jacobi-PCG and the CPU's DIC-PCG (`polynomial`).
    pub polynomial: bool,
    /// Also the deflation rows (`deflation`): Jacobi/Neu1/Neu2-PCG on
    /// the GPU with and without deflation against DIC-PCG on the CPU, on each
    /// case and on `deflation_cases`.
    pub deflation: bool,
    /// Subdomains of the deflation rows (default `deflation::default_subdomains`).
    pub deflation_subdomains: Option<usize>,
    /// Case directories (density contrast) whose first system gets deflation
    /// rows too, with b = A x* for a random x*.
    pub deflation_cases: Vec<PathBuf>,
    /// Also the AMG rows (`amg`): set-up, value re-set-up, cycle and
    /// PCG with AMG against Jacobi-PCG.
    pub amg: bool,
    /// The AMG settings measured (empty: the V-, W- and K-cycle with the
    /// default settings).
    pub amg_variants: Vec<fvpoisson::solve::amg::AmgSettings>,
    /// Also the GMRES / PBiCGStab rows (`krylov`) on every case and on
    /// the convection–diffusion systems of `krylov_cd`.
    pub krylov: bool,
    /// Meshes whose convection–diffusion system the Krylov rows solve too.
    pub krylov_cd: Vec<String>,
    /// Also the ILU rows (`ilu`): GMRES(20) with ILU(k), DILU and
    /// (nested) RAS against GMRES-Jacobi on Yang 2015's 3-D Poisson grid of
    /// this size (cells per side) and on the convection–diffusion systems of
    /// `krylov_cd`.
    pub ilu_grid: Option<usize>,
    /// Also the FSAI rows (`fsai`): static FSAI and aFSAI against
    /// Jacobi-PCG, on each case and on `deflation_cases` (density contrast).
    pub fsai: bool,
    /// The FSAI settings measured (empty: `fsai::default_variants`).
    pub fsai_variants: Vec<fvpoisson::solve::fsai::FsaiSettings>,
}

impl BenchSettings {
    /// The GPU solve options of the measured rows: the slice height and
    /// residual-check interval given, the rest default.
    pub fn gpu_options(&self) -> GpuSolveOptions {
        GpuSolveOptions {
            slice_height: self.slice_height,
            check_interval: self.check_interval,
            ..GpuSolveOptions::default()
        }
    }
}

/// What `run` measured: the rows, and lines about what was not measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    /// A report of `rows` with no notes.
    pub fn of_rows(rows: Vec<Row>) -> Self {
        Self {
            rows,
            notes: Vec::new(),
        }
    }
}

/// A file name for a case spec (`box:64x64x64:tet` → `box_64x64x64_tet`).
pub fn case_file_stem(spec: &str) -> String {
    spec.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs the measurements (printing progress to stderr).
pub fn run(gpu: &Gpu, settings: &BenchSettings) -> anyhow::Result<Report> {
    if settings.orderings.is_empty() {
        anyhow::bail!("bench needs at least one row ordering");
    }
    let mut report = Report::default();
    let copy_bytes = 1usize << 30;
    let copy = gpu.copy_bandwidth(copy_bytes)?;
    eprintln!(
        "device {} (compute {}.{}), kernels {}: copy bandwidth {copy:.0} GB/s",
        gpu.name(),
        gpu.compute_capability().0,
        gpu.compute_capability().1,
        if gpu.module_cached() {
            "from the disk cache"
        } else {
            "compiled by NVRTC"
        }
    );
    report.rows.push(Row {
        case: "memcpy".into(),
        ordering: String::new(),
        what: "DtoD copy 1 GiB".into(),
        n: copy_bytes / 8,
        nnz: 0,
        bytes: 2.0 * copy_bytes as f64,
        ms: 2.0 * copy_bytes as f64 / copy / 1e6,
        gb_s: copy,
        of_copy: 1.0,
        note: "read + write".into(),
    });
    let cusparse = if settings.cusparse {
        match Cusparse::load(gpu) {
            Ok(lib) => {
                eprintln!("cuSPARSE {} loaded", lib.version());
                report
                    .notes
                    .push(format!("cuSPARSE {} (through cudarc)", lib.version()));
                Some(lib)
            }
            Err(e) => {
                let line = format!(
                    "cuSPARSE not measured: {e}. Measure it with benches/cusparse_cupy.py \
                     on the matrices of --write-mtx."
                );
                eprintln!("{line}");
                report.notes.push(line);
                None
            }
        }
    } else {
        None
    };
    if let Some(dir) = &settings.write_mtx {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    for spec in &settings.meshes {
        let t = Instant::now();
        let (mesh, a, rhs) = load_case(spec)?;
        let (n, nnz) = (a.n_rows(), a.nnz());
        eprintln!(
            "{spec}: n = {n}, nnz = {nnz}, mesh + assembly {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let case = CaseBench {
            gpu,
            settings,
            spec,
            copy,
            cusparse: cusparse.as_ref(),
        };
        // Solve time (s) in the first ordering, for the CPU comparison.
        let mut first_solve_s = None;
        for &ordering in &settings.orderings {
            let t = Instant::now();
            let ordered =
                Reordered::new(&a, ordering, settings.slice_height).map_err(anyhow::Error::msg)?;
            let order_s = t.elapsed().as_secs_f64();
            let m = ordered.matrix();
            let lambda = ModSell::from_csr(m, settings.slice_height)
                .map_err(anyhow::Error::msg)?
                .lambda();
            let note = format!(
                "bandwidth {}, lambda {lambda:.3} (H {}); ordering took {order_s:.2} s",
                bandwidth(m),
                settings.slice_height
            );
            eprintln!("{spec}, {ordering}: {note}");
            report
                .rows
                .push(case.row(ordering, "ordering", m, 0.0, order_s * 1e3, note));
            if let Some(dir) = &settings.write_mtx {
                let path = dir.join(format!("{}.{ordering}.mtx", case_file_stem(spec)));
                mtx::write_file(&path, |w| mtx::write_matrix(w, m))?;
                eprintln!("wrote {}", path.display());
            }
            case.spmv(ordering, m, &mut report)?;
            if settings.pcg {
                let solve_s =
                    case.pcg_iterations(ordering, m, ordered.to_new(&rhs), &mut report.rows)?;
                first_solve_s.get_or_insert(solve_s);
            }
        }
        if let (true, Some((mesh, geometry))) = (settings.assembly, &mesh) {
            report
                .rows
                .extend(assembly_rows(gpu, spec, mesh, geometry, settings, copy)?);
        }
        if let Some(solve_s) = first_solve_s {
            case.end_to_end(&a, &rhs, solve_s, &mut report.rows)?;
        }
        if settings.smoothers {
            report
                .rows
                .extend(super::smooth::rows(gpu, spec, &a, &rhs, settings)?);
        }
        if settings.polynomial {
            report
                .rows
                .extend(super::polynomial::rows(gpu, spec, &a, &rhs, settings)?);
        }
        if settings.deflation {
            report
                .rows
                .extend(deflation_rows(gpu, spec, &a, &rhs, settings)?);
        }
        if settings.amg {
            report
                .rows
                .extend(super::amg::rows(gpu, spec, &a, settings)?);
        }
        if settings.krylov {
            report
                .rows
                .extend(super::krylov::rows(gpu, spec, &a, &rhs, settings, copy)?);
        }
        if settings.fsai {
            report
                .rows
                .extend(super::fsai::rows(Some(gpu), spec, &a, &rhs, settings)?);
        }
    }
    if settings.fsai {
        for dir in &settings.deflation_cases {
            let (spec, a, rhs) = contrast_case(dir)?;
            report
                .rows
                .extend(super::fsai::rows(Some(gpu), &spec, &a, &rhs, settings)?);
        }
    }
    for spec in settings.krylov_cd.iter().filter(|_| settings.krylov) {
        let (case, a, rhs) = super::krylov::convection_diffusion_case(spec)?;
        eprintln!("{case}: n = {}, nnz = {}", a.n_rows(), a.nnz());
        report
            .rows
            .extend(super::krylov::rows(gpu, &case, &a, &rhs, settings, copy)?);
    }
    if let Some(g) = settings.ilu_grid.filter(|&g| g > 0) {
        report
            .rows
            .extend(super::ilu::thesis_rows(gpu, g, settings)?);
        for spec in &settings.krylov_cd {
            let (case, a, rhs) = super::krylov::convection_diffusion_case(spec)?;
            report
                .rows
                .extend(super::ilu::convection_rows(gpu, &case, &a, &rhs, settings)?);
        }
    }
    for dir in settings
        .deflation
        .then_some(&settings.deflation_cases)
        .into_iter()
        .flatten()
    {
        let (spec, a, rhs) = contrast_case(dir)?;
        report
            .rows
            .extend(deflation_rows(gpu, &spec, &a, &rhs, settings)?);
    }
    Ok(report)
}

/// The first system of a density-contrast case directory, with b = A x*
/// for a random x* (the deflation and FSAI rows).
pub fn contrast_case(dir: &std::path::Path) -> anyhow::Result<(String, Csr, Vec<f64>)> {
    let a = fvpoisson::case::initial_matrix(dir)?;
    let rhs = rhs_of_random_solution(&a);
    Ok((dir.display().to_string(), a, rhs))
}

/// b = A x* for a random x* (seed 1): the right-hand side of a matrix
/// taken without its own.
fn rhs_of_random_solution(a: &Csr) -> Vec<f64> {
    let mut rhs = vec![0.0; a.n_rows()];
    a.spmv(
        &fvpoisson::fvm::testing::random_field(a.n_rows(), 1),
        &mut rhs,
    );
    rhs
}

/// The CPU rows of `bench --fsai` (no GPU needed): the cases of `settings`
/// and its density-contrast cases.
pub fn run_fsai_cpu(settings: &BenchSettings) -> anyhow::Result<Report> {
    let mut report = Report::default();
    for spec in &settings.meshes {
        let (_, a, rhs) = load_case(spec)?;
        eprintln!("{spec}: n = {}, nnz = {}", a.n_rows(), a.nnz());
        report
            .rows
            .extend(super::fsai::rows(None, spec, &a, &rhs, settings)?);
    }
    for dir in &settings.deflation_cases {
        let (spec, a, rhs) = contrast_case(dir)?;
        report
            .rows
            .extend(super::fsai::rows(None, &spec, &a, &rhs, settings)?);
    }
    Ok(report)
}

/// `deflation::rows` with the settings' slices and subdomains.
fn deflation_rows(
    gpu: &Gpu,
    spec: &str,
    a: &Csr,
    rhs: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    eprintln!("{spec}: deflation rows");
    super::deflation::rows(gpu, spec, a, rhs, settings)
}

/// The measurements of one case.
struct CaseBench<'a> {
    gpu: &'a Gpu,
    settings: &'a BenchSettings,
    spec: &'a str,
    copy: f64,
    cusparse: Option<&'a Cusparse<'a>>,
}

impl CaseBench<'_> {
    fn row(
        &self,
        ordering: RowOrdering,
        what: &str,
        m: &Csr,
        bytes: f64,
        ms: f64,
        note: String,
    ) -> Row {
        let gb_s = if bytes > 0.0 {
            bytes / (ms * 1e-3) / 1e9
        } else {
            0.0
        };
        Row {
            case: self.spec.to_string(),
            ordering: ordering.name().into(),
            what: what.into(),
            n: m.n_rows(),
            nnz: m.nnz(),
            bytes,
            ms,
            gb_s,
            of_copy: gb_s / self.copy,
            note,
        }
    }

    /// SpMV in our three formats and in cuSPARSE's, each checked against our
    /// CSR kernel on the first x.
    fn spmv(&self, ordering: RowOrdering, m: &Csr, report: &mut Report) -> anyhow::Result<()> {
        let (gpu, h) = (self.gpu, self.settings.slice_height);
        let (n, nnz) = (m.n_rows(), m.nnz());
        // Enough x/y pairs to exceed L2 (50 MB on an H100) between reuses.
        let sets = (200_000_000 / (16 * n.max(1))).clamp(2, 16);
        let xs: Vec<CudaSlice<f64>> = (0..sets)
            .map(|k| {
                let x: Vec<f64> = (0..n)
                    .map(|i| 1.0 + ((i * 31 + k * 7) % 97) as f64 / 97.0)
                    .collect();
                gpu.upload(&x)
            })
            .collect::<Result<_, _>>()?;
        let mut ys: Vec<CudaSlice<f64>> =
            (0..sets).map(|_| gpu.zeros(n)).collect::<Result<_, _>>()?;
        let nan = vec![f64::NAN; n];
        let matrices: Vec<DeviceMatrix> = Format::ALL
            .iter()
            .map(|&f| DeviceMatrix::upload(gpu, m, f, h))
            .collect::<Result<_, _>>()?;
        let mut reference = Vec::new();
        let mut mod_sell_ms = f64::NAN;
        for dm in &matrices {
            let format = dm.format();
            let ms = time_median(gpu, 5, self.settings.reps, |i| {
                dm.spmv(gpu, &xs[i % sets], &ys[i % sets])
            })?;
            gpu.write(&nan, &mut ys[0])?;
            dm.spmv(gpu, &xs[0], &ys[0])?;
            let y = gpu.download(&ys[0])?;
            let check = if format == Format::Csr {
                reference = y;
                String::new()
            } else {
                format!(", max diff to CSR {:.1e}", max_rel_diff(&y, &reference))
            };
            let mut note = String::new();
            if format != Format::Csr {
                note += &format!("H {h}");
            }
            if format == Format::ModSell {
                mod_sell_ms = ms;
            }
            note += &check;
            let bytes = spmv_bytes(format, n, nnz);
            let what = format!("SpMV {}", format.name());
            report.rows.push(self.row(
                ordering,
                &what,
                m,
                bytes,
                ms,
                note.trim_start_matches(", ").into(),
            ));
        }
        let Some(lib) = self.cusparse else {
            return Ok(());
        };
        let dx = DenseVector::all(lib, &xs).map_err(anyhow::Error::msg)?;
        let mut best_csr = f64::INFINITY;
        for kind in CusparseKind::ALL {
            let (format, ours) = match kind {
                CusparseKind::SellAlg1 => (Format::Sell, &matrices[1]),
                _ => (Format::Csr, &matrices[0]),
            };
            let what = format!("SpMV {}", kind.name());
            // Set-up, timing and check; a cuSPARSE failure is a note, not the end of the bench.
            let measured = (|| -> Result<(CusparseSpmv, f64, Vec<f64>), String> {
                let dy = DenseVector::all(lib, &ys)?;
                let spmv = CusparseSpmv::new(lib, kind, ours, nnz, &dx[0], &dy[0])?;
                let ms = time_median(gpu, 5, self.settings.reps, |i| {
                    spmv.spmv(&dx[i % sets], &dy[i % sets])
                        .map_err(GpuError::Invalid)
                })
                .map_err(|e| e.to_string())?;
                drop(dy);
                gpu.write(&nan, &mut ys[0]).map_err(|e| e.to_string())?;
                let y0 = DenseVector::new(lib, &ys[0])?;
                spmv.spmv(&dx[0], &y0)?;
                drop(y0);
                let y = gpu.download(&ys[0]).map_err(|e| e.to_string())?;
                Ok((spmv, ms, y))
            })();
            let (spmv, ms, y) = match measured {
                Ok(m) => m,
                Err(e) => {
                    let line = format!("{}, {ordering}: {what} not measured: {e}", self.spec);
                    eprintln!("{line}");
                    report.notes.push(line);
                    continue;
                }
            };
            let mut note = format!(
                "{}, max diff to CSR {:.1e}",
                spmv.note,
                max_rel_diff(&y, &reference)
            );
            if kind == CusparseKind::SellAlg1 {
                note = format!("H {h}, {note}");
            } else {
                best_csr = best_csr.min(ms);
            }
            // Counted like our kernel of the same format (the same arrays).
            let bytes = spmv_bytes(format, n, nnz);
            report
                .rows
                .push(self.row(ordering, &what, m, bytes, ms, note));
        }
        if best_csr.is_finite() && mod_sell_ms.is_finite() {
            let ratio = best_csr / mod_sell_ms;
            report.notes.push(format!(
                "{}, {ordering}: mod-SELL {mod_sell_ms:.4} ms vs cuSPARSE CSR (best algorithm) \
                 {best_csr:.4} ms: mod-SELL {ratio:.2}x as fast; target (faster than cuSPARSE \
                 CSR) {}",
                self.spec,
                if ratio > 1.0 { "met" } else { "not met" }
            ));
        }
        Ok(())
    }

    /// Jacobi-PCG on the device with the rows in `ordering`: the solve to
    /// tolerance (host clock; returned, in s), the iterations on the device
    /// clock against their bandwidth floor in each launch mode, and CG on the
    /// equilibrated systems (Wikberg 2024, §6.5–6.6) against Jacobi-PCG.
    fn pcg_iterations(
        &self,
        ordering: RowOrdering,
        m: &Csr,
        rhs: Vec<f64>,
        rows: &mut Vec<Row>,
    ) -> anyhow::Result<f64> {
        let (gpu, s) = (self.gpu, self.settings);
        let (n, nnz) = (m.n_rows(), m.nnz());
        let options = self.options(ordering);
        let floor_ms = |bytes: f64| bytes / (self.copy * 1e9) * 1e3;
        let iteration_row = |what: String, bytes: f64, ms: f64, note: String| {
            let mut row = self.row(
                ordering,
                &what,
                m,
                bytes,
                ms,
                format!(
                    "{note}; floor {:.4} ms at copy bandwidth, of copy = floor / measured",
                    floor_ms(bytes)
                ),
            );
            row.of_copy = floor_ms(bytes) / ms;
            row
        };
        // Device memory of the solve: free memory before the backend and
        // after the solve (matrix, work vectors, scratch all still held).
        gpu.synchronize()?;
        let free_before = gpu.memory()?.0;
        let t = Instant::now();
        let backend = GpuCgBackend::new(gpu, m, true, None, &options)?;
        let b_dev = backend.upload(&rhs)?;
        gpu.synchronize()?;
        let setup_s = t.elapsed().as_secs_f64();
        let mut x_dev = backend.upload(&vec![0.0; n])?;
        let t = Instant::now();
        let solve = pcg(&backend, &b_dev, &mut x_dev, &controls(), "p")?;
        let solve_s = t.elapsed().as_secs_f64();
        gpu.synchronize()?;
        let solve_bytes = free_before.saturating_sub(gpu.memory()?.0);
        let iters = solve.iterations.max(1);
        let jacobi_bytes = pcg_iteration_bytes(n, nnz, true, false);
        let auto = LaunchMode::Auto.resolve(n);
        for mode in [LaunchMode::Separate, LaunchMode::Folded, LaunchMode::Graph] {
            backend.set_launch_mode(mode);
            let ms =
                time_per_iteration(gpu, &backend, &b_dev, &mut x_dev, iters, s.check_interval)?;
            let launches = if mode == LaunchMode::Separate { 5 } else { 3 };
            let mut note =
                format!("Jacobi-PCG, {launches} launches per iteration, {iters} iterations");
            if mode == auto {
                note += " (auto)";
            }
            if backend.launch_mode() != mode {
                note += &format!(" (ran as {})", backend.launch_mode().name());
            }
            rows.push(iteration_row(
                format!("PCG iter {}", mode.name()),
                jacobi_bytes,
                ms,
                note,
            ));
        }
        rows.push(self.row(
            ordering,
            "PCG solve GPU",
            m,
            0.0,
            solve_s * 1e3,
            format!(
                "{} iterations, final residual {:.3e}; set-up {:.0} ms (mod-SELL build + \
                 upload); device memory {:.0} MB ({:.0} B per row)",
                solve.iterations,
                solve.final_residual,
                setup_s * 1e3,
                solve_bytes as f64 / 1e6,
                solve_bytes as f64 / n as f64
            ),
        ));
        drop((backend, b_dev, x_dev));
        let ruiz = |norm| {
            EquilibrationKind::Ruiz(RuizSettings {
                norm,
                ..RuizSettings::default()
            })
        };
        for (label, equilibration) in [
            ("jacobi-scaled", EquilibrationKind::Jacobi),
            ("ruiz-inf", ruiz(RuizNorm::Inf)),
            ("ruiz-2", ruiz(RuizNorm::Two)),
        ] {
            let t = Instant::now();
            let Some(eq) = equilibration.build(m)? else {
                continue;
            };
            let scaled = eq.scale_matrix(m);
            let scaling_s = t.elapsed().as_secs_f64();
            let backend = GpuCgBackend::new(gpu, &scaled, false, Some(&eq), &options)?;
            let b_dev = backend.upload(&eq.scale_rhs(&rhs))?;
            let mut x_dev = backend.upload(&vec![0.0; n])?;
            let t = Instant::now();
            let perf = pcg(&backend, &b_dev, &mut x_dev, &controls(), "p")?;
            let solve_ms = t.elapsed().as_secs_f64() * 1e3;
            let iterations = perf.iterations.max(1);
            let ms = time_per_iteration(
                gpu,
                &backend,
                &b_dev,
                &mut x_dev,
                iterations,
                s.check_interval,
            )?;
            rows.push(iteration_row(
                format!("PCG {label}"),
                pcg_iteration_bytes(n, nnz, false, true),
                ms,
                format!(
                    "{} iterations to 1e-6 (Jacobi-PCG {}), solve {solve_ms:.1} ms (Jacobi-PCG \
                     {:.1}); scaling {:.0} ms on the host, {} sweeps, deviation {:.1e}; {} launches",
                    perf.iterations,
                    solve.iterations,
                    solve_s * 1e3,
                    scaling_s * 1e3,
                    eq.sweeps(),
                    eq.deviation(),
                    backend.launch_mode().name()
                ),
            ));
        }
        Ok(solve_s)
    }

    fn options(&self, ordering: RowOrdering) -> GpuSolveOptions {
        GpuSolveOptions {
            ordering,
            ..self.settings.gpu_options()
        }
    }

    /// `solve_pcg_gpu` end to end in the first ordering, and the CPU solve
    /// (compared with that and with `solve_s`, the GPU solve alone).
    fn end_to_end(
        &self,
        a: &Csr,
        rhs: &[f64],
        solve_s: f64,
        rows: &mut Vec<Row>,
    ) -> anyhow::Result<()> {
        let (gpu, s) = (self.gpu, self.settings);
        let ordering = s.orderings[0];
        let options = self.options(ordering);
        // Input checks, ordering, mod-SELL build, upload, download: one
        // warm-up, then the timed call.
        let mut x = vec![0.0; a.n_rows()];
        let end_to_end = |x: &mut [f64]| {
            solve_pcg_gpu(
                gpu,
                PreconditionerKind::Jacobi,
                DeviceSolve::new(a, rhs, x, &controls(), &options).named("p"),
            )
        };
        end_to_end(&mut x)?;
        x.fill(0.0);
        let t = Instant::now();
        let perf = end_to_end(&mut x)?;
        let gpu_s = t.elapsed().as_secs_f64();
        rows.push(self.row(
            ordering,
            "PCG end to end",
            a,
            0.0,
            gpu_s * 1e3,
            format!(
                "{} iterations; input checks, ordering, mod-SELL build, upload, solve, download",
                perf.iterations
            ),
        ));
        if !s.cpu_solve {
            return Ok(());
        }
        let (cpu, xc, cpu_s) = timed_cpu_pcg(a, PreconditionerKind::Jacobi, rhs, &controls())?;
        rows.push(self.row(
            ordering,
            "PCG solve CPU",
            a,
            0.0,
            cpu_s * 1e3,
            format!(
                "{} iterations ({} threads); GPU {:.1}x as fast (solve), {:.1}x (end to end); \
                 max |x_gpu - x_cpu| / max|x| = {:.2e}",
                cpu.iterations,
                rayon::current_num_threads(),
                cpu_s / solve_s,
                cpu_s / gpu_s,
                max_rel_diff(&x, &xc)
            ),
        ));
        Ok(())
    }
}

/// Median wall time (ms) of `reps` runs of `work` on the host.
fn host_median_ms(
    reps: usize,
    mut work: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        work()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut t))
}

/// Assembly on the device against the CPU's and against one mod-SELL SpMV
/// of the same matrix on the same device, timed in this run: Γ = 1 + x per
/// cell (Γ = 1/a_P of a SIMPLE loop varies too) and uniform, `Gauss linear
/// corrected` with Gauss gradients, p = 0 on every patch; the correction
/// with a smooth field. The device results are checked against the CPU's.
fn assembly_rows(
    gpu: &Gpu,
    spec: &str,
    mesh: &Mesh,
    geometry: &Geometry,
    settings: &BenchSettings,
    copy: f64,
) -> anyhow::Result<Vec<Row>> {
    let varying = poisson_problem(mesh, CellField::function(|c| 1.0 + c.x));
    let uniform = poisson_problem(mesh, CellField::Uniform(1.0));
    let mut system = LaplacianSystem::new(mesh, geometry, Schemes::default(), &varying)?;
    let (n, nnz) = (mesh.n_cells(), system.matrix.nnz());
    let f = mesh.n_internal_faces();
    let empty: usize = mesh
        .patches()
        .iter()
        .filter(|p| p.kind == PatchKind::Empty)
        .map(|p| p.size)
        .sum();
    let b = mesh.n_faces() - f - empty;
    let p: Vec<f64> = geometry
        .cell_centres
        .iter()
        .map(|c| c.x * c.y + c.z)
        .collect();
    let cpu_reps = 3;
    let evaluate_ms = host_median_ms(cpu_reps, || Ok(system.evaluate(&varying).map(|_| ())?))?;
    let cpu_assembly_ms = host_median_ms(cpu_reps, || Ok(system.reassemble(&varying)?))?;
    let cpu_correction_ms = host_median_ms(cpu_reps, || Ok(system.update_rhs(&p, None)?))?;

    gpu.synchronize()?;
    let free_before = gpu.memory()?.0;
    let t = Instant::now();
    let mut device = DeviceLaplacian::new(gpu, &system, &varying, settings.slice_height)?;
    gpu.synchronize()?;
    let setup_s = t.elapsed().as_secs_f64();
    // Topology, geometry, map and the mod-SELL arrays of the device system.
    let device_bytes = free_before.saturating_sub(gpu.memory()?.0);
    let values = system.evaluate(&varying)?;
    let t = Instant::now();
    device.upload_values(&values)?;
    gpu.synchronize()?;
    let upload_ms = t.elapsed().as_secs_f64() * 1e3;
    let assembly_ms = time_median(gpu, 3, settings.reps, |_| device.assemble())?;
    let p_dev = device.to_device_order(&p)?;
    let correction_ms = time_median(gpu, 3, settings.reps, |_| {
        device
            .update_rhs(&p_dev, None)
            .map_err(|e| GpuError::Invalid(e.to_string()))
    })?;
    // The CPU system holds the same assembly and update_rhs(p).
    let matrix = device.download_matrix()?;
    let scale = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let max_diff = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
            / scale(b).max(f64::MIN_POSITIVE)
    };
    let matrix_diff = if matrix.cols() == system.matrix.cols() {
        max_diff(matrix.values(), system.matrix.values())
    } else {
        f64::INFINITY
    };
    let rhs_diff = max_diff(&device.download_rhs()?, &system.rhs);
    let sets = (200_000_000 / (16 * n)).clamp(2, 16);
    let xs: Vec<CudaSlice<f64>> = (0..sets)
        .map(|k| gpu.upload(&vec![1.0 + k as f64 / 7.0; n]))
        .collect::<Result<_, _>>()?;
    let ys: Vec<CudaSlice<f64>> = (0..sets).map(|_| gpu.zeros(n)).collect::<Result<_, _>>()?;
    let spmv_ms = time_median(gpu, 5, settings.reps, |i| {
        device.matrix()?.spmv(gpu, &xs[i % sets], &ys[i % sets])
    })?;
    device.upload_values(&system.evaluate(&uniform)?)?;
    let uniform_ms = time_median(gpu, 3, settings.reps, |_| device.assemble())?;

    let row = |what: &str, bytes: f64, ms: f64, note: String| Row {
        case: spec.to_string(),
        ordering: RowOrdering::Rcm.name().into(),
        what: what.into(),
        n,
        nnz,
        bytes,
        ms,
        gb_s: bytes / (ms * 1e-3) / 1e9,
        of_copy: bytes / (ms * 1e-3) / 1e9 / copy,
        note,
    };
    let of_spmv = |ms: f64| format!("{:.2}x SpMV ({spmv_ms:.4} ms, same matrix)", ms / spmv_ms);
    let assembly = assembly_bytes(n, f, b, false);
    let both = assembly + correction_bytes(n, f, b);
    let both_ms = assembly_ms + correction_ms;
    Ok(vec![
        row(
            "assembly GPU",
            assembly,
            assembly_ms,
            format!(
                "Gamma per cell: {}; CPU {cpu_assembly_ms:.1} ms ({:.0}x); values upload \
                 {upload_ms:.1} ms; set-up {setup_s:.1} s; device memory {:.0} MB ({:.0} B \
                 per cell); max |A_gpu - A_cpu| / max|A| {matrix_diff:.1e}",
                of_spmv(assembly_ms),
                cpu_assembly_ms / assembly_ms,
                device_bytes as f64 / 1e6,
                device_bytes as f64 / n as f64
            ),
        ),
        row(
            "asm GPU uniform",
            assembly_bytes(n, f, b, true),
            uniform_ms,
            format!("Gamma uniform: {}", of_spmv(uniform_ms)),
        ),
        row(
            "asm+corr GPU",
            both,
            both_ms,
            format!(
                "assembly + explicit correction (update_rhs {correction_ms:.4} ms): {}; CPU \
                 {:.1} ms ({:.0}x); max |b_gpu - b_cpu| / max|b| {rhs_diff:.1e}",
                of_spmv(both_ms),
                cpu_assembly_ms + cpu_correction_ms,
                (cpu_assembly_ms + cpu_correction_ms) / both_ms
            ),
        ),
        row(
            "assembly CPU",
            0.0,
            cpu_assembly_ms,
            format!(
                "LaplacianSystem::reassemble, one thread, of which {evaluate_ms:.1} ms host \
                 evaluation of the problem (both paths); update_rhs {cpu_correction_ms:.1} ms"
            ),
        ),
    ])
}

/// The bench's solver controls: OpenFOAM residual 1e-6 from x = 0.
pub(super) fn controls() -> SolverControls {
    SolverControls::absolute(1e-6, 5000)
}

/// The CPU's PCG with `preconditioner` on `a` x = `b` from x = 0, as the
/// CPU rows time it: the performance, the solution and the seconds of the
/// set-up and solve together.
pub(super) fn timed_cpu_pcg(
    a: &Csr,
    preconditioner: PreconditionerKind,
    b: &[f64],
    controls: &SolverControls,
) -> anyhow::Result<(SolverPerformance, Vec<f64>, f64)> {
    let mut x = vec![0.0; a.n_rows()];
    let t = Instant::now();
    let perf = solve_pcg(a, preconditioner, b, &mut x, controls, "p")?;
    Ok((perf, x, t.elapsed().as_secs_f64()))
}

/// Jacobi-PCG on its fused device loop, the baseline of the preconditioner
/// tables: the solve of `a` x = `b` from x = 0 with [`controls`], timed on
/// the host after a warm-up solve (which captures the CUDA graph where the
/// backend uses one).
pub(super) struct JacobiBaseline {
    perf: SolverPerformance,
    pub ms: f64,
    launches: &'static str,
}

impl JacobiBaseline {
    pub fn measure(
        gpu: &Gpu,
        a: &Csr,
        b: &GpuVector,
        options: &GpuSolveOptions,
    ) -> anyhow::Result<Self> {
        let controls = controls();
        let jacobi = GpuCgBackend::new(gpu, a, true, None, options)?;
        let zeros = vec![0.0; a.n_rows()];
        let mut x = jacobi.upload(&zeros)?;
        pcg(&jacobi, b, &mut x, &controls, "p")?;
        jacobi.write(&mut x, &zeros)?;
        let t = Instant::now();
        let perf = pcg(&jacobi, b, &mut x, &controls, "p")?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        Ok(Self {
            perf,
            ms,
            launches: jacobi.launch_mode().name(),
        })
    }

    /// Whether the baseline reached the tolerance.
    pub fn converged(&self) -> bool {
        self.perf.converged
    }

    pub fn iterations(&self) -> usize {
        self.perf.iterations
    }

    pub fn performance(&self) -> &SolverPerformance {
        &self.perf
    }

    /// The note of the baseline's row, ending in `tail`.
    pub fn note(&self, tail: &str) -> String {
        format!(
            "{} iterations, {:.4} ms/iteration, final residual {:.3e} (fused loop, {} launches, \
             after a warm-up solve{tail})",
            self.perf.iterations,
            self.ms / self.perf.iterations.max(1) as f64,
            self.perf.final_residual,
            self.launches
        )
    }
}

/// The table printed last, then the notes.
pub fn table(report: &Report) -> String {
    let mut out = format!(
        "{:<34} {:<8} {:<24} {:>10} {:>11} {:>11} {:>9} {:>7}  {}\n",
        "case", "ordering", "what", "n", "MB counted", "ms", "GB/s", "of copy", "note"
    );
    for r in &report.rows {
        out += &format!(
            "{:<34} {:<8} {:<24} {:>10} {:>11.1} {:>11.4} {:>9.0} {:>7.2}  {}\n",
            r.case,
            r.ordering,
            r.what,
            r.n,
            r.bytes / 1e6,
            r.ms,
            r.gb_s,
            r.of_copy,
            r.note
        );
    }
    for line in &report.notes {
        out += &format!("note: {line}\n");
    }
    out
}

/// The rows as a JSON array.
pub fn json(report: &Report) -> String {
    format!(
        "[{}]",
        report
            .rows
            .iter()
            .map(Row::json)
            .collect::<Vec<_>>()
            .join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bubble_cases_are_the_density_contrast_case_on_the_mesh_given() {
        // cases/bubble_tet_3d's own mesh: the same matrix as the case.
        let case = std::path::Path::new(BUBBLE_CASE);
        let own = fvpoisson::case::initial_matrix(case).unwrap();
        let (a, b) = poisson_system("bubble:box:16x16x16:tet:perturb=0.2").unwrap();
        assert_eq!(a, own);
        assert_eq!(b.len(), a.n_rows());
        // On a hex box: the case's Γ (jumping by 1000), not the Poisson case's.
        let (hex, _) = poisson_system("bubble:box:20x20x20").unwrap();
        let (poisson, _) = poisson_system("box:20x20x20").unwrap();
        assert_eq!((hex.n_rows(), poisson.n_rows()), (8000, 8000));
        let diagonal_ratio = |m: &Csr| {
            let d: Vec<f64> = (0..m.n_rows())
                .map(|r| m.values()[m.slot(r, r).unwrap()])
                .collect();
            d.iter().cloned().fold(0.0, f64::max) / d.iter().cloned().fold(f64::INFINITY, f64::min)
        };
        assert!(diagonal_ratio(&hex) > 100.0, "{}", diagonal_ratio(&hex));
        assert!(diagonal_ratio(&poisson) < 10.0);
    }

    #[test]
    fn case_names_become_file_names() {
        assert_eq!(
            case_file_stem("box:28x28x28:tet:perturb=0.2"),
            "box_28x28x28_tet_perturb_0.2"
        );
        assert_eq!(case_file_stem("meshes/foam/cavity"), "meshes_foam_cavity");
    }

    #[test]
    fn the_table_ends_with_the_notes() {
        let report = Report {
            rows: vec![Row {
                case: "box:4x4x4".into(),
                ordering: "metis".into(),
                what: "ordering".into(),
                n: 64,
                nnz: 352,
                bytes: 0.0,
                ms: 1.5,
                gb_s: 0.0,
                of_copy: 0.0,
                note: "bandwidth 9, lambda 1.000 (H 512)".into(),
            }],
            notes: vec!["cuSPARSE not measured: no libcusparse".into()],
        };
        let table = table(&report);
        assert!(table.contains("metis    ordering"), "{table}");
        assert!(
            table.ends_with("note: cuSPARSE not measured: no libcusparse\n"),
            "{table}"
        );
        assert!(json(&report).starts_with("[{\"case\":\"box:4x4x4\",\"ordering\":\"metis\""));
    }

    #[test]
    fn bench_cases_come_from_mesh_sources_and_matrix_market_files() {
        let (a, b) = poisson_system("meshes/foam/cavity").unwrap();
        assert_eq!((a.n_rows(), b.len()), (400, 400));
        let (a, b) = poisson_system("tests/data/poisson2d_4x4.mtx").unwrap();
        let mut y = vec![0.0; a.n_rows()];
        a.spmv(&vec![1.0; a.n_cols()], &mut y);
        assert_eq!(b, y);
        assert!(poisson_system("meshes/no_such_mesh").is_err());
    }
}

//! `fvpoisson bench --preconditioners`: time to solution of PCG on the device
//! with every device preconditioner, in f64 and, where it has one, mixed
//! precision, against Jacobi-PCG on the device and the CPU's DIC-PCG in the
//! same run (the benchmark's table).
//!
//! Per case the system is ordered once per layout the preconditioners need
//! (RCM; RCM renumbered colour by colour; grown blocks for block Jacobi and
//! block-IC, `smooth::block_layout_for`) and uploaded; those orderings and
//! uploads are common and not counted (the colour layout's phases are
//! printed once per case and in the notes of its rows). Per row: set-up (building the
//! preconditioner on the uploaded matrix: factorisation, colouring,
//! polynomial bound and f32 copies, AMG hierarchy; its phases in the note,
//! each ended by a synchronisation in this timed path only, through
//! `gpu::setup::collect_phases`, in ms and SpMVs), iterations, solve (PCG
//! from x = 0 to the bench tolerance, OpenFOAM-normalised 1e-6, timed after
//! a warm-up solve: warm), total = set-up + solve, and the total's ratio to
//! Jacobi-PCG's solve and to the CPU's DIC-PCG (set-up + solve). The set-up
//! is also given in SpMV times: one mod-SELL SpMV of the RCM layout's
//! matrix, timed in the same run (mean of 20 after a warm-up). After each
//! case the three converged rows of least time to solution are printed
//! (and appended to the markdown), then the "GPU defaults" block: what an
//! unchanged fvSolution's DIC and GAMG run on the GPU
//! (`solve::registry::GPU_DEFAULTS`, measured as rows of their own), their
//! total time and its ratio to Jacobi-PCG and to the level-scheduled DIC
//! (colour order, f64) of the same run. Deflation rows (+Jacobi, +Neu1, +Neu2)
//! by stripes of RCM rows (Gupta et al.'s subdomains) on the resident RCM
//! matrix, then by as many compact subdomains grown over the RCM rows (a
//! layout of their own, once per mesh like the colour layout, its time in
//! the note), each phase timed and given in the note (in ms and SpMVs) with
//! the bytes a projection moves against an SpMV's. Before the first case every row runs
//! once on a small system (`warm_up`), so that no timed row includes kernel
//! compilation or module loading; the output says how long that took. The CPU DIC-PCG runs in natural order (rayon where
//! it parallelises); above `polynomial::CPU_DIC_MAX_ROWS` rows its
//! time is extrapolated from a timed fraction (set-up + 20 iterations) times
//! the iterations of the device DIC-PCG in RCM order, and labelled so.

use std::time::Instant;

use super::deflation::default_subdomains;
use super::polynomial::CPU_DIC_MAX_ROWS;
use super::smooth::{solve_warm, Ordered};
use super::tables::{
    contrast_case, controls, convergence_mark, poisson_system, rcm_system, timed_cpu_pcg,
    JacobiBaseline, Row,
};
use fvpoisson::gpu::amg::{gpu_amg_settings, DeviceAmg};
use fvpoisson::gpu::block_jacobi::BLOCK_IC_KERNELS;
use fvpoisson::gpu::deflation::{
    deflated_pcg_device, DeviceDeflation, DEFLATED_PCG_PRECONDITIONERS,
};
use fvpoisson::gpu::fsai::{DeviceFsai, SETUP_PLACE};
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions};
use fvpoisson::gpu::polynomial::DevicePolynomial;
use fvpoisson::gpu::registered::device_preconditioner;
use fvpoisson::gpu::setup::{collect_phases, SetupPhase};
use fvpoisson::gpu::smooth::{
    block_layout_for, colour_layout_resident, gpu_preconditioner, DevicePreconditioner,
};
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::amg::AmgSettings;
use fvpoisson::solve::deflation::Subdomains;
use fvpoisson::solve::fsai::FsaiSettings;
use fvpoisson::solve::precond::Dic;
use fvpoisson::solve::registry::{self, GpuDefault, Role};
use fvpoisson::solve::{
    pcg, ColouringKind, CpuBackend, InnerSolver, PolynomialKind, PolynomialSettings, Precision,
    Preconditioner, PreconditionerKind, SmootherKind, SmootherSettings, SolverControls,
    SolverPerformance, Sweep,
};
use fvpoisson::sparse::blocks::grown_blocks;
use fvpoisson::sparse::{Csr, Permutation};

/// The cases of the table: the 8M-cell hex box, the perturbed tet box and
/// the density-contrast case (`--quick`: small ones).
pub fn default_cases(quick: bool) -> Vec<String> {
    let cases: [&str; 3] = match quick {
        false => [
            "box:200x200x200",
            "box:94x94x94:tet:perturb=0.2:renumber",
            "benches/bubble_hex_3d_8m",
        ],
        true => [
            "box:40x40x40",
            "box:20x20x20:tet:perturb=0.2:renumber",
            "cases/bubble_tet_3d",
        ],
    };
    cases.map(String::from).to_vec()
}

/// The system of a case: a case directory (density contrast: its first
/// system, b = A x* for a random x*), else a bench mesh source.
fn case_system(case: &str) -> anyhow::Result<(Csr, Vec<f64>)> {
    let dir = std::path::Path::new(case);
    if dir.is_dir() && (dir.join("case.toml").exists() || dir.join("system").exists()) {
        let (_, a, b) = contrast_case(dir)?;
        return Ok((a, b));
    }
    poisson_system(case)
}

/// One measured row before the ratios.
struct Entry {
    what: String,
    ordering: &'static str,
    /// None: included in `solve_ms` (one call).
    setup_ms: Option<f64>,
    iterations: Option<usize>,
    solve_ms: f64,
    /// Whether the solve reached the tolerance (a failed one did not).
    converged: bool,
    note: String,
}

impl Entry {
    /// A row whose set-up failed: no iterations, no solve.
    fn setup_failed(what: String, ordering: &'static str, note: String) -> Self {
        Entry {
            what,
            ordering,
            setup_ms: None,
            iterations: None,
            solve_ms: f64::NAN,
            converged: false,
            note,
        }
    }

    /// A row set up in `setup_ms` and solved in `solve_ms`: the iterations
    /// and convergence of `perf`, the solve's result (`None`: it failed).
    fn solved(
        what: String,
        ordering: &'static str,
        setup_ms: f64,
        solve_ms: f64,
        perf: Option<&SolverPerformance>,
        note: String,
    ) -> Self {
        Entry {
            what,
            ordering,
            setup_ms: Some(setup_ms),
            iterations: perf.map(|perf| perf.iterations),
            solve_ms,
            converged: perf.is_some_and(|perf| perf.converged),
            note,
        }
    }

    fn total(&self) -> f64 {
        self.setup_ms.unwrap_or(0.0) + self.solve_ms
    }
}

/// The time of one SpMV with `m` (ms): the mean of `reps` back-to-back
/// launches after one warm-up, on the device clock's host view (the stream
/// synchronised before and after).
fn spmv_ms(gpu: &Gpu, m: &DeviceModSell, reps: usize) -> anyhow::Result<f64> {
    let x = gpu.upload(&fvpoisson::fvm::testing::random_field(m.n, 5))?;
    let y = gpu.zeros::<f64>(m.n)?;
    m.spmv(gpu, &x, &y)?;
    gpu.synchronize()?;
    let t = Instant::now();
    for _ in 0..reps {
        m.spmv(gpu, &x, &y)?;
    }
    gpu.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / reps.max(1) as f64)
}

/// The set-up in SpMV times ("incl." where it is part of the solve's time).
fn setup_in_spmvs(e: &Entry, spmv_ms: f64) -> String {
    e.setup_ms
        .map_or("incl.".into(), |s| format!("{:.1}", s / spmv_ms))
}

/// The `count` converged entries with the shortest time to solution
/// (set-up + solve), fastest first.
fn fastest(entries: &[Entry], count: usize) -> Vec<&Entry> {
    let mut ranked: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.converged && e.total().is_finite())
        .collect();
    ranked.sort_by(|a, b| a.total().total_cmp(&b.total()));
    ranked.truncate(count);
    ranked
}

/// The table of `cases` (`slice_height`: RCM and colour layouts; blocks of
/// up to `block_size` rows), its rows and a markdown table for the README.
pub fn run(
    gpu: &Gpu,
    cases: &[String],
    slice_height: usize,
    block_size: usize,
    cpu: bool,
) -> anyhow::Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    let mut markdown = String::from(
        "| case | preconditioner | order | setup ms | setup in SpMVs | iterations | solve ms | \
         total ms | vs Jacobi-PCG | vs CPU DIC-PCG |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut podium = String::new();
    let warm_up_s = warm_up(gpu, slice_height, block_size)?;
    eprintln!(
        "kernel modules compiled/loaded and every row run once on {WARM_UP_CASE} in \
         {warm_up_s:.1} s, before any timed row"
    );
    podium +=
        &format!("warm-up (kernel modules, every row once on {WARM_UP_CASE}): {warm_up_s:.1} s\n");
    for case in cases {
        let t = Instant::now();
        let (a, b) = case_system(case)?;
        eprintln!(
            "{case}: n = {}, nnz = {}, system in {:.1} s",
            a.n_rows(),
            a.nnz(),
            t.elapsed().as_secs_f64()
        );
        let (entries, spmv) = case_entries(gpu, case, &a, &b, slice_height, block_size, cpu)?;
        let base = entries
            .iter()
            .find(|e| e.what == "Jacobi")
            .map_or(f64::NAN, Entry::total);
        let cpu_ms = entries
            .iter()
            .find(|e| e.what.starts_with("CPU DIC"))
            .map_or(f64::NAN, Entry::total);
        for e in &entries {
            let total = e.total();
            let setup = e.setup_ms.map_or("incl.".into(), |s| format!("{s:.1}"));
            let setup_spmvs = setup_in_spmvs(e, spmv);
            let iterations = e.iterations.map_or("-".into(), |i| i.to_string());
            let (vs_jacobi, vs_cpu) = (total / base, total / cpu_ms);
            markdown += &format!(
                "| {case} | {} | {} | {setup} | {setup_spmvs} | {iterations} | {:.1} | \
                 {total:.1} | {vs_jacobi:.2} | {vs_cpu:.3} |\n",
                e.what, e.ordering, e.solve_ms
            );
            rows.push(Row::timing(
                case,
                e.ordering,
                e.what.clone(),
                (a.n_rows(), a.nnz()),
                total,
                format!(
                    "setup {setup} ms ({setup_spmvs} SpMVs of {spmv:.3} ms), {iterations} \
                     iterations, solve {:.1} ms, total {total:.1} ms, x{vs_jacobi:.2} of \
                     Jacobi-PCG, x{vs_cpu:.3} of CPU DIC-PCG; {}",
                    e.solve_ms, e.note
                ),
            ));
        }
        podium += &format!("{case} (one SpMV {spmv:.3} ms), fastest to solution:\n");
        for (place, e) in fastest(&entries, 3).into_iter().enumerate() {
            podium += &format!(
                "  {}. {} ({}): {:.1} ms = set-up {} ms ({} SpMVs) + solve {:.1} ms, x{:.2} of \
                 Jacobi-PCG\n",
                place + 1,
                e.what,
                e.ordering,
                e.total(),
                e.setup_ms.map_or("incl.".into(), |s| format!("{s:.1}")),
                setup_in_spmvs(e, spmv),
                e.solve_ms,
                e.total() / base
            );
        }
        podium += &gpu_defaults_block(&entries, base);
    }
    eprint!("{podium}");
    markdown += &format!("\n{podium}");
    Ok((rows, markdown))
}

/// The label of the row that measures the GPU default of `row`.
fn gpu_default_label(row: &GpuDefault) -> String {
    format!("GPU default for {}", row.given)
}

/// The given preconditioners of the "GPU defaults" block: DIC (PCG) and
/// GAMG, with the settings their rows run (as the GPU runs them).
fn gpu_defaults() -> Vec<(&'static GpuDefault, Preconditioner)> {
    let dic = Preconditioner::Kind(PreconditionerKind::Dic);
    let gamg = Preconditioner::Amg(AmgSettings::default());
    [dic, gamg]
        .into_iter()
        .filter_map(|given| {
            let row = registry::gpu_default(&given, Role::Pcg, false)?;
            Some((row, gpu_preconditioner(&row.settings(&given))))
        })
        .collect()
}

/// The "GPU defaults" block of one case: per default its total time, and
/// the ratios to Jacobi-PCG (`base`, ms) and to the level-scheduled DIC row
/// (colour order, f64) of the same run.
fn gpu_defaults_block(entries: &[Entry], base: f64) -> String {
    let dic = entries
        .iter()
        .find(|e| e.what == "DIC" && e.ordering == "rcm+col")
        .map_or(f64::NAN, Entry::total);
    let mut block = String::from(
        "  GPU defaults (an unchanged fvSolution with --device gpu; solve::registry):\n",
    );
    for (row, settings) in gpu_defaults() {
        let label = gpu_default_label(row);
        match entries.iter().find(|e| e.what == label) {
            Some(e) if e.converged => {
                block += &format!(
                    "    {} -> {settings} ({}): {:.1} ms, x{:.2} of Jacobi-PCG, x{:.2} of \
                     level-scheduled DIC (rcm+col, {:.1} ms)\n",
                    row.given,
                    e.ordering,
                    e.total(),
                    e.total() / base,
                    e.total() / dic,
                    dic
                )
            }
            Some(e) => block += &format!("    {} -> {settings}: {}\n", row.given, e.note),
            None => block += &format!("    {} -> {settings}: not measured\n", row.given),
        }
    }
    block
}

/// The small system the warm-up runs every row on.
const WARM_UP_CASE: &str = "box:16x16x16";

/// The kernel sources the table's rows launch from (their modules compile
/// and load at once, on threads of their own). Not `amg_dense_refine.cu`:
/// the rows set each preconditioner up once and never update its values.
const TABLE_KERNEL_SOURCES: [&str; 15] = [
    "spmv.cu",
    "pcg.cu",
    "assembly.cu",
    "smooth.cu",
    "ic.cu",
    "polynomial.cu",
    "deflation.cu",
    "neumann.cu",
    "scan.cu",
    "amg.cu",
    "amg_inverse.cu",
    "amg_dense_fused.cu",
    "amg_cycle.cu",
    "block_ic.cu",
    "eisenstat.cu",
];

/// Compiles (or reads from the PTX cache) and loads the kernel modules of
/// every source the table uses, then runs every row once on
/// [`WARM_UP_CASE`] (untimed, its lines labelled so), so that no timed row
/// pays for NVRTC, module loading or a kernel's first load: without it the
/// first row to need a later source (Eisenstat SGS) compiled a whole module
/// (~7 s) inside its set-up. The seconds it took.
fn warm_up(gpu: &Gpu, slice_height: usize, block_size: usize) -> anyhow::Result<f64> {
    let t = Instant::now();
    gpu.prefetch(&TABLE_KERNEL_SOURCES);
    let (a, b) = poisson_system(WARM_UP_CASE)?;
    let label = format!("warm-up {WARM_UP_CASE} (not timed)");
    case_entries(gpu, &label, &a, &b, slice_height, block_size, false)?;
    gpu.synchronize()?;
    Ok(t.elapsed().as_secs_f64())
}

fn block_ic(name: &str, block_size: usize, precision: Precision) -> SmootherSettings {
    let mut s = SmootherSettings::named(name).expect("a block-IC name");
    s.block.block_size = block_size;
    s.polynomial.precision = precision;
    s
}

/// The entries of one case.
fn case_entries(
    gpu: &Gpu,
    case: &str,
    a: &Csr,
    b: &[f64],
    h: usize,
    block_size: usize,
    cpu: bool,
) -> anyhow::Result<(Vec<Entry>, f64)> {
    let n = a.n_rows();
    let controls = controls();
    let options = GpuSolveOptions {
        slice_height: h,
        ..GpuSolveOptions::default()
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut push = |e: Entry| {
        let setup = e
            .setup_ms
            .map_or("in the solve".into(), |ms| format!("{ms:.1} ms"));
        let iterations = e.iterations.map_or("-".into(), |i| i.to_string());
        eprintln!(
            "{case}: {} ({}): setup {setup}, {iterations} iterations, solve {:.1} ms; {}",
            e.what, e.ordering, e.solve_ms, e.note
        );
        entries.push(e);
    };
    // The layouts.
    let (a_rcm, b_rcm) = rcm_system(a, b);
    let mut by_rcm = Ordered::new(gpu, ("rcm", "RCM".into()), a_rcm, &b_rcm, &options)?;
    gpu.synchronize()?;
    let t = Instant::now();
    let (layout, colour_layout_phases) =
        collect_phases(|| colour_layout_resident(gpu, &by_rcm.a, &by_rcm.backend.shared_matrix()));
    let layout = layout?;
    let colour_layout_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut by_colour = Ordered::colours(
        gpu,
        "RCM, colour-contiguous".into(),
        layout,
        &b_rcm,
        &options,
    )?;
    let mut kernels = vec!["smooth_block"];
    kernels.extend(BLOCK_IC_KERNELS);
    let layout = block_layout_for(gpu, a, block_size, &kernels, "block preconditioners")?;
    let block_h = layout.0;
    let mut by_blocks = Ordered::blocks(gpu, layout, b, &options)?;

    // One SpMV on the RCM layout's matrix, the set-ups' unit.
    let spmv = spmv_ms(gpu, &by_rcm.backend.shared_matrix(), 20)?;
    eprintln!("{case}: one SpMV {spmv:.3} ms (RCM, mod-SELL)");
    // The colour layout is made once per mesh and shared by every rcm+col
    // row (not part of their set-ups).
    let colour_layout_note = format!(
        "colour layout, once per mesh and shared, not in the set-up: {colour_layout_ms:.1} ms \
         = {:.1} SpMVs: {}",
        colour_layout_ms / spmv,
        SetupPhase::describe(&colour_layout_phases, spmv)
    );
    eprintln!("{case}: {colour_layout_note}");
    // Jacobi-PCG, the baseline (the fused loop: set-up is the inverse
    // diagonal inside the backend).
    let baseline = JacobiBaseline::measure(gpu, &by_rcm.a, &by_rcm.b, &options)?;
    push(Entry {
        what: "Jacobi".into(),
        ordering: "rcm",
        setup_ms: Some(0.0),
        iterations: Some(baseline.iterations()),
        solve_ms: baseline.ms,
        converged: baseline.converged(),
        note: baseline.note(""),
    });
    let mixed_note = "mixed precision not implemented for this preconditioner";

    // Every other device preconditioner: (name, layout, builder).
    type Build<'g> =
        Box<dyn Fn(&Ordered<'g>) -> anyhow::Result<Box<dyn DevicePreconditioner + 'g>> + 'g>;
    let smoother = |s: SmootherSettings| -> Build<'_> {
        Box::new(move |o: &Ordered<'_>| {
            let (sm, _) = o.smoother(gpu, &s)?;
            Ok(
                Box::new(fvpoisson::gpu::smooth::DeviceSmootherPreconditioner::new(
                    sm, &s,
                )) as Box<dyn DevicePreconditioner>,
            )
        })
    };
    let ic = |kind: IcKind, precision: Precision| -> Build<'_> {
        Box::new(move |o: &Ordered<'_>| {
            // Set up on the device from the resident matrix; the colour
            // layout's colours are the sweeps' levels.
            Ok(Box::new(DeviceIncompleteCholesky::on_device(
                gpu,
                &o.a,
                &o.backend.shared_matrix(),
                kind,
                precision,
                o.colouring.as_ref(),
            )?) as Box<dyn DevicePreconditioner>)
        })
    };
    let polynomial = |kind: PolynomialKind, precision: Precision| -> Build<'_> {
        Box::new(move |o: &Ordered<'_>| {
            let s = PolynomialSettings {
                precision,
                ..PolynomialSettings::new(kind, 4)
            };
            Ok(Box::new(DevicePolynomial::new(
                gpu,
                &o.a,
                o.backend.shared_matrix(),
                &s,
            )?) as Box<dyn DevicePreconditioner>)
        })
    };
    // A registered algorithm's device form, on the resident matrix.
    let registered = |p: Preconditioner| -> Build<'_> {
        Box::new(move |o: &Ordered<'_>| match p {
            Preconditioner::Registered(r) => Ok(device_preconditioner(
                gpu,
                &o.a,
                o.backend.shared_matrix(),
                &r,
            )?),
            other => anyhow::bail!("{other} is not a registered algorithm"),
        })
    };
    let amg = || -> Build<'_> {
        Box::new(move |o: &Ordered<'_>| {
            let s = gpu_amg_settings(&AmgSettings::default());
            Ok(
                Box::new(DeviceAmg::new(gpu, o.backend.shared_matrix(), &s)?)
                    as Box<dyn DevicePreconditioner>,
            )
        })
    };
    let mut sgs = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
    sgs.colouring = ColouringKind::JonesPlassmann;
    let bj_sgs = SmootherSettings::block_jacobi(InnerSolver::SymGaussSeidel, 0.0, 1, block_h);
    #[derive(Clone, Copy)]
    enum Layout {
        Rcm,
        Colour,
        Blocks,
    }
    let mut list: Vec<(String, Layout, Build<'_>, String)> = Vec::new();
    for (kind, name) in [(IcKind::Dic, "DIC"), (IcKind::Ic0, "IC(0)")] {
        for layout in [Layout::Rcm, Layout::Colour] {
            for precision in [Precision::Double, Precision::Mixed] {
                let label = match precision {
                    Precision::Double => name.to_string(),
                    Precision::Mixed => format!("{name} mixed"),
                };
                list.push((label, layout, ic(kind, precision), String::new()));
            }
        }
    }
    for name in ["blockDIC", "blockIC"] {
        for precision in [Precision::Double, Precision::Mixed] {
            let label = match precision {
                Precision::Double => name.to_string(),
                Precision::Mixed => format!("{name} mixed"),
            };
            let s = block_ic(name, block_h, precision);
            list.push((label, Layout::Blocks, smoother(s), String::new()));
        }
    }
    for kind in [SmootherKind::Jacobi, SmootherKind::L1Jacobi] {
        for precision in [Precision::Double, Precision::Mixed] {
            let mut s = SmootherSettings::new(kind);
            s.sweeps = 2;
            s.omega = 0.8;
            s.polynomial.precision = precision;
            let label = match precision {
                Precision::Double => format!("2x{}(0.8)", kind.name()),
                Precision::Mixed => format!("2x{}(0.8) mixed", kind.name()),
            };
            list.push((label, Layout::Rcm, smoother(s), String::new()));
        }
    }
    let bj_cg = SmootherSettings::block_jacobi(InnerSolver::Cg, 0.0, 4, block_h);
    for (settings, name) in [(bj_sgs, "inner symGS x1"), (bj_cg, "inner CG x4")] {
        for precision in [Precision::Double, Precision::Mixed] {
            let mut s = settings;
            s.polynomial.precision = precision;
            let label = match precision {
                Precision::Double => format!("blockJacobi ({name})"),
                Precision::Mixed => format!("blockJacobi ({name}) mixed"),
            };
            list.push((label, Layout::Blocks, smoother(s), String::new()));
        }
    }
    let mut sgs_mixed = sgs;
    sgs_mixed.polynomial.precision = Precision::Mixed;
    list.push((
        "multicolour symGS".into(),
        Layout::Colour,
        smoother(sgs),
        String::new(),
    ));
    list.push((
        "multicolour symGS mixed".into(),
        Layout::Colour,
        smoother(sgs_mixed),
        String::new(),
    ));
    for kind in PolynomialKind::ALL {
        for precision in [Precision::Double, Precision::Mixed] {
            let label = match precision {
                Precision::Double => format!("{}(4)", kind.name()),
                Precision::Mixed => format!("{}(4) mixed", kind.name()),
            };
            list.push((
                label,
                Layout::Rcm,
                polynomial(kind, precision),
                String::new(),
            ));
        }
    }
    // Gupta et al.'s (2011) Neu1 and Neu2.
    for p in &DEFLATED_PCG_PRECONDITIONERS[2..] {
        let label = p.to_string();
        list.push((label, Layout::Rcm, registered(*p), mixed_note.into()));
    }
    // Bernaschi et al.'s (2019) adaptive FSAI with its defaults, set up on
    // the device from the resident matrix (`DeviceFsai::setup`: the phases
    // in its note).
    let fsai_settings = FsaiSettings::default();
    list.push((
        format!("{fsai_settings}"),
        Layout::Rcm,
        Box::new(move |o: &Ordered<'_>| {
            let resident = o.backend.shared_matrix();
            let (fsai, _) =
                DeviceFsai::setup(gpu, &o.a, Some(&resident), &fsai_settings, SETUP_PLACE)?;
            Ok(Box::new(fsai) as Box<dyn DevicePreconditioner>)
        }),
        String::new(),
    ));
    list.push((
        "AMG (defaults: K-cycle, f64)".into(),
        Layout::Rcm,
        amg(),
        mixed_note.into(),
    ));
    // What an unchanged fvSolution's DIC and GAMG run on the GPU.
    for (row, settings) in gpu_defaults() {
        let build: Build<'_> = match settings {
            Preconditioner::Polynomial(s) => Box::new(move |o: &Ordered<'_>| {
                Ok(Box::new(DevicePolynomial::on_device(
                    gpu,
                    o.backend.shared_matrix(),
                    &s,
                )?) as Box<dyn DevicePreconditioner>)
            }),
            Preconditioner::Amg(s) => Box::new(move |o: &Ordered<'_>| {
                Ok(
                    Box::new(DeviceAmg::new(gpu, o.backend.shared_matrix(), &s)?)
                        as Box<dyn DevicePreconditioner>,
                )
            }),
            other => anyhow::bail!("the GPU default {other} has no bench row"),
        };
        list.push((
            gpu_default_label(row),
            Layout::Rcm,
            build,
            format!("{settings}"),
        ));
    }
    let mut dic_rcm_iterations = None;
    for (what, layout, build, extra) in list {
        let ordered = match layout {
            Layout::Rcm => &mut by_rcm,
            Layout::Colour => &mut by_colour,
            Layout::Blocks => &mut by_blocks,
        };
        gpu.synchronize()?;
        let free_before = gpu.memory()?.0;
        let t = Instant::now();
        // Each phase synchronised at its end (this timed path only).
        let (built, phases) = collect_phases(|| build(ordered));
        gpu.synchronize()?;
        let setup_ms = t.elapsed().as_secs_f64() * 1e3;
        // What the preconditioner holds: fresh device memory is a large
        // part of a set-up's time.
        let held = free_before.saturating_sub(gpu.memory()?.0);
        let setup_note = format!(
            "{}; holds {:.0} MB of device memory",
            setup_note(&phases, setup_ms, spmv),
            held as f64 / 1e6
        );
        let entry = match built {
            Err(e) => Entry::setup_failed(what, ordered.ordering, format!("set-up failed: {e}")),
            Ok(p) => {
                let (solve_ms, result) = solve_warm(ordered, p, &controls)?;
                let note = match &result {
                    Ok(perf) => format!(
                        "final residual {:.3e}{} ({}{})",
                        perf.final_residual,
                        convergence_mark(perf.converged),
                        ordered.name,
                        if extra.is_empty() {
                            String::new()
                        } else {
                            format!("; {extra}")
                        }
                    ),
                    Err(e) => format!("failed: {e}"),
                };
                let note = match layout {
                    Layout::Colour => format!("{note}; {setup_note}; {colour_layout_note}"),
                    _ => format!("{note}; {setup_note}"),
                };
                let entry = Entry::solved(
                    what,
                    ordered.ordering,
                    setup_ms,
                    solve_ms,
                    result.as_ref().ok(),
                    note,
                );
                if entry.what == "DIC" && matches!(layout, Layout::Rcm) {
                    dic_rcm_iterations = entry.iterations;
                }
                entry
            }
        };
        push(entry);
    }

    let (bench, colouring) = by_colour.eisenstat(gpu, &controls)?;
    let note = match &bench.result {
        Ok(perf) => format!(
            "final residual {:.3e}{} ({}, {} colours, {}; {mixed_note}); {}; {}",
            perf.final_residual,
            convergence_mark(perf.converged),
            by_colour.name,
            colouring.n_colours(),
            bench.phases(None),
            setup_note(&bench.setup_phases, bench.setup_ms, spmv),
            colour_layout_note
        ),
        Err(e) => format!("failed: {e}"),
    };
    push(Entry::solved(
        "Eisenstat SGS".into(),
        by_colour.ordering,
        bench.setup_ms,
        bench.solve_ms,
        bench.result.as_ref().ok(),
        note,
    ));

    // Deflation (+Jacobi, +neu1, +neu2), stripes of RCM rows (Gupta et
    // al.'s subdomains), set up on the resident RCM matrix as the other rows
    // and solved warm.
    let k = default_subdomains(n);
    let stripes = Subdomains::stripes(n, k)?;
    for kind in &DEFLATED_PCG_PRECONDITIONERS[1..] {
        push(deflation_entry(
            gpu,
            &mut by_rcm,
            kind,
            (&stripes, "stripes of RCM rows"),
            &controls,
            &options,
            spmv,
        )?);
    }
    // The same count of compact subdomains: a stripe's constant misses the
    // modes smooth along it (docs/src/deflation.md), a compact piece of the
    // mesh does not. Made once per mesh, as the colour layout.
    let t = Instant::now();
    let (mut by_subdomains, compact) = compact_subdomains(gpu, &by_rcm.a, &b_rcm, k, &options)?;
    let layout_ms = t.elapsed().as_secs_f64() * 1e3;
    let compact_note = format!(
        "subdomains grown over the RCM rows (layout once per mesh, not in the set-up: \
         {layout_ms:.1} ms = {:.1} SpMVs)",
        layout_ms / spmv
    );
    for kind in &DEFLATED_PCG_PRECONDITIONERS[1..] {
        push(deflation_entry(
            gpu,
            &mut by_subdomains,
            kind,
            (&compact, &compact_note),
            &controls,
            &options,
            spmv,
        )?);
    }

    if cpu {
        push(cpu_dic(a, b, &controls, dic_rcm_iterations)?);
    }
    Ok((entries, spmv))
}

/// `a` (in RCM order) and `b` renumbered into `k` compact subdomains of
/// equal size (the last one smaller), each grown breadth first over the
/// RCM rows ([`grown_blocks`]), on the device; the subdomains in that order.
fn compact_subdomains<'g>(
    gpu: &'g Gpu,
    a: &Csr,
    b: &[f64],
    k: usize,
    options: &GpuSolveOptions,
) -> anyhow::Result<(Ordered<'g>, Subdomains)> {
    let n = a.n_rows();
    let size = n.div_ceil(k);
    let order = grown_blocks(a, size, &Permutation::identity(n));
    let ordered = Ordered::new(
        gpu,
        (
            "subdomains",
            format!("{size}-row subdomains grown over RCM"),
        ),
        order.apply_symmetric(a),
        &order.to_new(b),
        options,
    )?;
    let offsets = (0..n.div_ceil(size)).map(|p| p * size).chain([n]).collect();
    Ok((ordered, Subdomains::from_offsets(offsets)?))
}

/// The row of deflated PCG with `kind` (Jacobi, or a registered algorithm:
/// Neu1, Neu2) by `subdomains` (described in the note by its words) on
/// `ordered`'s resident matrix: set-up (Jacobi:
/// a backend with 1/a_ii on the shared matrix; a registered one: its device
/// form on the shared matrix; then
/// `DeviceDeflation::new_timed`) timed as a whole and per phase (each phase
/// also in SpMVs of `spmv_ms`), then the solve from x = 0 run twice and
/// timed the second time, as `solve_warm`. The note also compares the bytes
/// one projection moves with one SpMV's.
fn deflation_entry<'g>(
    gpu: &'g Gpu,
    ordered: &mut Ordered<'g>,
    kind: &Preconditioner,
    (subdomains, described): (&Subdomains, &str),
    controls: &SolverControls,
    options: &GpuSolveOptions,
    spmv_ms: f64,
) -> anyhow::Result<Entry> {
    let what = format!("deflation + {kind}");
    let failed = |note: String| Entry::setup_failed(what.clone(), ordered.ordering, note);
    // The row before left its preconditioner (an AMG hierarchy, say) and
    // its graphs on the shared backend: freed here, not inside this row's
    // set-up.
    ordered.backend.clear_preconditioner();
    gpu.synchronize()?;
    let t = Instant::now();
    let preconditioner: anyhow::Result<Option<GpuCgBackend<'g>>> = match kind {
        Preconditioner::Registered(r) => {
            device_preconditioner(gpu, &ordered.a, ordered.backend.shared_matrix(), r)
                .map(|m| {
                    ordered.backend.set_preconditioner(m);
                    None
                })
                .map_err(anyhow::Error::from)
        }
        _ => Ok(Some(GpuCgBackend::from_shared_resident(
            gpu,
            ordered.backend.shared_matrix(),
            true,
            options,
        )?)),
    };
    let jacobi_backend = match preconditioner {
        Ok(b) => b,
        Err(e) => return Ok(failed(format!("set-up failed: {e}"))),
    };
    gpu.synchronize()?;
    let preconditioner_ms = t.elapsed().as_secs_f64() * 1e3;
    let backend = jacobi_backend.as_ref().unwrap_or(&ordered.backend);
    let ops = match DeviceDeflation::new_timed(gpu, backend.matrix(), subdomains) {
        Ok(ops) => ops,
        Err(e) => return Ok(failed(format!("set-up failed: {e}"))),
    };
    gpu.synchronize()?;
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut phases = vec![SetupPhase {
        name: match kind {
            Preconditioner::Registered(_) => format!("{kind} reciprocal diagonal"),
            _ => "backend with 1/a_ii".into(),
        },
        place: "device",
        ms: preconditioner_ms,
    }];
    phases.extend_from_slice(ops.setup_phases());
    let phases = SetupPhase::describe(&phases, spmv_ms);
    let zeros = vec![0.0; ordered.a.n_rows()];
    let mut x = backend.upload(&zeros)?;
    let _ = deflated_pcg_device(backend, &ops, &ordered.b, &mut x, controls);
    backend.write(&mut x, &zeros)?;
    let t = Instant::now();
    let result = deflated_pcg_device(backend, &ops, &ordered.b, &mut x, controls);
    let solve_ms = t.elapsed().as_secs_f64() * 1e3;
    let m = backend.matrix();
    let spmv_bytes = 12 * m.codes.len() + 24 * m.n;
    let bytes = ops.projection_bytes();
    let mb = |b: usize| b as f64 / 1e6;
    let traffic = format!(
        "projection per iteration {:.1} MB (restrict {:.1}, E⁻¹ {:.1}, subtract {:.1} with w {}, \
         prolong {:.1}) = {:.2}x one SpMV's {:.1} MB",
        mb(bytes.total()),
        mb(bytes.restrict),
        mb(bytes.coarse),
        mb(bytes.subtract),
        ops.width(),
        mb(bytes.prolong),
        bytes.total() as f64 / spmv_bytes as f64,
        mb(spmv_bytes)
    );
    let k = ops.subdomain_count();
    let note = match &result {
        Ok((perf, _)) => format!(
            "{k} {described}, final residual {:.3e}{}; set-up: {phases}; {traffic}",
            perf.final_residual,
            convergence_mark(perf.converged)
        ),
        Err(e) => format!("failed: {e}; set-up: {phases}"),
    };
    Ok(Entry::solved(
        what,
        ordered.ordering,
        setup_ms,
        solve_ms,
        result.as_ref().ok().map(|(perf, _)| perf),
        note,
    ))
}

/// A row's set-up in its phases, for the note: "set-up: <phase> (place)
/// x ms = y SpMVs, ...", then the time no phase holds (outside the spans:
/// host work before the first span, the final synchronisation).
fn setup_note(phases: &[SetupPhase], setup_ms: f64, spmv_ms: f64) -> String {
    let spanned: f64 = phases.iter().map(|p| p.ms).sum();
    let rest = (setup_ms - spanned).max(0.0);
    format!(
        "set-up: {}{}outside the phases {rest:.2} ms = {:.1} SpMVs",
        SetupPhase::describe(phases, spmv_ms),
        if phases.is_empty() { "" } else { ", " },
        rest / spmv_ms
    )
}

/// The CPU's DIC-PCG in natural order: measured, or above
/// [`CPU_DIC_MAX_ROWS`] extrapolated from set-up + 20 timed iterations and
/// `iterations` (the device DIC-PCG's, RCM order).
fn cpu_dic(
    a: &Csr,
    b: &[f64],
    controls: &SolverControls,
    iterations: Option<usize>,
) -> anyhow::Result<Entry> {
    let n = a.n_rows();
    if n <= CPU_DIC_MAX_ROWS {
        let (perf, _, seconds) = timed_cpu_pcg(a, PreconditionerKind::Dic, b, controls)?;
        return Ok(Entry {
            what: "CPU DIC".into(),
            ordering: "natural",
            setup_ms: None,
            iterations: Some(perf.iterations),
            solve_ms: seconds * 1e3,
            converged: perf.converged,
            note: format!(
                "set-up + solve, measured, final residual {:.3e}",
                perf.final_residual
            ),
        });
    }
    let mut x = vec![0.0; n];
    let t = Instant::now();
    let dic = Dic::new(a)?;
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;
    let steps = 20;
    let backend = CpuBackend::new(a, &dic);
    let t = Instant::now();
    pcg(
        &backend,
        &b.to_vec(),
        &mut x,
        &SolverControls::absolute(0.0, steps),
        "p",
    )?;
    let per_iteration = t.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let iterations = iterations.unwrap_or(0);
    Ok(Entry {
        what: "CPU DIC (extrapolated)".into(),
        ordering: "natural",
        setup_ms: Some(setup_ms),
        iterations: Some(iterations),
        solve_ms: per_iteration * iterations as f64,
        // Extrapolated from the device DIC-PCG's iterations (none: failed).
        converged: iterations > 0,
        note: format!(
            "EXTRAPOLATED: {per_iteration:.1} ms/iteration over {steps} timed iterations x \
             {iterations} iterations (the device DIC-PCG's, RCM order)"
        ),
    })
}

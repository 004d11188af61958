//! The measurements and studies of the `fvpoisson` binary, outside the
//! library: `fvpoisson bench` (the default tables in [`tables`], the
//! extra rows and the studies in the other modules) and `fvpoisson
//! preconditioners` ([`precond_study`]). [`Commands`] gives their
//! arguments and runs them for the library's command line
//! ([`fvpoisson::cli::main`]), which parses them among its own commands.
//!
//! They use the library through its public interface only, as any user
//! of the crate could; tests of the library do not depend on them.

mod amg;
mod deflation;
mod eisenstat;
mod flow;
mod fsai;
mod ilu;
mod krylov;
mod multi;
mod polynomial;
mod precond;
mod precond_study;
mod rank_deflation;
mod rank_loop;
mod smooth;
mod tables;

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use fvpoisson::solve::SolverControls;
use fvpoisson::sparse::RowOrdering;
use fvpoisson::timings::{Phase, PhaseClock, Timings};

/// `bench` and `preconditioners` for [`fvpoisson::cli::main`].
pub struct Commands;

impl fvpoisson::cli::Measurements for Commands {
    type Bench = BenchArgs;
    type Preconditioners = PreconditionersArgs;
    fn bench(args: BenchArgs) -> anyhow::Result<()> {
        bench(args)
    }
    fn preconditioners(args: PreconditionersArgs) -> anyhow::Result<()> {
        preconditioners(args)
    }
}

#[derive(Args)]
pub struct PreconditionersArgs {
    /// Case directory (case.toml or an OpenFOAM case): its first linear system.
    case: PathBuf,
    /// Right-hand side b = A x*: cosine (x*_i = cos(i), Gupta et al.'s (2011)) or random.
    #[arg(long, value_enum, default_value_t = precond_study::Rhs::Cosine)]
    rhs: precond_study::Rhs,
    /// Subdomains of the deflation: stripes (consecutive rows) or metis.
    #[arg(long, value_enum, default_value_t = precond_study::Partition::Stripes)]
    partition: precond_study::Partition,
    /// Number of subdomains (default 2 * ceil(sqrt(N)), the 2n of Gupta et al. 2011).
    #[arg(long)]
    subdomains: Option<usize>,
    /// Tolerance on the normalised residual (sum|r| / sum|b| from x = 0).
    #[arg(long, default_value = "1e-6")]
    tol: f64,
    /// Maximum number of iterations of each solve.
    #[arg(long, default_value_t = 5000)]
    max_iter: usize,
    /// Where to solve besides the CPU: auto (the GPU when there is one), gpu, cpu (CPU only).
    #[arg(long, value_enum, default_value_t = fvpoisson::gpu::DeviceChoice::Auto)]
    device: fvpoisson::gpu::DeviceChoice,
}

/// `preconditioners`: the case's matrix, the study, the table.
fn preconditioners(args: PreconditionersArgs) -> anyhow::Result<()> {
    use precond_study::{run, StudyConfig};
    let controls = SolverControls::absolute(args.tol, args.max_iter);
    controls
        .validate()
        .map_err(|e| anyhow::anyhow!("--tol/--max-iter: {e}"))?;
    let a = fvpoisson::case::initial_matrix(&args.case)?;
    if let Some(k) = args.subdomains {
        // The deflation's coarse operator is a dense k × k matrix, and more
        // subdomains than rows is no partition.
        let most = a.n_rows().min(fvpoisson::solve::deflation::MAX_SUBDOMAINS);
        anyhow::ensure!(
            (1..=most).contains(&k),
            "--subdomains {k}: expected 1 to {most} (at most the matrix's {} rows, and at \
             most {}: the k x k coarse matrix is dense)",
            a.n_rows(),
            fvpoisson::solve::deflation::MAX_SUBDOMAINS
        );
    }
    let gpu = args.device.select()?;
    let config = StudyConfig {
        rhs: args.rhs,
        partition: args.partition,
        subdomains: args.subdomains,
        controls,
    };
    let study = run(&a, &config, gpu.as_ref())
        .with_context(|| format!("preconditioner study of {}", args.case.display()))?;
    if let Some(gpu) = &gpu {
        println!("GPU: {}", gpu.name());
    }
    print!("{study}");
    Ok(())
}

/// The sections of `bench --help`.
const DEFAULT_TABLES: &str = "Default tables";
const EXTRA_ROWS: &str = "Extra rows";
const STUDIES: &str = "Studies (instead of the default tables)";
const SEVERAL_GPUS: &str = "Several GPUs (instead of the default tables)";
const OUTPUT: &str = "Output";

#[derive(Args)]
pub struct BenchArgs {
    /// Cases to measure: mesh sources (box specs, OpenFOAM cases, Gmsh files;
    /// the FVM Poisson system on them), Matrix Market `.mtx` matrices, or
    /// `bubble:MESH` (the density-contrast problem of cases/bubble_tet_3d,
    /// density ratio 1000, on the mesh source MESH).
    #[arg(default_values_t = [
        "box:64x64x64".to_string(),
        "box:200x200x200".to_string(),
        "box:28x28x28:tet:perturb=0.2:renumber".to_string(),
        "box:94x94x94:tet:perturb=0.2:renumber".to_string(),
    ])]
    meshes: Vec<String>,
    /// Row orderings to measure, comma-separated (natural, cm, rcm, metis);
    /// the first is used for the end-to-end solve and the CPU comparison.
    #[arg(
        help_heading = DEFAULT_TABLES,
        long,
        value_delimiter = ',',
        default_value = "rcm,natural,cm,metis"
    )]
    ordering: Vec<RowOrdering>,
    /// mod-SELL / SELL slice height.
    #[arg(help_heading = DEFAULT_TABLES, long, default_value_t = 512)]
    slice_height: usize,
    /// Timed repetitions per SpMV (median reported).
    #[arg(help_heading = DEFAULT_TABLES, long, default_value_t = 50)]
    reps: usize,
    /// PCG iterations between residual read-backs.
    #[arg(help_heading = DEFAULT_TABLES, long, default_value_t = 50)]
    check_interval: usize,
    /// Skip the CPU solve.
    #[arg(help_heading = DEFAULT_TABLES, long)]
    no_cpu: bool,
    /// Measure SpMV only (no PCG).
    #[arg(help_heading = DEFAULT_TABLES, long)]
    no_pcg: bool,
    /// Skip the assembly measurements (device against CPU).
    #[arg(help_heading = DEFAULT_TABLES, long)]
    no_assembly: bool,
    /// Skip cuSPARSE (measured by default where libcusparse can be loaded).
    #[arg(help_heading = DEFAULT_TABLES, long)]
    no_cusparse: bool,
    /// Write each case's matrix in each ordering to DIR/<case>.<ordering>.mtx
    /// (Matrix Market; input of benches/cusparse_cupy.py).
    #[arg(help_heading = OUTPUT, long, value_name = "DIR")]
    write_mtx: Option<PathBuf>,
    /// Also the smoother rows (CPU Gauss-Seidel, GPU Jacobi, multicolour GS,
    /// block Jacobi: residual reduction and time after a fixed number of sweeps)
    /// and PCG with each smoother, and with the level-scheduled DIC and IC(0),
    /// as preconditioner against Jacobi-PCG.
    #[arg(help_heading = EXTRA_ROWS, long)]
    smoothers: bool,
    /// Sweeps per smoother row.
    #[arg(help_heading = EXTRA_ROWS, long, default_value_t = 100)]
    smoother_sweeps: usize,
    /// Also PCG with the polynomial preconditioners (Neumann, Chebyshev, least
    /// squares; degrees 2, 4, 8; f64 and mixed precision): set-up, iterations,
    /// solve and total time against Jacobi-PCG and the CPU's DIC-PCG.
    #[arg(help_heading = EXTRA_ROWS, long)]
    polynomial: bool,
    /// Also the deflation rows: Jacobi/Neu1/Neu2-PCG on the GPU with and
    /// without subdomain deflation (time to solution, setup + solve) against
    /// DIC-PCG on the CPU, on each case and on --deflation-case.
    #[arg(help_heading = EXTRA_ROWS, long)]
    deflation: bool,
    /// Subdomains of the deflation rows (default min(2 * ceil(sqrt(N)), 512)).
    #[arg(help_heading = EXTRA_ROWS, long)]
    deflation_subdomains: Option<usize>,
    /// Density-contrast case directories measured by --deflation as well.
    #[arg(
        help_heading = EXTRA_ROWS,
        long,
        default_value = "cases/bubble_tet_3d"
    )]
    deflation_case: Vec<PathBuf>,
    /// Also the AMG rows: set-up (warm), value-only re-set-up, one cycle and
    /// PCG with the V-, W- and K-cycle to a relative residual of 1e-8 against
    /// Jacobi-PCG (RCM order, random right-hand side).
    #[arg(help_heading = EXTRA_ROWS, long)]
    amg: bool,
    /// AMG settings the --amg rows measure, as amg:key=value:... (repeat the
    /// flag for several; default: the V-, W- and K-cycle with the defaults).
    #[arg(help_heading = EXTRA_ROWS, long, value_name = "SETTINGS")]
    amg_variant: Vec<fvpoisson::solve::amg::AmgSettings>,
    /// Also the GMRES(20) and PBiCGStab rows (Jacobi; GPU and CPU; per
    /// iteration against the bandwidth floor) on each case and on the
    /// convection–diffusion system of each --krylov-cd mesh.
    #[arg(help_heading = EXTRA_ROWS, long)]
    krylov: bool,
    /// Meshes whose convection–diffusion system --krylov solves as well.
    #[arg(
        help_heading = EXTRA_ROWS,
        long,
        default_value = "box:48x48x48:tet:perturb=0.2"
    )]
    krylov_cd: Vec<String>,
    /// Also the ILU rows: GMRES(20) with ILU(0), ILU(1), DILU and (nested)
    /// RAS against GMRES-Jacobi (set-up, levels, iterations, solve, total),
    /// on Yang 2015's 3-D Poisson grid (Yang 2015, its numbers in the row
    /// labels) and on the convection-diffusion system of each --krylov-cd
    /// mesh; level counts by ordering.
    #[arg(help_heading = EXTRA_ROWS, long)]
    ilu: bool,
    /// Cells per side of the --ilu Poisson grid (Yang 2015: 120).
    #[arg(help_heading = EXTRA_ROWS, long, default_value_t = 120)]
    ilu_grid: usize,
    /// Also the FSAI rows: static FSAI (power 1, 2) and aFSAI (steps 5, 10,
    /// 20, 30 x epsilon 1e-3, 5e-3, 5e-2) against Jacobi-PCG: setup, density,
    /// iterations, solve and total time, on each case and on
    /// --deflation-case. With --device cpu: the CPU rows only.
    #[arg(help_heading = EXTRA_ROWS, long)]
    fsai: bool,
    /// FSAI settings the --fsai rows measure, as fsai:key=value,... (repeat
    /// the flag for several; default: the sweep above).
    #[arg(help_heading = EXTRA_ROWS, long, value_name = "SETTINGS")]
    fsai_variant: Vec<fvpoisson::solve::fsai::FsaiSettings>,
    /// Instead of the tables above: PCG time to solution (setup + solve,
    /// warm) with every device preconditioner, f64 and mixed precision,
    /// against Jacobi-PCG and the CPU's DIC-PCG, on the 8M-cell hex box, the
    /// perturbed tet box and the 3-D bubble (density ratio 1000,
    /// benches/bubble_hex_3d_8m).
    #[arg(help_heading = STUDIES, long)]
    preconditioners: bool,
    /// Small cases instead of the default meshes (box:40x40x40 and
    /// box:24x24x24:tet:perturb=0.2:renumber; the --deflation-case too); with
    /// --preconditioners, small meshes (a quick check of the table).
    #[arg(help_heading = DEFAULT_TABLES, long)]
    quick: bool,
    /// Print the rows as JSON after the table.
    #[arg(help_heading = OUTPUT, long)]
    json: bool,
    /// Where to run (the bench needs a GPU: cpu and auto without one exit with an error).
    #[arg(help_heading = DEFAULT_TABLES, long, value_enum, default_value_t = fvpoisson::gpu::DeviceChoice::Auto)]
    device: fvpoisson::gpu::DeviceChoice,
    /// Instead of the tables above: multi-GPU Jacobi-PCG (gpu::multi) strong
    /// and weak scaling on z-slab split boxes: time per iteration, parallel
    /// efficiency, communication share, time to solution.
    #[arg(help_heading = SEVERAL_GPUS, long)]
    multi_gpu: bool,
    /// GPU counts of --multi-gpu (counts above the devices present are skipped).
    #[arg(
        help_heading = SEVERAL_GPUS,
        long,
        value_delimiter = ',',
        default_value = "1,2,4"
    )]
    gpus: Vec<usize>,
    /// Cells per side of the --multi-gpu strong-scaling boxes (256: 16.8 M
    /// cells, 320: 32.8 M).
    #[arg(
        help_heading = SEVERAL_GPUS,
        long,
        value_delimiter = ',',
        default_value = "256,320"
    )]
    multi_strong: Vec<usize>,
    /// Cells per side per GPU of the --multi-gpu weak-scaling box (200: 8 M
    /// cells per GPU; 0: no weak scaling).
    #[arg(
        help_heading = SEVERAL_GPUS,
        long,
        default_value_t = 200
    )]
    multi_weak: usize,
    /// Timed PCG iterations per --multi-gpu measurement.
    #[arg(
        help_heading = SEVERAL_GPUS,
        long,
        default_value_t = 100
    )]
    multi_iterations: usize,
    /// How --multi-gpu moves halos between GPUs.
    #[arg(help_heading = SEVERAL_GPUS, long, value_enum, default_value_t = fvpoisson::gpu::multi::Transport::Auto)]
    transport: fvpoisson::gpu::multi::Transport,
    /// --multi-gpu's device loop runs PCG in its two-reduction form (that
    /// of the host loop) instead of the single-reduction form.
    #[arg(help_heading = SEVERAL_GPUS, long)]
    multi_two_reductions: bool,
    /// Instead of the tables above: PCG time to solution with Jacobi,
    /// multicolour symGS and symGS by Eisenstat's trick (eisenstatSGS) on
    /// MESHES given here (default: the 8M-cell perturbed tet box,
    /// box:110x110x110:tet:perturb=0.2:renumber), ratios to Jacobi-PCG.
    #[arg(help_heading = STUDIES, long, num_args = 0.., value_name = "MESH")]
    eisenstat: Option<Vec<String>>,
    /// Instead of the tables above: the SIMPLE loop on the device of the
    /// flow CASES given here (default: cases/cavity_3d, 4.1 M cells), p
    /// solved by Jacobi-PCG (the baseline) and by AMG-PCG with each
    /// --amg-variant (default: the K- and V-cycle); time per outer iteration
    /// by part, ratios to the Jacobi-PCG run.
    #[arg(help_heading = STUDIES, long, num_args = 0.., value_name = "CASE")]
    device_simple: Option<Vec<String>>,
    /// Instead of the tables above: Jacobi-PCG of a distributed run's GPU
    /// ranks (one thread rank per GPU) on the NCCL device loop and on the
    /// host-driven steps, against the one-process multi-GPU device loop, on
    /// the --multi-strong boxes for the --gpus counts of 2 or more.
    #[arg(help_heading = SEVERAL_GPUS, long)]
    rank_loop: bool,
    /// Instead of the tables above: subdomain deflation on GPU ranks (one
    /// deflation vector per rank; thread ranks, METIS) on MESHES given here
    /// (default: box:100x100x100 and box:50x50x50:tet:perturb=0.2): PCG iterations
    /// and time with Jacobi and block DIC, without and with deflation, and
    /// the CPU ranks' block DIC (unless --no-cpu).
    #[arg(help_heading = SEVERAL_GPUS, long, num_args = 0.., value_name = "MESH")]
    rank_deflation: Option<Vec<String>>,
    /// Rank counts of --rank-deflation.
    #[arg(
        help_heading = SEVERAL_GPUS,
        long,
        value_delimiter = ',',
        default_value = "2,4,8"
    )]
    deflation_ranks: Vec<usize>,
    /// Instead of the tables above: runs each case directory given here as
    /// `run` does (on --device; the CPU where there is no GPU) and prints
    /// its phase table, then one row per case: wall time, solve time, the
    /// ratio wall / solve and the other phases (JSON with --json).
    #[arg(help_heading = STUDIES, long, num_args = 1.., value_name = "CASE")]
    end_to_end: Option<Vec<PathBuf>>,
}

/// `bench`: see [`tables`] and the modules of the other tables.
fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(cases) = &args.end_to_end {
        return bench_end_to_end(cases, args.device, args.json);
    }
    if args.multi_gpu || args.rank_loop {
        // --rank-loop measures strong scaling only.
        let (strong, weak) = match (args.quick, args.multi_gpu) {
            (true, true) => (vec![64], 48),
            (true, false) => (vec![64], 0),
            (false, true) => (args.multi_strong, args.multi_weak),
            (false, false) => (args.multi_strong, 0),
        };
        let settings = multi::MultiBenchSettings {
            gpus: args.gpus,
            strong,
            weak,
            iterations: args.multi_iterations,
            transport: args.transport,
            slice_height: args.slice_height,
            single_reduction: !args.multi_two_reductions,
        };
        let (report, markdown) = match args.multi_gpu {
            true => multi::run(&settings)?,
            false => rank_loop::run(&settings)?,
        };
        print_bench(&report, Some(&markdown), args.json);
        return Ok(());
    }
    if let Some(meshes) = &args.rank_deflation {
        let meshes = match (meshes.is_empty(), args.quick) {
            (false, _) => meshes.clone(),
            (true, true) => vec!["box:40x40x40".into(), "box:20x20x20:tet:perturb=0.2".into()],
            (true, false) => rank_deflation::DEFAULT_MESHES.map(String::from).to_vec(),
        };
        let (rows, markdown) = rank_deflation::run(
            &meshes,
            &args.deflation_ranks,
            args.slice_height,
            !args.no_cpu,
        )?;
        let report = tables::Report::of_rows(rows);
        print_bench(&report, Some(&markdown), args.json);
        return Ok(());
    }
    let gpu = args.device.select()?;
    let no_gpu = || anyhow::anyhow!("bench measures the GPU and there is none to use");
    if let Some(cases) = &args.eisenstat {
        let gpu = gpu.ok_or_else(no_gpu)?;
        let cases = match cases.is_empty() {
            true => vec![eisenstat::DEFAULT_CASE.to_string()],
            false => cases.clone(),
        };
        let (rows, markdown) = eisenstat::run(&gpu, &cases, args.slice_height)?;
        let report = tables::Report::of_rows(rows);
        print_bench(&report, Some(&markdown), args.json);
        return Ok(());
    }
    if args.preconditioners {
        let gpu = gpu.ok_or_else(no_gpu)?;
        let cases = precond::default_cases(args.quick);
        let (rows, markdown) = precond::run(&gpu, &cases, args.slice_height, 512, !args.no_cpu)?;
        let report = tables::Report::of_rows(rows);
        print_bench(&report, Some(&markdown), args.json);
        return Ok(());
    }
    if let Some(cases) = &args.device_simple {
        let gpu = gpu.ok_or_else(no_gpu)?;
        let cases = match cases.is_empty() {
            true => vec![flow::DEFAULT_CASE.to_string()],
            false => cases.clone(),
        };
        let amg = match args.amg_variant.is_empty() {
            true => flow::default_amg(),
            false => args.amg_variant.clone(),
        };
        let (rows, markdown) = flow::run(&gpu, &cases, &amg)?;
        let report = tables::Report::of_rows(rows);
        print_bench(&report, Some(&markdown), args.json);
        return Ok(());
    }
    let meshes = match args.quick {
        true => fsai::QUICK_MESHES.map(String::from).to_vec(),
        false => args.meshes,
    };
    let settings = tables::BenchSettings {
        meshes,
        orderings: args.ordering,
        slice_height: args.slice_height,
        reps: args.reps,
        pcg: !args.no_pcg,
        cpu_solve: !args.no_cpu,
        assembly: !args.no_assembly,
        check_interval: args.check_interval,
        cusparse: !args.no_cusparse,
        write_mtx: args.write_mtx,
        smoothers: args.smoothers,
        smoother_sweeps: args.smoother_sweeps,
        polynomial: args.polynomial,
        deflation: args.deflation,
        deflation_subdomains: args.deflation_subdomains,
        deflation_cases: args.deflation_case,
        amg: args.amg,
        amg_variants: args.amg_variant,
        krylov: args.krylov,
        krylov_cd: args.krylov_cd,
        ilu_grid: args.ilu.then_some(args.ilu_grid),
        fsai: args.fsai,
        fsai_variants: args.fsai_variant,
    };
    let report = match (&gpu, args.fsai) {
        (Some(gpu), _) => tables::run(gpu, &settings)?,
        (None, true) => tables::run_fsai_cpu(&settings)?,
        (None, false) => {
            anyhow::bail!(
                "bench measures the GPU and there is none to use (only --fsai has CPU rows)"
            )
        }
    };
    print_bench(&report, None, args.json);
    Ok(())
}

/// `bench --end-to-end`: each case run as `run` runs it, under its own
/// phase clock; the phase tables, then the summary table.
fn bench_end_to_end(
    cases: &[PathBuf],
    device: fvpoisson::gpu::DeviceChoice,
    json: bool,
) -> anyhow::Result<()> {
    let mut rows = Vec::with_capacity(cases.len());
    for case in cases {
        let clock = PhaseClock::start();
        fvpoisson::cli::run_case_dir(case, device)
            .with_context(|| format!("case {}", case.display()))?;
        let account = clock.finish();
        log::info!(
            "{}: wall time by phase:\n{}",
            case.display(),
            account.table()
        );
        rows.push((case, account));
    }
    print!("{}", end_to_end_table(&rows));
    if json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|(case, t)| {
                serde_json::json!({ "case": case.display().to_string(), "timings": t.to_json_value() })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// The summary of `bench --end-to-end`: per case wall and solve seconds,
/// their ratio, and every other phase in seconds.
fn end_to_end_table(rows: &[(&PathBuf, Timings)]) -> String {
    use std::fmt::Write as _;
    let others: Vec<&str> = Timings::default()
        .rows()
        .map(|(_, key, _)| key)
        .filter(|&key| key != Phase::Solve.key())
        .collect();
    let mut text = format!(
        "{:<32} {:>9} {:>9} {:>11}",
        "case", "wall s", "solve s", "wall/solve"
    );
    for key in &others {
        let _ = write!(text, " {key:>12}");
    }
    text.push('\n');
    for (case, t) in rows {
        let ratio = t
            .wall_over_solve()
            .map_or("-".to_string(), |r| format!("{r:.2}"));
        let _ = write!(
            text,
            "{:<32} {:>9.3} {:>9.3} {ratio:>11}",
            case.display(),
            t.total(),
            t.seconds(Phase::Solve)
        );
        for (_, key, s) in t.rows() {
            if key != Phase::Solve.key() {
                let _ = write!(text, " {s:>12.3}");
            }
        }
        text.push('\n');
    }
    text
}

/// A bench's table, then its markdown summary where it has one, then the
/// rows as JSON with `--json`.
fn print_bench(report: &tables::Report, markdown: Option<&str>, json: bool) {
    print!("{}", tables::table(report));
    if let Some(markdown) = markdown {
        println!("\n{markdown}");
    }
    if json {
        println!("{}", tables::json(report));
    }
}

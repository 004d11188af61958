//! Command-line interface: `fvpoisson <command>`.
//!
//! Exit codes (docs/src/exit-codes.md): 0 success, 1 the mesh fails a quality
//! check (or `validate` an expectation), or a run or `solve-matrix` did not
//! converge (with a `not converged: ...` line), 2 an error (unreadable input,
//! bad arguments, a limit exceeded, a failing rank, even a panic), printed as
//! `error: ...` with its causes.

use crate::case;
use crate::foam::write::{write_atomic, write_footer, write_header, HeaderSpec};
use crate::foam::FoamFormat;
use crate::gpu::amg::gpu_amg_settings;
use crate::gpu::ilu::gpu_krylov_preconditioner;
use crate::gpu::pcg::{solve_pcg_gpu, DeviceSolve, GpuSolveOptions, GpuSolver};
use crate::mesh::{self, polymesh, Geometry, MeshReport, MeshSource};
use crate::solve::registry::{self, Role};
use crate::solve::{
    solve_krylov, solve_pcg_scaled, EquilibrationKind, GmresSettings, KrylovMethod,
    Orthogonalization, Preconditioner, PreconditionerKind, PreconditioningSide, SolverControls,
};
use crate::sparse::{mtx, RowOrdering};
use crate::timings::{self, Phase, PhaseClock, Timings};
use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "fvpoisson",
    version,
    about = "Finite-volume pressure-Poisson solver for unstructured meshes"
)]
struct Cli<B: Args, P: Args> {
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command<B, P>,
}

/// Where a mesh comes from, as every command takes it.
const SOURCE_HELP: &str = "Mesh source: an OpenFOAM case or constant/polyMesh directory, \
    a Gmsh .msh file, or a generator spec like box:64x64x64:tet:perturb=0.2";

/// The commands; `bench` and `preconditioners` take the arguments of the
/// binary's [`Measurements`].
#[derive(Subcommand)]
enum Command<B: Args, P: Args> {
    /// Loads a mesh and reports its size and quality like OpenFOAM's checkMesh
    /// (exit code 1 when a check fails).
    CheckMesh {
        #[arg(help = SOURCE_HELP)]
        source: String,
    },
    /// Writes a mesh as OUT_CASE/constant/polyMesh, with a minimal system/ so that
    /// OpenFOAM tools and ParaView open the case.
    ConvertMesh {
        #[arg(help = SOURCE_HELP)]
        source: String,
        /// OpenFOAM case directory to write (created if missing).
        out_case: PathBuf,
        /// Encoding of the polyMesh files.
        #[arg(long, value_enum, default_value_t = Format::Ascii)]
        format: Format,
        /// Gzip the polyMesh files.
        #[arg(long)]
        compress: bool,
    },
    /// Solve A x = b for a symmetric positive definite Matrix Market matrix with PCG.
    SolveMatrix(SolveMatrixArgs),
    /// Measures the GPU: copy bandwidth; per case and row ordering bandwidth,
    /// lambda, SpMV per format (ours and cuSPARSE's), Jacobi-PCG against its
    /// bandwidth floor; the solve against the CPU (bytes counted: docs/src/benchmarks.md).
    Bench(B),
    /// Manufactured-solution verification of the discretisation: error and
    /// observed order on refined mesh families (exit code 1 when an expected
    /// order or scheme ranking is not met), and a convergence plot.
    Validate(ValidateArgs),
    /// The preconditioner experiment of Gupta et al. (2011) on a case's matrix:
    /// for each PCG preconditioner (CPU, and GPU when there is one),
    /// iterations, Lanczos condition estimates and error with and without
    /// subdomain deflation, next to the paper's Table 1.
    Preconditioners(P),
    /// Steady laminar flow (SIMPLE/SIMPLEC) validation: lid-driven cavity
    /// against Ghia et al. (1982), plane Poiseuille flow against the analytic
    /// profile and pressure drop; error tables, residual plots and VTK fields
    /// (exit code 1 when a deviation exceeds its tolerance).
    ValidateFlow(ValidateFlowArgs),
    /// Transient flow (icoFoam's PISO) verification: the Taylor-Green vortex
    /// against its exact solution; error tables and observed orders in space
    /// (hex and perturbed tet meshes) and time (Euler, backward), the
    /// kinetic-energy decay rate (exit code 1 when an order is below its bound).
    ValidateTransient(ValidateTransientArgs),
    /// Centreline velocity profiles of a lid-driven cube (an icoFoam or
    /// pimpleFoam case on a lattice of hexahedra) at a written time: u along
    /// x = z = 0.5 and v along y = z = 0.5, against Albensoeder & Kuhlmann
    /// (2005) at Re = 1000, with the change since the previous written time
    /// (exit code 1 past --tolerance).
    CavityProfiles(CavityProfilesArgs),
    /// Runs a case: CASE holds case.toml (native) or system/controlDict (OpenFOAM).
    Run {
        /// Case directory.
        case: PathBuf,
        /// Where to solve: auto (the best available), cpu, gpu.
        #[arg(long, value_enum, default_value_t = crate::gpu::DeviceChoice::Auto)]
        device: crate::gpu::DeviceChoice,
        /// Row ordering of GPU solves: natural, cm, rcm, metis (overrides the
        /// case's `ordering`; default rcm).
        #[arg(long)]
        ordering: Option<RowOrdering>,
        /// Distributed run on N ranks as threads of this process (also `-np N`);
        /// under `mpirun -np N` (cargo feature `mpi`) the ranks are MPI's. Uses
        /// CASE/processorK from `decompose` when present, else METIS in memory;
        /// each rank writes processorK/<time>/<field> (`reconstruct` joins them).
        #[arg(long, value_name = "N")]
        ranks: Option<usize>,
        /// GPUs (device ordinals) of --device gpu: rank r of a distributed run
        /// uses entry r % count (under mpirun the node-local rank); a serial
        /// run with two or more splits its PCG (Jacobi or none) over them in
        /// this process (the multi-GPU device loop), other solvers on the
        /// first; default every device for ranks, the first for a serial run.
        #[arg(long, value_delimiter = ',', value_name = "LIST")]
        gpus: Option<Vec<usize>>,
        /// VTK output: binary (raw appended, the default), zlib (compressed as
        /// ParaView writes it), ascii, or none; overrides the case's setting
        /// (OpenFOAM cases write VTK/NAME.pvd unless none).
        #[arg(long, value_name = "FORMAT")]
        vtk: Option<VtkChoice>,
        /// The phase account (the table the log ends with) for scripts:
        /// `json` prints it as one JSON object on stdout, a path ending in
        /// `.json` writes it to that file.
        #[arg(long, value_name = "json|FILE.json")]
        timings: Option<TimingsOutput>,
        /// Flush every result file to the disk before renaming it into place
        /// (safe against a power loss; at the disk's speed). Without it files
        /// are renamed into place once in the system's cache, as OpenFOAM
        /// writes its own: a failed or killed run still never leaves half a
        /// file.
        #[arg(long)]
        sync: bool,
        /// Options of the case's OpenFOAM application, after `--`
        /// (potentialFoam: -writephi, -writePhi, -writep).
        #[arg(last = true, allow_hyphen_values = true, value_name = "OPTIONS")]
        application_options: Vec<String>,
    },
    /// Converts the time directories of an OpenFOAM case (constant/polyMesh and
    /// every volScalarField and volVectorField) to the VTK series
    /// CASE/VTK/NAME.pvd, as foamToVTK does.
    FoamToVtk {
        /// OpenFOAM case directory.
        case: PathBuf,
        /// Times to convert: a list of times and ranges, OpenFOAM's -time
        /// syntax ('0,0.5:1,2:'); default every time directory.
        #[arg(long, value_name = "LIST", conflicts_with = "latest_time")]
        time: Option<case::foam_to_vtk::TimeSelection>,
        /// Only the last time directory (also -latestTime).
        #[arg(long)]
        latest_time: bool,
        /// Encoding: binary (default), zlib or ascii.
        #[arg(long, value_name = "FORMAT", default_value = "binary")]
        format: crate::io::vtk::VtkEncoding,
        /// Directory of the series (default CASE/VTK).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Splits a case's cells over N ranks: writes
    /// CASE/processorK/constant/polyMesh/cellProcAddressing (local to global
    /// cell) for a distributed `run`.
    Decompose {
        /// Case directory.
        case: PathBuf,
        /// Number of ranks.
        #[arg(short = 'n', long = "ranks", value_name = "N")]
        n: usize,
        /// metis (k-way over the cell graph), simple (OpenFOAM's `simple`
        /// with n (N 1 1): equal slabs across x) or simple:NXxNYxNZ
        /// (OpenFOAM's n (NX NY NZ)).
        #[arg(long, default_value = "metis")]
        method: case::decompose::DecomposeMethod,
    },
    /// Joins the ranks' CASE/processorK/<time>/<field> of a distributed run
    /// into CASE/<time>/<field>.
    Reconstruct {
        /// Case directory.
        case: PathBuf,
    },
}

/// `run --vtk` values: an encoding, or no VTK output.
#[derive(Clone, Copy, Debug)]
enum VtkChoice {
    Encoding(crate::io::vtk::VtkEncoding),
    None,
}

impl std::str::FromStr for VtkChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            other => other
                .parse()
                .map(Self::Encoding)
                .map_err(|e: String| e + " or none"),
        }
    }
}

impl VtkChoice {
    /// Applies the choice to a Poisson case's output settings.
    fn apply(self, output: &mut case::OutputSettings) {
        output.formats.retain(|f| *f != case::OutputFormat::Vtk);
        if let Self::Encoding(encoding) = self {
            output.formats.push(case::OutputFormat::Vtk);
            output.vtk_encoding = encoding;
        }
    }
}

/// `--format` values.
#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Ascii,
    Binary,
}

impl From<Format> for polymesh::FoamFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Ascii => Self::Ascii,
            Format::Binary => Self::Binary,
        }
    }
}

/// `run --timings`: where the JSON phase account goes.
#[derive(Clone, Debug, PartialEq)]
enum TimingsOutput {
    Stdout,
    File(PathBuf),
}

impl std::str::FromStr for TimingsOutput {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Self::Stdout),
            path if path.to_ascii_lowercase().ends_with(".json") => {
                Ok(Self::File(PathBuf::from(path)))
            }
            other => Err(format!(
                "'{other}': give json (print to stdout) or a file name ending in .json"
            )),
        }
    }
}

/// Exit code of a mesh that fails a quality check.
const EXIT_CHECK_FAILED: i32 = 1;
/// Exit code of any error.
const EXIT_ERROR: i32 = 2;

/// The commands of the `fvpoisson` binary that live outside the library
/// (`src/bench/`): `bench` (measurements) and `preconditioners` (a study).
/// [`main`] parses their arguments in their place among the commands and
/// runs them under the same logging, panic and error handling as the others.
pub trait Measurements {
    /// The arguments of `bench`.
    type Bench: Args;
    /// The arguments of `preconditioners`.
    type Preconditioners: Args;
    /// Runs `bench`.
    fn bench(args: Self::Bench) -> anyhow::Result<()>;
    /// Runs `preconditioners`.
    fn preconditioners(args: Self::Preconditioners) -> anyhow::Result<()>;
}

/// Runs the command line, `bench` and `preconditioners` by `M`, and
/// returns the process exit code.
pub fn main<M: Measurements>() -> i32 {
    // `-np N` as mpirun spells it, `-time`, `-latestTime` as OpenFOAM does.
    // OpenFOAM's `-parallel` only says that mpirun started the ranks.
    let parallel = std::env::args().any(|a| a == "-parallel");
    if parallel && !launched_by_mpi() {
        eprintln!(
            "error: -parallel: start the ranks with mpirun -np N (or run them as threads with \
             -np N and without -parallel)"
        );
        return 2;
    }
    let args = std::env::args()
        .filter(|a| a != "-parallel")
        .map(|a| match a.as_str() {
            "-np" => "--ranks".into(),
            "-time" => "--time".into(),
            "-latestTime" => "--latest-time".into(),
            _ => a,
        });
    let cli = Cli::<M::Bench, M::Preconditioners>::parse_from(args);
    // validate runs thousands of solves: their log lines would bury the table.
    let filter = match cli.command {
        Command::Validate(_) => format!("{},fvpoisson::solve=warn", cli.log),
        // Every time step logs its Courant number and solves.
        Command::ValidateTransient(_) => {
            format!("{},fvpoisson::solve=warn,fvpoisson::flow=warn", cli.log)
        }
        _ => cli.log.clone(),
    };
    // Info lines read like an OpenFOAM solver log; other levels say what they are.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&filter))
        .format(|buf, record| match record.level() {
            // Ranks other than 0 of a distributed run print warnings and errors only.
            log::Level::Info | log::Level::Debug | log::Level::Trace
                if crate::parallel::is_quiet() =>
            {
                Ok(())
            }
            log::Level::Info => writeln!(buf, "{}", record.args()),
            level => writeln!(buf, "{}: {}", level.as_str().to_lowercase(), record.args()),
        })
        .init();
    // A panic is a bug; it still ends as an error (exit code 2) with one line
    // naming where, not a backtrace hint and exit code 101.
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        print_error(format_args!(
            "internal error{at}: {}; this is a bug in fvpoisson, please report it with the \
             input that caused it",
            crate::limits::quote(msg)
        ));
    }));
    let command = cli.command;
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_command::<M>(command)));
    let result = match outcome {
        Ok(result) => result,
        // A rank's PeerStopped is unwound without the hook: say it here.
        Err(payload) => {
            if let Some(stopped) = payload.downcast_ref::<crate::parallel::threads::PeerStopped>() {
                print_error(stopped);
            }
            return EXIT_ERROR;
        }
    };
    result.unwrap_or_else(|e| {
        print_error(error_chain(&e));
        EXIT_ERROR
    })
}

/// Runs one command; `Ok` holds its exit code.
fn run_command<M: Measurements>(
    command: Command<M::Bench, M::Preconditioners>,
) -> anyhow::Result<i32> {
    match command {
        Command::CheckMesh { source } => check_mesh(&source),
        Command::ConvertMesh {
            source,
            out_case,
            format,
            compress,
        } => convert_mesh(&source, &out_case, format.into(), compress).map(|()| 0),
        Command::SolveMatrix(args) => solve_matrix(args),
        Command::Bench(args) => M::bench(args).map(|()| 0),
        Command::Run {
            case,
            device,
            ordering,
            ranks,
            gpus,
            vtk,
            timings,
            sync,
            application_options,
        } => {
            let clock = PhaseClock::start();
            crate::io::set_durable_writes(sync);
            // An unsupported application is named before any missing file.
            let supported = case::openfoam::check_supported(&case);
            let code = match launched_by_mpi() {
                _ if ranks == Some(0) => Err(anyhow::anyhow!(
                    "-np 0 / --ranks 0: a run needs at least 1 rank"
                )),
                _ if supported.is_err() => supported.map(|()| 0).map_err(Into::into),
                _ if case::potential_foam::is_potential_foam_case(&case) => {
                    run_potential(&case, device, ranks, &application_options, vtk)
                }
                _ if !application_options.is_empty() => Err(anyhow::anyhow!(
                    "options after '--' ({}) are for potentialFoam cases; {} is not one",
                    application_options.join(" "),
                    case.display()
                )),
                true => run_mpi(&case, ranks, device, gpus.as_deref(), vtk),
                false => case_lock(&case).and_then(|_lock| match ranks {
                    Some(n) if n > 1 => run_threads(&case, device, n, gpus.as_deref(), vtk),
                    _ => run(&case, device, ordering, gpus.as_deref(), vtk),
                }),
            };
            let account = clock.finish();
            code.and_then(|code| report_timings(&account, timings.as_ref()).map(|()| code))
        }
        Command::FoamToVtk {
            case,
            time,
            latest_time,
            format,
            out,
        } => foam_to_vtk(&case, time, latest_time, format, out.as_deref()).map(|()| 0),
        Command::Decompose { case, n, method } => decompose(&case, n, method).map(|()| 0),
        Command::Reconstruct { case } => reconstruct(&case).map(|()| 0),
        Command::Validate(args) => validate(args),
        Command::Preconditioners(args) => M::preconditioners(args).map(|()| 0),
        Command::ValidateFlow(args) => validate_flow(args),
        Command::ValidateTransient(args) => validate_transient(args),
        Command::CavityProfiles(args) => cavity_profiles(args),
    }
}

#[derive(Args)]
struct SolveMatrixArgs {
    /// Matrix Market file of the matrix A (coordinate; general or symmetric).
    matrix: PathBuf,
    /// Matrix Market file of the right-hand side b (array); default b = A * ones.
    #[arg(long)]
    rhs: Option<PathBuf>,
    /// Preconditioner: none, jacobi, dic, dilu, ic0, sgs, eisenstatSGS (sgs
    /// by Eisenstat's trick: the same iterates at about one matrix read per
    /// iteration; PCG; multicolour on the GPU), aggregation AMG as
    /// amg[:key=value]... (e.g. amg:cycle=K:passes=3; keys in the README),
    /// ILU(k) as ilu0, ilu1, iluk:K, Schwarz as
    /// ras[:subdomains=64][:overlap=1][:fill=0][:nested=1][:inner-overlap=1]
    /// (restricted, ILU(k) blocks: GMRES/BiCGStab) or as[:...] (additive,
    /// IC(0) blocks, symmetric: PCG), or FSAI as fsai[:key=value,...] (e.g.
    /// fsai:steps=20,epsilon=0.001), block Jacobi as
    /// block-jacobi[:inner=CG][:innerTolerance=X][:innerMaxIter=N][:blockSize=N][:sweeps=N][:precision=mixed];
    /// default dic on the CPU, jacobi on the GPU (where dic and ic0 are
    /// level-scheduled; dic:precision=mixed runs their sweeps in f32).
    #[arg(long)]
    precond: Option<Preconditioner>,
    /// Where to solve: cpu, gpu or auto (the GPU when there is one).
    #[arg(long, value_enum, default_value_t = crate::gpu::DeviceChoice::Cpu)]
    device: crate::gpu::DeviceChoice,
    /// Row ordering of a GPU solve: natural, cm, rcm, metis (default rcm).
    #[arg(long)]
    ordering: Option<RowOrdering>,
    /// Equilibrate first: none, jacobi (unit diagonal) or
    /// ruiz[:norm=inf|2][:tol=X][:sweeps=N]; PCG then runs on S A S, with the
    /// residuals of the original system.
    #[arg(long, default_value = "none")]
    equilibration: EquilibrationKind,
    /// Absolute tolerance on OpenFOAM's normalised residual.
    #[arg(long, default_value = "1e-8")]
    tol: f64,
    /// Relative tolerance (residual / initial residual); 0 switches it off.
    #[arg(long, default_value_t = 0.0)]
    rel_tol: f64,
    /// Maximum number of iterations.
    #[arg(long, default_value_t = 1000)]
    max_iter: usize,
    /// Write the solution x to this Matrix Market (array) file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The Krylov method: pcg (symmetric matrices), gmres or bicgstab
    /// (OpenFOAM's PBiCGStab); the last two take any square matrix, with
    /// --precond jacobi (the default) or none on the GPU.
    #[arg(long, value_enum, default_value_t = SolverChoice::Pcg)]
    solver: SolverChoice,
    /// GMRES restart length m.
    #[arg(long, default_value_t = 20)]
    restart: usize,
    /// GMRES orthogonalisation: mgs or cgs2.
    #[arg(long, default_value = "mgs")]
    ortho: Orthogonalization,
    /// GMRES preconditioning side: left or right.
    #[arg(long, default_value = "right")]
    side: PreconditioningSide,
    /// Flexible GMRES (stores M⁻¹ v_j; for variable preconditioners).
    #[arg(long)]
    flexible: bool,
}

/// `solve-matrix --solver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SolverChoice {
    Pcg,
    Gmres,
    Bicgstab,
}

/// The phase account at the end of `run`: the table in the log, and the
/// JSON where `--timings` asks for it (rank 0 of a distributed run only).
fn report_timings(account: &Timings, output: Option<&TimingsOutput>) -> anyhow::Result<()> {
    log::info!("Wall time by phase:\n{}", account.table());
    if crate::parallel::is_quiet() {
        return Ok(());
    }
    match output {
        None => {}
        Some(TimingsOutput::Stdout) => println!("{}", account.to_json()),
        Some(TimingsOutput::File(path)) => {
            let json = account.to_json();
            crate::io::write_atomic(path, |w| writeln!(w, "{json}"))
                .with_context(|| format!("writing the phase account to {}", path.display()))?;
            log::info!("Writing {}", path.display());
        }
    }
    Ok(())
}

/// `run CASE --device DEVICE` without other options (`bench --end-to-end`
/// runs cases as `run` does); `Ok` holds its exit code.
pub fn run_case_dir(case_dir: &Path, device: crate::gpu::DeviceChoice) -> anyhow::Result<i32> {
    run(case_dir, device, None, None, None)
}

/// `run`: reads the case directory and runs it on the chosen device.
fn run(
    case_dir: &Path,
    device: crate::gpu::DeviceChoice,
    ordering: Option<RowOrdering>,
    gpus: Option<&[usize]>,
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    if case::ico_foam::transient_application(case_dir).is_some() {
        if gpus.is_some() {
            anyhow::bail!("--gpus is for Poisson cases; transient cases run on the first GPU");
        }
        return run_transient(case_dir, device, vtk);
    }
    if case::flow_case::is_flow_case(case_dir) {
        if gpus.is_some() {
            anyhow::bail!("--gpus is for Poisson cases; flow cases run on the first GPU");
        }
        return run_flow(case_dir, device, vtk);
    }
    // One GPU opens, and starts compiling the kernels a run needs, on a
    // thread of its own while the case is read and its mesh loaded.
    // Several GPUs (`--gpus 0,1`) open and compile the split PCG's kernels
    // the same way, each on a thread of its own.
    let several = match gpus {
        Some(list @ [_, _, ..]) => {
            if device != crate::gpu::DeviceChoice::Gpu {
                anyhow::bail!("--gpus selects the GPUs of --device gpu; add --device gpu");
            }
            Some(list)
        }
        _ => None,
    };
    let single_gpu = gpus.is_none();
    let read_case = || Ok(case::read_case_dir_and_mesh(case_dir)?);
    let ((read, opened), several) = match several {
        Some(list) => {
            let (read, opened) = while_opening_gpus(list, MULTI_KERNELS, read_case);
            ((read, Ok(None)), Some(opened))
        }
        None => (
            while_opening_gpu(single_gpu.then_some(device), RUN_KERNELS, read_case),
            None,
        ),
    };
    let (mut setup, mesh) = read?;
    let mesh = Some(mesh);
    if let Some(vtk) = vtk {
        vtk.apply(&mut setup.output);
    }
    if let Some(ordering) = ordering {
        setup.solver.set_ordering(ordering);
    }
    if let Some(opened) = several {
        let set = case::GpuSet::new(opened?);
        let summary = case::run_case_with_mesh(&setup, mesh, case::Device::Gpus(&set))?;
        return Ok(run_exit_code(&summary));
    }
    let gpu = match gpus {
        Some(_) => rank_gpu(device, gpus, 0)?,
        None => opened?,
    };
    let device = match &gpu {
        Some(gpu) => {
            // The solvers and preconditioners the GPU will run (after its
            // defaults: DIC as a polynomial, GAMG as AMG) compile while the
            // case sets up, not at the first solve.
            let sources: Vec<&str> = [&setup.solver.regular]
                .into_iter()
                .chain(&setup.solver.final_corrector)
                .flat_map(|s| solver_kernel_sources(&case::SolveTarget::Gpu.adapt(s)))
                .copied()
                .collect();
            gpu.prefetch(&sources);
            case::Device::Gpu(gpu)
        }
        None => {
            log::info!("Linear solves on the CPU");
            case::Device::Cpu
        }
    };
    let summary = case::run_case_with_mesh(&setup, mesh, device)?;
    Ok(run_exit_code(&summary))
}

/// Exit code of a finished run: 1, with a summary line, when it did not
/// converge ([`case::RunSummary::not_converged`]), else 0.
fn run_exit_code(summary: &case::RunSummary) -> i32 {
    not_converged_exit_code(summary.not_converged.as_deref())
}

/// 1, with the summary line `not converged: why`, for a run that did not
/// converge; else 0.
fn not_converged_exit_code(not_converged: Option<&str>) -> i32 {
    match not_converged {
        Some(why) => {
            eprintln!("not converged: {why}");
            EXIT_CHECK_FAILED
        }
        None => 0,
    }
}

/// The kernel sources a Poisson run on one GPU compiles ahead: the PCG
/// loop, the device assembly and its map, and the scan the map uses (with
/// the SpMV kernels, which all need, [`crate::gpu::Gpu::prefetch`]); the sources of the case's solvers are
/// added once the case is read ([`solver_kernel_sources`]).
const RUN_KERNELS: &[&str] = &["pcg.cu", "assembly.cu", "assembly_map.cu", "scan.cu"];
/// Those of a Poisson run on several GPUs: PCG split over them (the halo
/// exchange by peer stores or through the host, the device loop).
const MULTI_KERNELS: &[&str] = &["pcg.cu", "multi.cu", "peer.cu"];
/// Those of a flow, transient or potentialFoam run: the device SIMPLE/PISO
/// loop, the momentum solvers (PBiCGStab's device loop, GMRES, the
/// smoothers), PCG and the pressure preconditioners the GPU maps the usual
/// dictionaries to (AMG for GAMG, the polynomial for DIC); a module the run
/// then does not use costs a thread while the mesh is read, not wall time
/// (the run's debug log lists those it loaded and never launched from).
const FLOW_KERNELS: &[&str] = &[
    "simple.cu",
    "assembly_map.cu",
    "scan.cu",
    "pcg.cu",
    "krylov.cu",
    "bicgstab.cu",
    "smooth.cu",
    "amg.cu",
    "amg_inverse.cu",
    "amg_dense_fused.cu",
    "amg_dense_refine.cu",
    "amg_cycle.cu",
    "polynomial.cu",
];

/// The kernel sources of AMG: its set-up, the coarsest level's inverse
/// (launch per step, and in one cooperative launch) and the cycle (modules
/// of their own, compiled at once).
const AMG_KERNELS: &[&str] = &[
    "scan.cu",
    "amg.cu",
    "amg_inverse.cu",
    "amg_dense_fused.cu",
    "amg_dense_refine.cu",
    "amg_cycle.cu",
];

/// The kernel sources the GPU launches for `solver` (as the GPU adapts it,
/// [`case::SolveTarget::adapt`]) beyond PCG's: the Krylov method's, the
/// smoothSolver's smoothers, the preconditioner's.
fn solver_kernel_sources(solver: &case::LinearSolver) -> &'static [&'static str] {
    match (&solver.krylov, &solver.smoother, &solver.preconditioner) {
        (Some(KrylovMethod::BiCgStab), ..) => &["bicgstab.cu"],
        (Some(KrylovMethod::Gmres(_)), ..) => &["krylov.cu"],
        (None, Some(_), _) | (None, None, Preconditioner::Smoother(_)) => &["smooth.cu"],
        (None, None, Preconditioner::Amg(_)) => AMG_KERNELS,
        (None, None, Preconditioner::Polynomial(_)) => &["polynomial.cu"],
        _ => &[],
    }
}

/// Runs `read` (the case and its mesh, timed as the mesh phase) while the
/// GPU of `device` (None: none to open) opens on a thread of its own and
/// starts compiling the kernel modules of `kernels`
/// ([`crate::gpu::Gpu::prefetch`]); the time spent waiting for the GPU
/// after `read` is device set-up.
fn while_opening_gpu<T>(
    device: Option<crate::gpu::DeviceChoice>,
    kernels: &'static [&'static str],
    read: impl FnOnce() -> anyhow::Result<T>,
) -> (anyhow::Result<T>, anyhow::Result<Option<crate::gpu::Gpu>>) {
    // `--device cpu` opens none: its run has no device set-up.
    let device = device.filter(|&d| d != crate::gpu::DeviceChoice::Cpu);
    std::thread::scope(|scope| {
        let opening = device.map(|device| {
            scope.spawn(move || {
                let gpu = device.select()?;
                if let Some(gpu) = &gpu {
                    gpu.prefetch(kernels);
                }
                Ok::<_, anyhow::Error>(gpu)
            })
        });
        let read = timings::timed(Phase::Mesh, read);
        let opened = match opening {
            None => Ok(None),
            Some(handle) => timings::timed(Phase::DeviceSetup, || {
                let gpu = handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                // The context was made current on the opening thread.
                if let Some(gpu) = &gpu {
                    gpu.bind_to_thread()?;
                }
                Ok(gpu)
            }),
        };
        (read, opened)
    })
}

/// A flow case read by `read` while the GPU of `device` opens and compiles
/// the flow solvers' kernels ([`while_opening_gpu`]), and the GPU (none
/// for the CPU); a failed read is the error before a failed opening.
fn read_flow_opening_gpu<T>(
    device: crate::gpu::DeviceChoice,
    read: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Option<crate::gpu::Gpu>)> {
    let (read, gpu) = while_opening_gpu(Some(device), FLOW_KERNELS, read);
    Ok((read?, gpu?))
}

/// [`while_opening_gpu`] for the GPUs `list` of a run on several: each opens
/// and compiles `kernels` on a thread of its own while `read` runs; the
/// first GPU is made current on this thread.
fn while_opening_gpus<T>(
    list: &[usize],
    kernels: &'static [&'static str],
    read: impl FnOnce() -> anyhow::Result<T>,
) -> (anyhow::Result<T>, anyhow::Result<Vec<crate::gpu::Gpu>>) {
    std::thread::scope(|scope| {
        let opening: Vec<_> = list
            .iter()
            .map(|&ordinal| {
                scope.spawn(move || {
                    let gpu = crate::gpu::Gpu::on_device(ordinal)?;
                    gpu.prefetch(kernels);
                    Ok::<_, anyhow::Error>(gpu)
                })
            })
            .collect();
        let read = timings::timed(Phase::Mesh, read);
        let opened = timings::timed(Phase::DeviceSetup, || {
            let gpus = opening
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            gpus[0].bind_to_thread()?;
            Ok(gpus)
        });
        (read, opened)
    })
}

/// `run` of a potentialFoam case: serial, the Φ (and p) solves on the chosen
/// device; then, unless `--vtk none`, the time directory it wrote as the VTK
/// series CASE/VTK/NAME.pvd (as `foam-to-vtk` converts it).
fn run_potential(
    case_dir: &Path,
    device: crate::gpu::DeviceChoice,
    ranks: Option<usize>,
    options: &[String],
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    if ranks.is_some_and(|n| n > 1) || launched_by_mpi() {
        anyhow::bail!(
            "{}: potentialFoam cases run serially; run without --ranks / mpirun",
            case_dir.display()
        );
    }
    let options = case::potential_foam::PotentialOptions::parse(options)?;
    let (case, gpu) = read_flow_opening_gpu(device, || {
        Ok(case::potential_foam::PotentialFoamCase::read(
            case_dir, options,
        )?)
    })?;
    let summary = case.run(case::Device::gpu_or_cpu(gpu.as_ref()))?;
    let encoding = match vtk {
        Some(VtkChoice::None) => return Ok(0),
        Some(VtkChoice::Encoding(encoding)) => encoding,
        None => crate::io::vtk::VtkEncoding::default(),
    };
    let written =
        case::foam_to_vtk::TimeSelection::List(vec![(Some(summary.time), Some(summary.time))]);
    timings::timed(Phase::Output, || {
        foam_to_vtk(case_dir, Some(written), false, encoding, None)
    })?;
    Ok(0)
}

/// Whether an MPI launcher started this process with several ranks (also in
/// a build without the `mpi` feature, whose `run_mpi` then refuses).
fn launched_by_mpi() -> bool {
    crate::parallel::launcher_ranks().is_some()
}

/// The case and its mesh, for a distributed run (flow cases do not run
/// distributed).
fn read_for_ranks(case_dir: &Path) -> anyhow::Result<(case::CaseSetup, mesh::Mesh)> {
    // What makes the case a flow case, named where the case says it.
    let flow = match case::ico_foam::transient_application(case_dir) {
        Some(application) => Some(format!(
            "system/controlDict: application {}: transient cases",
            application.name()
        )),
        None if case::flow_case::is_flow_case(case_dir) => {
            Some(match case_dir.join(case::case_toml::CASE_FILE).exists() {
                true => "case.toml: physics.kind = \"simple\": flow cases".to_string(),
                false => "system/controlDict: application simpleFoam: flow cases".to_string(),
            })
        }
        None => None,
    };
    if let Some(what) = flow {
        anyhow::bail!(
            "{}/{what} do not run distributed (--ranks, mpirun, decompose); run it on one rank \
             (or on one GPU with --device gpu)",
            case_dir.display()
        );
    }
    timings::timed(Phase::Mesh, || Ok(case::read_case_dir_and_mesh(case_dir)?))
}

/// The GPU of rank `index` (a thread rank, or the node-local rank under
/// mpirun) with `--device gpu`: entry `index % count` of `gpus`, else of
/// every device; `None` on the CPU (`auto` runs distributed on the CPU).
fn rank_gpu(
    device: crate::gpu::DeviceChoice,
    gpus: Option<&[usize]>,
    index: usize,
) -> anyhow::Result<Option<crate::gpu::Gpu>> {
    use crate::gpu::{DeviceChoice, Gpu};
    match (device, gpus) {
        (DeviceChoice::Gpu, _) => {
            let all: Vec<usize>;
            let list = match gpus {
                Some(list) if !list.is_empty() => list,
                Some(_) => anyhow::bail!("--gpus: give device ordinals, e.g. --gpus 0,1"),
                None => {
                    all = (0..Gpu::device_count()?).collect();
                    &all
                }
            };
            Ok(Some(Gpu::on_device(list[index % list.len()])?))
        }
        (_, Some(_)) => anyhow::bail!("--gpus selects the GPUs of --device gpu; add --device gpu"),
        (_, None) => Ok(None),
    }
}

/// [`rank_gpu`] on every rank of `comm`, failing on every rank when one
/// rank's GPU cannot be opened (the others would wait for it forever).
fn open_rank_gpu(
    comm: &dyn crate::parallel::Communicator,
    device: crate::gpu::DeviceChoice,
    gpus: Option<&[usize]>,
    index: usize,
) -> anyhow::Result<Option<crate::gpu::Gpu>> {
    let gpu = rank_gpu(device, gpus, index);
    let outcome = gpu.as_ref().map(|_| ()).map_err(|e| format!("{e:#}"));
    match (gpu, crate::parallel::collective::agree(comm, outcome)) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(failure)) => anyhow::bail!("could not open the GPUs: {failure}"),
        (Ok(gpu), Ok(())) => Ok(gpu),
    }
}

/// `run --ranks N`: N ranks as threads, on the CPU, or with `--device gpu`
/// rank r on GPU r % count (of `--gpus`).
fn run_threads(
    case_dir: &Path,
    device: crate::gpu::DeviceChoice,
    n: usize,
    gpus: Option<&[usize]>,
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    use crate::parallel::threads::RankThreads;
    use crate::parallel::Communicator;
    let (mut setup, mesh) = read_for_ranks(case_dir)?;
    // Before the ranks' n² mailboxes exist.
    case::decompose::check_rank_count(mesh.n_cells(), n).with_context(|| format!("-np {n}"))?;
    if let Some(vtk) = vtk {
        vtk.apply(&mut setup.output);
    }
    log::info!("{n} ranks as threads");
    crate::limits::check_memory(crate::parallel::threads::group_bytes(n), || {
        format!("-np {n}: the mailboxes between {n} ranks as threads")
    })
    .map_err(anyhow::Error::msg)?;
    // CPU ranks on their share of the cores, as MPI processes; GPU ranks'
    // host work on the shared pool.
    let threads = match device {
        crate::gpu::DeviceChoice::Gpu => RankThreads::SharedPool,
        crate::gpu::DeviceChoice::Auto | crate::gpu::DeviceChoice::Cpu => RankThreads::ShareOfCores,
    };
    let outcomes = crate::parallel::threads::run_ranks_on(n, threads, |comm| {
        // Each rank's phases on its own thread; rank 0's join this thread's account.
        let clock = PhaseClock::start();
        let run = open_rank_gpu(comm, device, gpus, Communicator::rank(comm)).and_then(|gpu| {
            let run = case::decompose::run_distributed(&setup, mesh.clone(), comm, gpu.as_ref());
            crate::gpu::multi::release_kept_comms();
            Ok(run?)
        });
        run.map(|summary| (summary, clock.finish())).map_err(|e| {
            let agreed = crate::parallel::collective::take_agreed_failure();
            let own = agreed
                .as_ref()
                .is_none_or(|f| f.rank == Communicator::rank(comm));
            let report = rank_report(Communicator::rank(comm), agreed.as_ref(), &e);
            (own, report)
        })
    });
    // The failing rank's own error: the ranks that learnt of it (an echo
    // naming it) or stopped waiting for it (PeerStopped) only repeat it.
    let mut stopped = None;
    let mut echo = None;
    let mut first = None;
    for outcome in outcomes {
        match outcome {
            Ok(Ok(ranked)) => first = first.or(Some(ranked)),
            Ok(Err((true, own))) => anyhow::bail!("{own}"),
            Ok(Err((false, report))) => echo = echo.or(Some(report)),
            Err(peer_stopped) => stopped = stopped.or(Some(peer_stopped)),
        }
    }
    match (echo, stopped, first) {
        (Some(report), ..) => anyhow::bail!("{report}"),
        (None, Some(peer_stopped), _) => anyhow::bail!("{peer_stopped}"),
        (None, None, Some((summary, rank0))) => {
            timings::absorb(&rank0);
            Ok(run_exit_code(&summary))
        }
        (None, None, None) => Ok(0),
    }
}

/// What rank `rank` reports of the error `e` its run ended with, given the
/// failure the ranks agreed on ([`crate::parallel::collective::rank_report`]).
fn rank_report(
    rank: usize,
    agreed: Option<&crate::parallel::collective::RankFailure>,
    e: &anyhow::Error,
) -> String {
    crate::parallel::collective::rank_report(rank, agreed, error_chain(e))
}

/// `mpirun -np N fvpoisson run CASE`: this process is one rank.
#[cfg(feature = "mpi")]
fn run_mpi(
    case_dir: &Path,
    ranks: Option<usize>,
    device: crate::gpu::DeviceChoice,
    gpus: Option<&[usize]>,
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    use crate::parallel::Communicator;
    let comm = crate::parallel::mpi::MpiRank::initialize()
        .ok_or_else(|| anyhow::anyhow!("MPI was initialized twice"))?;
    // An MPI library other than the launcher's (an MPICH build under Open
    // MPI's mpirun) starts N runs of one rank each, racing on the same files.
    if let Some((n, variable)) = crate::parallel::launcher_ranks().filter(|_| comm.size() == 1) {
        anyhow::bail!(
            "the launcher started {n} ranks ({variable}) but the MPI library this fvpoisson \
             was built with sees one: launcher and library are of different MPI \
             implementations; start it with the mpirun of the library it was built against \
             (MPICH: mpiexec.mpich, Open MPI: mpirun.openmpi)"
        );
    }
    if comm.rank() != 0 {
        crate::parallel::set_quiet(true);
    }
    // Every failure a rank may meet alone (the lock, reading the case,
    // opening its GPU, its part of the run, its output) is agreed by every
    // rank, so that all stop with the failing rank's message.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Rank 0 holds the case's lock; every rank reads the case and its mesh.
        let prepared = (|| {
            let lock = match comm.rank() {
                0 => case_lock(case_dir)?,
                _ => None,
            };
            if let Some(n) = ranks.filter(|&n| n != comm.size()) {
                anyhow::bail!(
                    "--ranks {n} but mpirun started {} ranks; give one of them",
                    comm.size()
                );
            }
            let (setup, mesh) = read_for_ranks(case_dir)?;
            case::decompose::check_rank_count(mesh.n_cells(), comm.size())?;
            Ok((lock, setup, mesh))
        })()
        .map_err(|e| error_chain(&e));
        let (_lock, mut setup, mesh) =
            crate::parallel::collective::agreed(&comm, prepared, |_| 1, |f| f.to_string())
                .map_err(anyhow::Error::msg)?;
        if let Some(vtk) = vtk {
            vtk.apply(&mut setup.output);
        }
        log::info!("{} MPI ranks", comm.size());
        let gpu = open_rank_gpu(&comm, device, gpus, local_rank().unwrap_or(comm.rank()))?;
        let run = case::decompose::run_distributed(&setup, mesh, &comm, gpu.as_ref());
        crate::gpu::multi::release_kept_comms();
        let summary = run?;
        Ok(match comm.rank() {
            0 => run_exit_code(&summary),
            _ => i32::from(summary.not_converged.is_some()),
        })
    }));
    end_mpi_rank(&comm, outcome)
}

/// The outcome of this MPI rank's run: a rank whose error the others know
/// of (it was agreed) leaves with them; one that failed alone, or panicked,
/// may leave the others waiting in a collective that never completes, so
/// `MPI_Abort` ends every rank.
#[cfg(feature = "mpi")]
fn end_mpi_rank(
    comm: &crate::parallel::mpi::MpiRank,
    outcome: std::thread::Result<anyhow::Result<i32>>,
) -> anyhow::Result<i32> {
    use crate::parallel::Communicator;
    let rank = comm.rank();
    let has_peers = comm.size() > 1;
    match outcome {
        Ok(Ok(code)) => Ok(code),
        Ok(Err(e)) => {
            let agreed = crate::parallel::collective::take_agreed_failure();
            let report = rank_report(rank, agreed.as_ref(), &e);
            if agreed.is_none() && has_peers {
                print_error(&report);
                print_error(format_args!(
                    "rank {rank} failed alone: MPI_Abort stops every rank"
                ));
                comm.abort(EXIT_ERROR);
            }
            anyhow::bail!("{report}")
        }
        Err(_) if has_peers => {
            // The panic hook printed what and where.
            print_error(format_args!(
                "rank {rank} failed alone: MPI_Abort stops every rank"
            ));
            comm.abort(EXIT_ERROR)
        }
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// This process's rank on its node, as MPI launchers export it (Open MPI,
/// MPICH/Intel MPI, MVAPICH, Slurm).
#[cfg(feature = "mpi")]
fn local_rank() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(
    case_dir: &Path,
    _: Option<usize>,
    _: crate::gpu::DeviceChoice,
    _: Option<&[usize]>,
    _: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    let (n, variable) = crate::parallel::launcher_ranks().unwrap_or((2, "the environment"));
    anyhow::bail!(
        "an MPI launcher started this process as one of {n} ranks ({variable}), but this \
         fvpoisson was built without MPI, so every rank would run the whole case on its own; \
         build it with `cargo build --release --features mpi` (against the launcher's MPI \
         library), or run the ranks as threads without mpirun: fvpoisson run {} -np {n}",
        case_dir.display()
    )
}

/// `decompose CASE -n N`.
fn decompose(
    case_dir: &Path,
    n: usize,
    method: case::decompose::DecomposeMethod,
) -> anyhow::Result<()> {
    let (_, mesh) = read_for_ranks(case_dir)?;
    let clock = Instant::now();
    let d = case::decompose::decompose_mesh(&mesh, n, method)?;
    let files = case::decompose::write_decomposition(case_dir, &d)?;
    let counts = d.counts();
    log::info!(
        "{} cells over {n} ranks ({method}) in {:.3} s: {}..{} cells per rank",
        mesh.n_cells(),
        clock.elapsed().as_secs_f64(),
        counts.iter().min().unwrap_or(&0),
        counts.iter().max().unwrap_or(&0)
    );
    for f in files {
        log::info!("Writing {}", f.display());
    }
    Ok(())
}

/// `reconstruct CASE`.
fn reconstruct(case_dir: &Path) -> anyhow::Result<()> {
    // write_reconstructed logs each file it writes.
    let files = case::decompose::reconstruct(case_dir)?;
    log::info!("Reconstructed {} time(s)", files.len());
    Ok(())
}

/// The lock of `case_dir` for a run (`io::lock`): a second run of the case
/// is refused while this one lives.
fn case_lock(case_dir: &Path) -> anyhow::Result<Option<crate::io::lock::CaseLock>> {
    if !case_dir.is_dir() {
        // Nothing to lock: the case reader says what is wrong with it.
        return Ok(None);
    }
    Ok(Some(crate::io::lock::CaseLock::acquire(case_dir)?))
}

/// `foam-to-vtk CASE`.
fn foam_to_vtk(
    case_dir: &Path,
    time: Option<case::foam_to_vtk::TimeSelection>,
    latest_time: bool,
    format: crate::io::vtk::VtkEncoding,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    use case::foam_to_vtk::TimeSelection;
    let times = match (time, latest_time) {
        (_, true) => TimeSelection::Latest,
        (Some(list), false) => list,
        (None, false) => TimeSelection::All,
    };
    let clock = Instant::now();
    let converted = case::foam_to_vtk::foam_to_vtk(case_dir, &times, out, format)?;
    log::info!(
        "Wrote {} VTK step(s), {:.1} MB ({format}) in {:.2} s: {}",
        converted.times.len(),
        converted.bytes as f64 / 1e6,
        clock.elapsed().as_secs_f64(),
        converted.pvd.display()
    );
    Ok(())
}

/// `run` of a flow case (`physics.kind = "simple"`): exit code 1 when its
/// validation fails.
fn run_flow(
    case_dir: &Path,
    device: crate::gpu::DeviceChoice,
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    let clock = std::time::Instant::now();
    let ((mut setup, mesh), gpu) = read_flow_opening_gpu(device, || {
        Ok(if case_dir.join(case::case_toml::CASE_FILE).exists() {
            let setup = case::flow_case::read_flow_case(case_dir)?;
            let mesh = setup.mesh.load()?;
            (setup, mesh)
        } else {
            let case = case::simple_foam::read_simple_foam_case(case_dir)?;
            (case.setup, case.mesh)
        })
    })?;
    match vtk {
        Some(VtkChoice::None) => setup.vtk = false,
        Some(VtkChoice::Encoding(encoding)) => {
            setup.vtk = true;
            setup.vtk_encoding = encoding;
        }
        None => {}
    }
    let device = case::Device::gpu_or_cpu(gpu.as_ref());
    let summary = case::flow_case::run_flow_case_with_mesh(&setup, &mesh, device, clock)?;
    match summary.validation {
        Some((table, passed)) => {
            print!("{table}");
            Ok(if passed { 0 } else { EXIT_CHECK_FAILED })
        }
        None => Ok(0),
    }
}

/// `run` of an icoFoam or pimpleFoam case.
fn run_transient(
    case_dir: &Path,
    device: crate::gpu::DeviceChoice,
    vtk: Option<VtkChoice>,
) -> anyhow::Result<i32> {
    let (mut case, gpu) = read_flow_opening_gpu(device, || {
        Ok(case::ico_foam::read_transient_case(case_dir)?)
    })?;
    match vtk {
        Some(VtkChoice::None) => case.setup.vtk = None,
        Some(VtkChoice::Encoding(encoding)) => case.setup.vtk = Some(encoding),
        None => {}
    }
    let device = case::Device::gpu_or_cpu(gpu.as_ref());
    let summary = case::ico_foam::run_transient_case(&case.setup, &case.mesh, device)?;
    Ok(not_converged_exit_code(summary.not_converged.as_deref()))
}

/// `solve-matrix`'s preconditioner when `--precond` is not given, and why:
/// OpenFOAM's DIC for PCG on the CPU; Jacobi for GMRES and BiCGStab (DIC
/// needs a symmetric matrix) and on a GPU, where every method runs it as
/// given (the registry's `GpuSupport::Native`) and PCG fuses it into its own
/// steps.
fn default_preconditioner(on_gpu: bool, role: Role) -> (Preconditioner, &'static str) {
    match (on_gpu, role) {
        (false, Role::Pcg) => (PreconditionerKind::Dic.into(), "OpenFOAM's PCG default"),
        (false, Role::Krylov) => (
            PreconditionerKind::Jacobi.into(),
            "GMRES and BiCGStab take nonsymmetric matrices, which DIC does not",
        ),
        (true, _) => (
            PreconditionerKind::Jacobi.into(),
            "the GPU's default: every device method runs it as given",
        ),
    }
}

/// `solve-matrix`: PCG from x = 0 on a Matrix Market system; exit code 1
/// when the solve stops at --max-iter short of its tolerance.
fn solve_matrix(args: SolveMatrixArgs) -> anyhow::Result<i32> {
    let controls = SolverControls {
        tolerance: args.tol,
        rel_tol: args.rel_tol,
        max_iter: args.max_iter,
        ..SolverControls::default()
    };
    controls
        .validate()
        .map_err(|e| anyhow::anyhow!("--tol/--rel-tol/--max-iter: {e}"))?;
    let a = mtx::read_matrix(&args.matrix)?;
    let b = match &args.rhs {
        Some(path) => mtx::read_vector(path)?,
        None => {
            let mut b = vec![0.0; a.n_rows()];
            if a.n_rows() == a.n_cols() {
                a.spmv(&vec![1.0; a.n_cols()], &mut b);
            }
            b
        }
    };
    let gpu = args.device.select()?;
    let krylov = match args.solver {
        SolverChoice::Pcg => None,
        SolverChoice::Bicgstab => Some(KrylovMethod::BiCgStab),
        SolverChoice::Gmres => {
            let settings = GmresSettings {
                restart: args.restart,
                orthogonalization: args.ortho,
                side: args.side,
                flexible: args.flexible,
            };
            settings
                .validate()
                .map_err(|e| anyhow::anyhow!("--restart/--side/--flexible: {e}"))?;
            Some(KrylovMethod::Gmres(settings))
        }
    };
    let role = match krylov {
        Some(_) => Role::Krylov,
        None => Role::Pcg,
    };
    let precond = match args.precond {
        Some(p) => p,
        None => {
            let (p, why) = default_preconditioner(gpu.is_some(), role);
            log::info!("no --precond: {p} ({why})");
            p
        }
    };
    // What the device cannot run is the registry's decision, stated once:
    // PCG runs the fallback (`gpu::smooth::gpu_preconditioner`), GMRES and
    // BiCGStab refuse it below.
    if let (Some(_), Some((_, message))) = (&gpu, registry::gpu_fallback(&precond, role)) {
        if role == Role::Pcg {
            log::warn!("{message}");
        }
    }
    let ordering = args.ordering.unwrap_or_default();
    let place = match &gpu {
        Some(gpu) => format!("GPU {}, {ordering} ordering", gpu.name()),
        None => {
            if args.ordering.is_some() {
                log::warn!(
                    "--ordering only applies to GPU solves; the CPU solves in the file's order"
                );
            }
            "CPU".into()
        }
    };
    println!(
        "matrix {}: {} x {}, {} entries; preconditioner {precond}, equilibration {}; {place}",
        args.matrix.display(),
        a.n_rows(),
        a.n_cols(),
        a.nnz(),
        args.equilibration
    );
    let mut x = vec![0.0; a.n_rows()];
    let options = GpuSolveOptions {
        ordering,
        ..GpuSolveOptions::default()
    };
    if let Some(method) = &krylov {
        if args.equilibration != EquilibrationKind::None {
            anyhow::bail!("--equilibration applies to --solver pcg only");
        }
        println!("solver {method}");
    }
    let perf = match (&gpu, &krylov) {
        (Some(gpu), Some(method)) => {
            if gpu_krylov_preconditioner(&precond) != precond {
                anyhow::bail!("--precond {precond} runs on the CPU only (--device cpu)");
            }
            GpuSolver::new(gpu).solve_krylov_preconditioned(
                method,
                &precond,
                DeviceSolve::new(&a, &b, &mut x, &controls, &options),
            )
        }
        (None, Some(method)) => solve_krylov(&a, method, precond, &b, &mut x, &controls, "x"),
        (Some(gpu), None) => {
            let eq = &args.equilibration;
            match precond {
                Preconditioner::Kind(kind) => solve_pcg_gpu(
                    gpu,
                    kind,
                    DeviceSolve::new(&a, &b, &mut x, &controls, &options).equilibrated(eq),
                ),
                Preconditioner::Amg(s) => GpuSolver::new(gpu).solve_amg(
                    &gpu_amg_settings(&s),
                    DeviceSolve::new(&a, &b, &mut x, &controls, &options).equilibrated(eq),
                ),
                other => GpuSolver::new(gpu).solve_with(
                    &other,
                    DeviceSolve::new(&a, &b, &mut x, &controls, &options).equilibrated(eq),
                ),
            }
        }
        (None, None) => {
            solve_pcg_scaled(&a, precond, &args.equilibration, &b, &mut x, &controls, "x")
        }
    }
    .with_context(|| format!("solving {}", args.matrix.display()))?;
    println!(
        "iterations {}, initial residual {:e}, final residual {:e}, converged {}",
        perf.iterations, perf.initial_residual, perf.final_residual, perf.converged
    );
    if args.rhs.is_none() {
        let error = x.iter().map(|x| (x - 1.0).abs()).fold(0.0, f64::max);
        println!("max |x - 1| = {error:e} (b = A * ones, exact solution ones)");
    }
    if let Some(out) = &args.out {
        mtx::write_file(out, |w| mtx::write_vector(w, &x))?;
        println!("solution written to {}", out.display());
    }
    if perf.converged || controls.fixed_iterations() {
        return Ok(0);
    }
    if perf.iterations < controls.max_iter {
        // PCG stops where r · z or p · Ap is exactly zero (the exact
        // solution, or underflow); short of the tolerance that is a
        // breakdown of the method on this system, not the iteration limit.
        eprintln!(
            "not converged: PCG stopped after {} iterations without reaching the tolerance, \
             r·z or p·Ap exactly zero: the matrix or the preconditioner is not positive \
             definite (or the system is singular and b not in the range of A)",
            perf.iterations
        );
    } else {
        eprintln!(
            "not converged: {} iterations (--max-iter) without reaching the tolerance",
            perf.iterations
        );
    }
    Ok(EXIT_CHECK_FAILED)
}

#[derive(Args)]
struct ValidateArgs {
    /// Small meshes (seconds) instead of the default sizes (up to ~250k cells, minutes).
    #[arg(long)]
    quick: bool,
    /// Convergence plot (PNG) to write; default validate.png in --out.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Directory of the default plot file.
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Mesh families, comma-separated: hex, hex-perturbed, tet, tet-perturbed, prism.
    #[arg(long, default_value = "hex,hex-perturbed,tet,tet-perturbed,prism")]
    families: String,
}

/// `validate`: runs the manufactured solutions, prints the table and checks,
/// writes the plot; exit code 1 when a check fails.
fn validate(args: ValidateArgs) -> anyhow::Result<i32> {
    use crate::validate::{self, Config, Family, PlotText};
    let config = Config {
        quick: args.quick,
        families: Family::parse_list(&args.families)?,
    };
    let start = Instant::now();
    let report = validate::run(&config, |line| log::info!("{line}"))?;
    log::info!("validation ran in {:.1} s", start.elapsed().as_secs_f64());
    print!("{report}");
    let plot = args.plot.unwrap_or_else(|| args.out.join("validate.png"));
    if let Some(dir) = plot.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    match validate::write_plot(&report, &plot)? {
        PlotText::Font(font) => println!(
            "plot written to {} (font {})",
            plot.display(),
            font.display()
        ),
        PlotText::NoFont => {
            log::warn!(
                "no usable font (set FVPOISSON_FONT to a .ttf file or install fonts-dejavu-core): \
                 the plot has no labels or legend"
            );
            println!("plot written to {} (without labels)", plot.display());
        }
    }
    let failures = report.failures().len();
    if failures > 0 {
        println!("{failures} expectation(s) FAILED");
        return Ok(EXIT_CHECK_FAILED);
    }
    println!("all {} expectations met", report.checks.len());
    Ok(0)
}

#[derive(Args)]
struct ValidateFlowArgs {
    /// Cases, comma-separated: cavity, poiseuille, cylinder (potential flow).
    #[arg(long, default_value = "cavity,poiseuille,cylinder")]
    cases: String,
    /// Cavity Reynolds numbers, comma-separated (100, 400, 1000).
    #[arg(long, default_value = "100")]
    re: String,
    /// Cavity cells per side.
    #[arg(long, default_value_t = 129)]
    cells: usize,
    /// Solve p by PCG with the AMG preconditioner (GAMG; default settings,
    /// or amg:key=value:...) instead of DIC (CPU) / Jacobi (GPU); on the GPU
    /// AMG-PCG in the device loop.
    #[arg(long, value_name = "SETTINGS", num_args = 0..=1, default_missing_value = "amg")]
    gamg: Option<crate::solve::amg::AmgSettings>,
    /// Poiseuille cells across the channel (6x as many along it).
    #[arg(long, default_value_t = 20)]
    channel_cells: usize,
    /// Potential flow: cells around the cylinder.
    #[arg(long, default_value_t = 96)]
    cylinder_cells: usize,
    /// Pressure-velocity coupling: simple (alpha_U 0.7, alpha_p 0.3) or
    /// simplec (consistent, alpha_U 0.9, alpha_p 1).
    #[arg(long, default_value = "simplec")]
    algorithm: String,
    /// Outer iterations at most.
    #[arg(long, default_value_t = 20000)]
    max_iterations: usize,
    /// Where the pressure equation is solved: auto, cpu, gpu.
    #[arg(long, value_enum, default_value_t = crate::gpu::DeviceChoice::Cpu)]
    device: crate::gpu::DeviceChoice,
    /// Directory of the VTK fields and residual plots.
    #[arg(long, default_value = "flow_results")]
    out: PathBuf,
}

/// `validate-flow`: runs the flow validation cases, prints their tables.
fn validate_flow(args: ValidateFlowArgs) -> anyhow::Result<i32> {
    use crate::flow::validation::{run, FlowCase, PressureDevice, PressureSolver};
    let simplec = match args.algorithm.as_str() {
        "simplec" => true,
        "simple" => false,
        other => anyhow::bail!("--algorithm {other}: expected simple or simplec"),
    };
    let mut cases = Vec::new();
    for name in args.cases.split(',') {
        match name.trim() {
            "cavity" => {
                for re in args.re.split(',') {
                    let reynolds: u32 = re
                        .trim()
                        .parse()
                        .with_context(|| format!("--re: '{re}' is not a whole number"))?;
                    cases.push(FlowCase::Cavity {
                        reynolds,
                        n: args.cells,
                    });
                }
            }
            "poiseuille" => {
                for half in [false, true] {
                    cases.push(FlowCase::Poiseuille {
                        n: args.channel_cells,
                        half,
                    });
                }
            }
            "cylinder" => cases.push(FlowCase::Cylinder {
                n: args.cylinder_cells,
            }),
            other => anyhow::bail!(
                "--cases: unknown case '{other}' (expected cavity, poiseuille, cylinder)"
            ),
        }
    }
    let gpu = args.device.select()?;
    let device = match &gpu {
        Some(gpu) => PressureDevice::Gpu(gpu),
        None => PressureDevice::Cpu,
    };
    let controls = crate::solve::SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.01,
        ..Default::default()
    };
    let mut failed = 0;
    for case in cases {
        let mut pressure = PressureSolver::new(device, controls);
        if let Some(settings) = args.gamg {
            pressure = pressure.with_amg(settings);
        }
        let result = run(
            case,
            args.max_iterations,
            |s| {
                if simplec {
                    s.consistent = true;
                    s.relaxation_u = 0.9;
                    s.relaxation_p = 1.0;
                }
            },
            &mut pressure,
            Some(&args.out),
        )?;
        print!("{result}");
        if !result.passed() {
            failed += 1;
        }
    }
    println!(
        "fields and residual plots written to {}",
        args.out.display()
    );
    if failed > 0 {
        println!("{failed} case(s) FAILED");
        return Ok(EXIT_CHECK_FAILED);
    }
    Ok(0)
}

#[derive(Args)]
struct CavityProfilesArgs {
    /// OpenFOAM case directory (icoFoam or pimpleFoam).
    case: PathBuf,
    /// Time directory to sample (default the latest).
    #[arg(long)]
    time: Option<String>,
    /// Exit code 1 when the largest deviation from the table exceeds this
    /// (as a fraction of the lid speed).
    #[arg(long)]
    tolerance: Option<f64>,
    /// Write the profiles at 101 points per line as CSV (s,u,v).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write a plot of the profiles and the table's points (PNG).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `cavity-profiles`: a cube's centreline profiles against the table.
fn cavity_profiles(args: CavityProfilesArgs) -> anyhow::Result<i32> {
    use crate::case::cavity_profiles::case_profiles;
    let result = case_profiles(&args.case, args.time.as_deref())?;
    let profiles = &result.profiles;
    println!("time {}", result.time);
    print!("{profiles}");
    match &result.change {
        Some((before, change)) => {
            println!("largest change of the sampled values since time {before}: {change:.2e}")
        }
        None => println!("no earlier written time to measure the change from"),
    }
    if let Some(path) = &args.csv {
        crate::io::write_atomic(path, |out| out.write_all(profiles.csv().as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("profiles written to {}", path.display());
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "lid-driven cube, Re = {}, {} × {} × {} cells, t = {}",
            crate::foam::write::format_general(profiles.reynolds, 6),
            profiles.sizes[0],
            profiles.sizes[1],
            profiles.sizes[2],
            result.time
        );
        profiles.write_plot(path, &title)?;
        println!("plot written to {}", path.display());
    }
    if let Some(tolerance) = args.tolerance {
        if !profiles.compared {
            anyhow::bail!(
                "--tolerance: there is no reference table for Re = {}",
                crate::foam::write::format_general(profiles.reynolds, 6)
            );
        }
        let (max, _) = profiles.deviations();
        if max > tolerance {
            println!("FAILED: max |deviation| {max:.5} > tolerance {tolerance}");
            return Ok(EXIT_CHECK_FAILED);
        }
    }
    Ok(0)
}

#[derive(Args)]
struct ValidateTransientArgs {
    /// Small meshes (seconds) instead of the default sizes (minutes).
    #[arg(long)]
    quick: bool,
    /// Kinematic viscosity (default 0.05: Re = 20 on the vortex scale).
    #[arg(long)]
    nu: Option<f64>,
    /// Time step of the spatial studies over the cell size (the Courant
    /// number of the peak velocity 1; default 0.25).
    #[arg(long)]
    courant: Option<f64>,
    /// End time (default 2).
    #[arg(long)]
    end_time: Option<f64>,
    /// Cells per side of the hex meshes, comma-separated, coarse to fine.
    #[arg(long, value_delimiter = ',')]
    hex_sizes: Option<Vec<usize>>,
    /// Cells per side of the tet meshes (none: no tet study).
    #[arg(long, value_delimiter = ',')]
    tet_sizes: Option<Vec<usize>>,
    /// Steps to the end time of the temporal studies, comma-separated
    /// (the last one is the reference; none: no temporal study).
    #[arg(long, value_delimiter = ',')]
    time_steps: Option<Vec<usize>>,
}

/// `validate-transient`: the Taylor-Green studies, their tables and checks.
fn validate_transient(args: ValidateTransientArgs) -> anyhow::Result<i32> {
    use crate::flow::taylor_green::{validation_studies, StudyPlan};
    let mut plan = if args.quick {
        StudyPlan::quick()
    } else {
        StudyPlan::full()
    };
    plan.nu = args.nu.unwrap_or(plan.nu);
    plan.courant = args.courant.unwrap_or(plan.courant);
    plan.end_time = args.end_time.unwrap_or(plan.end_time);
    plan.hex_sizes = args.hex_sizes.unwrap_or(plan.hex_sizes);
    plan.tet_sizes = args.tet_sizes.unwrap_or(plan.tet_sizes);
    plan.temporal_steps = args.time_steps.unwrap_or(plan.temporal_steps);
    let start = Instant::now();
    let report = validation_studies(&plan, |study| println!("{study}"))?;
    log::info!("validation ran in {:.1} s", start.elapsed().as_secs_f64());
    print!("{}", report.checks_text());
    let failures = report.failures();
    if failures > 0 {
        println!("{failures} check(s) FAILED");
        return Ok(EXIT_CHECK_FAILED);
    }
    Ok(0)
}

/// Writes `error: MESSAGE` and its newline to stderr in one write: the ranks
/// of an MPI run share one stderr, and a line written in pieces (as
/// `eprintln!` writes it) interleaves with the other ranks' lines.
fn print_error(message: impl std::fmt::Display) {
    use std::io::Write;
    let line = format!("error: {message}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The error and its causes on one line, skipping a cause whose text the
/// previous message already contains (`MeshError::Io` prints its source).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if !out.contains(&msg) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
    }
    out
}

fn load_mesh(spec: &str) -> anyhow::Result<mesh::Mesh> {
    let start = Instant::now();
    let source =
        MeshSource::parse(spec).with_context(|| format!("cannot use the mesh source '{spec}'"))?;
    let mesh = source
        .load()
        .with_context(|| format!("cannot load the mesh '{spec}'"))?;
    log::info!(
        "loaded {spec}: {} cells, {} faces, {} points in {:.2} s",
        mesh.n_cells(),
        mesh.n_faces(),
        mesh.n_points(),
        start.elapsed().as_secs_f64()
    );
    Ok(mesh)
}

fn check_mesh(spec: &str) -> anyhow::Result<i32> {
    let mesh = load_mesh(spec)?;
    let start = Instant::now();
    let geometry = Geometry::compute(&mesh);
    let report = MeshReport::with_geometry(&mesh, &geometry);
    log::info!("checked the mesh in {:.2} s", start.elapsed().as_secs_f64());
    print!("{report}");
    Ok(if report.is_ok() { 0 } else { EXIT_CHECK_FAILED })
}

fn convert_mesh(
    spec: &str,
    out_case: &Path,
    format: polymesh::FoamFormat,
    compress: bool,
) -> anyhow::Result<()> {
    let mesh = load_mesh(spec)?;
    let dir = out_case.join("constant").join("polyMesh");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    let start = Instant::now();
    polymesh::write_polymesh(&mesh, &dir, format, compress)
        .with_context(|| format!("cannot write the mesh to {}", dir.display()))?;
    write_case_skeleton(out_case)?;
    log::info!(
        "wrote {} in {:.2} s",
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// OpenFOAM tools need `system/controlDict` (checkMesh) and `fvSchemes`/`fvSolution`
/// (anything building an fvMesh); ParaView's reader opens a `<case>.foam` file.
/// Existing files are kept: the case may already hold a set-up.
fn write_case_skeleton(case: &Path) -> anyhow::Result<()> {
    let system = case.join("system");
    std::fs::create_dir_all(&system)
        .with_context(|| format!("cannot create the directory {}", system.display()))?;
    let control = "startFrom       startTime;\nstartTime       0;\nstopAt          endTime;\n\
                   endTime         1;\ndeltaT          1;\nwriteControl    timeStep;\n\
                   writeInterval   1;\n";
    let schemes = "ddtSchemes { default steadyState; }\ngradSchemes { default Gauss linear; }\n\
                   divSchemes { default none; }\nlaplacianSchemes { default Gauss linear corrected; }\n\
                   interpolationSchemes { default linear; }\nsnGradSchemes { default corrected; }\n";
    let case_name = case
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "case".into());
    for (object, body) in [
        ("controlDict", control),
        ("fvSchemes", schemes),
        ("fvSolution", ""),
    ] {
        let path = system.join(object);
        if path.exists() {
            continue;
        }
        let header = HeaderSpec {
            format: FoamFormat::Ascii,
            class: "dictionary",
            note: None,
            location: "system",
            object,
        };
        write_atomic(&path, false, |w| {
            write_header(w, &header)?;
            w.write_all(body.as_bytes())?;
            write_footer(w)
        })?;
    }
    let paraview = case.join(format!("{case_name}.foam"));
    if !paraview.exists() {
        write_atomic(&paraview, false, |_| Ok(()))?;
    }
    Ok(())
}

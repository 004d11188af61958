//! Command-line interface: `fvpoisson <command>`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::solve::{solve_pcg, PreconditionerKind, SolverControls};
use crate::sparse::mtx;

#[derive(Parser)]
#[command(name = "fvpoisson", version, about = "Finite-volume pressure-Poisson solver for unstructured meshes")]
struct Cli {
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve A x = b for a symmetric positive definite Matrix Market matrix with PCG.
    SolveMatrix(SolveMatrixArgs),
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&cli.log))
        .format_timestamp(None)
        .init();
    let result = match cli.command {
        Command::SolveMatrix(args) => solve_matrix(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

#[derive(Args)]
struct SolveMatrixArgs {
    /// Matrix Market file of the matrix A (coordinate; general or symmetric).
    matrix: PathBuf,
    /// Matrix Market file of the right-hand side b (array); default b = A * ones.
    #[arg(long)]
    rhs: Option<PathBuf>,
    /// Preconditioner: none, jacobi, dic, ic0, sgs.
    #[arg(long, default_value = "dic")]
    precond: PreconditionerKind,
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
}

/// `solve-matrix`: PCG from x = 0 on a Matrix Market system.
fn solve_matrix(args: SolveMatrixArgs) -> anyhow::Result<()> {
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
    println!(
        "matrix {}: {} x {}, {} entries; preconditioner {}",
        args.matrix.display(),
        a.n_rows(),
        a.n_cols(),
        a.nnz(),
        args.precond
    );
    let controls = SolverControls {
        tolerance: args.tol,
        rel_tol: args.rel_tol,
        max_iter: args.max_iter,
        ..SolverControls::default()
    };
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_pcg(&a, args.precond, &b, &mut x, &controls, "x")
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
    Ok(())
}

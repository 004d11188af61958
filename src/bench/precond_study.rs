//! `fvpoisson preconditioners CASE`: Gupta et al. 2011's experiment on a case's
//! matrix (see docs/src/deflation.md). For each PCG
//! preconditioner (and on the GPU those it has), with and without subdomain
//! deflation: iterations, the Lanczos estimate of the condition number of the
//! preconditioned (deflated) operator, the error, the time; next to the
//! paper's Table 1 (64 × 64, contrast 10³).
//!
//! As in Gupta et al. (2011, §6): b = A x* with x*_i = cos(i) (rows from 0), x₀ = 0,
//! error ‖x − x*‖₂ / ‖x*‖₂. The stopping test is the solver's (OpenFOAM's
//! normalised residual Σ|r| / normFactor, which with x₀ = 0 is
//! Σ|r| / Σ|b|), at `tolerance` (the paper: ‖r‖₂ ≤ 10⁻⁶ ‖b‖₂).
//! Subdomains: stripes (blocks of consecutive rows; on a structured grid
//! numbered row by row, the paper's stripes) or METIS (`Subdomains::metis`;
//! the rows are renumbered subdomain by subdomain first, for every row of
//! the table alike), 2⌈√N⌉ of them unless given (the paper's 2n on an n × n
//! grid).

use std::fmt;
use std::time::Instant;

use fvpoisson::gpu::deflation::{solve_pcg_deflated_gpu, DEFLATED_PCG_PRECONDITIONERS};
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::deflation::{solve_pcg_deflated, Subdomains};
use fvpoisson::solve::{Preconditioner, PreconditionerKind, SolveError, SolverControls};
use fvpoisson::sparse::Csr;

/// How the subdomains are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Partition {
    /// Blocks of consecutive rows (the paper's stripes on a structured grid).
    Stripes,
    /// METIS subdomains, rows renumbered subdomain by subdomain.
    Metis,
}

/// The right-hand side b = A x*.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Rhs {
    /// x*_i = cos(i), the paper's.
    Cosine,
    /// x*_i uniform in [-1, 1) (fixed seed): every eigenvector is present.
    Random,
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StudyConfig {
    pub rhs: Rhs,
    pub partition: Partition,
    /// Number of subdomains; `None`: 2⌈√N⌉.
    pub subdomains: Option<usize>,
    pub controls: SolverControls,
}

impl Default for StudyConfig {
    fn default() -> Self {
        Self {
            rhs: Rhs::Cosine,
            partition: Partition::Stripes,
            subdomains: None,
            controls: SolverControls::absolute(1e-6, 5000),
        }
    }
}

/// Table 1 of Gupta et al. (2011) (n = 64, contrast 10³): the condition number of A
/// (`none`) and of the preconditioned matrix, for the preconditioners it
/// lists that fvpoisson has. The paper's cond(A) is also shown next to
/// `jacobi` (κ(D⁻¹A) = κ(Ã), Ã = D^-1/2 A D^-1/2): with a 10³ jump no set-up
/// gives κ(A) ≈ 10⁴, and the paper's κ(A)/κ(Neu) ratios are those of a
/// matrix without a jump, as Ã nearly is (README, Gupta et al. 2011).
pub fn paper_table1(preconditioner: &Preconditioner) -> Option<f64> {
    match preconditioner.to_string().as_str() {
        "none" | "jacobi" => Some(9.68e3),
        "neu1" => Some(2.66e3),
        "neu2" => Some(1.74e3),
        _ => None,
    }
}

/// The CPU rows: every named preconditioner, with Gupta et al.'s (2011)
/// Neu1 and Neu2 (registered algorithms) after symmetric Gauss–Seidel.
pub fn cpu_preconditioners() -> Vec<Preconditioner> {
    let mut list: Vec<Preconditioner> = PreconditionerKind::ALL.map(Preconditioner::Kind).into();
    let at = list
        .iter()
        .position(|p| *p == PreconditionerKind::SymGaussSeidel)
        .map_or(list.len(), |i| i + 1);
    let neumann = ["neu1", "neu2"].map(|name| name.parse().expect("registered"));
    list.splice(at..at, neumann);
    list
}

/// One solve.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub iterations: usize,
    pub converged: bool,
    /// Lanczos estimate of λ_max/λ_min of M⁻¹A (deflated: M⁻¹PA), from a
    /// solve with a random x* to 1e-10.
    pub condition: Option<f64>,
    /// ‖x − x*‖₂ / ‖x*‖₂.
    pub error: f64,
    /// Setup and solve, seconds.
    pub seconds: f64,
}

/// A preconditioner on one device, without and with deflation.
#[derive(Clone, Debug)]
pub struct Row {
    pub device: &'static str,
    pub kind: Preconditioner,
    pub plain: Result<Outcome, String>,
    pub deflated: Result<Outcome, String>,
}

impl Row {
    /// Undeflated over deflated iterations (both converged).
    pub fn iteration_ratio(&self) -> Option<f64> {
        match (&self.plain, &self.deflated) {
            (Ok(p), Ok(d)) if p.converged && d.converged && d.iterations > 0 => {
                Some(p.iterations as f64 / d.iterations as f64)
            }
            _ => None,
        }
    }
}

/// The table of a study.
#[derive(Clone, Debug)]
pub struct Study {
    pub n: usize,
    pub partition: Partition,
    pub subdomains: usize,
    pub tolerance: f64,
    pub rows: Vec<Row>,
}

/// Runs every CPU preconditioner, and with `gpu` the GPU ones, on `a`.
pub fn run(a: &Csr, config: &StudyConfig, gpu: Option<&Gpu>) -> Result<Study, SolveError> {
    let n = a.n_rows();
    let k = config
        .subdomains
        .unwrap_or(2 * (n as f64).sqrt().ceil() as usize)
        .clamp(1, n.max(1));
    let (ordered, subdomains) = match config.partition {
        Partition::Stripes => (None, Subdomains::stripes(n, k)?),
        Partition::Metis => {
            let (order, s) = Subdomains::metis(a, k)?;
            (Some(order.apply_symmetric(a)), s)
        }
    };
    let a = ordered.as_ref().unwrap_or(a);
    let exact: Vec<f64> = match config.rhs {
        Rhs::Cosine => (0..n).map(|i| (i as f64).cos()).collect(),
        Rhs::Random => fvpoisson::fvm::testing::random_field(n, 1),
    };
    let mut b = vec![0.0; n];
    a.spmv(&exact, &mut b);
    let controls = &config.controls;
    // The condition estimate comes from a second solve with every eigenvector
    // in its right-hand side (a random x*) to 1e-10: the paper's cos(i) has
    // almost nothing of the smoothest modes, so its Lanczos matrix misses λ_min.
    let random = fvpoisson::fvm::testing::random_field(n, 7);
    let mut b_random = vec![0.0; n];
    a.spmv(&random, &mut b_random);
    let spectrum_controls =
        SolverControls::absolute(controls.tolerance.min(1e-10), controls.max_iter);
    let norm = exact.iter().map(|v| v * v).sum::<f64>().sqrt();
    let solve = |deflation: Option<&Subdomains>, run: &dyn Fn(Solve<'_>) -> SolveResult| {
        let start = Instant::now();
        let mut x = vec![0.0; n];
        let (perf, _) = run(Solve {
            deflation,
            b: &b,
            x: &mut x,
            controls,
        })
        .map_err(|e| e.to_string())?;
        let seconds = start.elapsed().as_secs_f64();
        let error = x
            .iter()
            .zip(&exact)
            .map(|(x, e)| (x - e) * (x - e))
            .sum::<f64>()
            .sqrt()
            / norm;
        let mut x = vec![0.0; n];
        let (_, spectrum) = run(Solve {
            deflation,
            b: &b_random,
            x: &mut x,
            controls: &spectrum_controls,
        })
        .map_err(|e| e.to_string())?;
        Ok(Outcome {
            iterations: perf.iterations,
            converged: perf.converged,
            condition: spectrum.map(|s| s.condition()),
            error,
            seconds,
        })
    };
    let mut rows = Vec::new();
    for kind in cpu_preconditioners() {
        let cpu = |s: Solve<'_>| solve_pcg_deflated(a, &kind, s.deflation, s.b, s.x, s.controls);
        let (plain, deflated) = (solve(None, &cpu), solve(Some(&subdomains), &cpu));
        rows.push(Row {
            device: "cpu",
            kind,
            plain,
            deflated,
        });
    }
    if let Some(gpu) = gpu {
        let options = GpuSolveOptions::default();
        for kind in DEFLATED_PCG_PRECONDITIONERS {
            let on_gpu = |s: Solve<'_>| {
                solve_pcg_deflated_gpu(gpu, a, &kind, s.deflation, s.b, s.x, s.controls, &options)
            };
            let (plain, deflated) = (solve(None, &on_gpu), solve(Some(&subdomains), &on_gpu));
            rows.push(Row {
                device: "gpu",
                kind,
                plain,
                deflated,
            });
        }
    }
    Ok(Study {
        n,
        partition: config.partition,
        subdomains: subdomains.count(),
        tolerance: controls.tolerance,
        rows,
    })
}

/// One solve of the study.
struct Solve<'s> {
    deflation: Option<&'s Subdomains>,
    b: &'s [f64],
    x: &'s mut [f64],
    controls: &'s SolverControls,
}

type SolveResult = Result<
    (
        fvpoisson::solve::SolverPerformance,
        Option<fvpoisson::solve::lanczos::SpectrumEstimate>,
    ),
    SolveError,
>;

fn cell(outcome: &Result<Outcome, String>) -> String {
    match outcome {
        Ok(o) => format!(
            "{:>6}{} {:>9} {:>8.1e} {:>8.3}",
            o.iterations,
            if o.converged { ' ' } else { '*' },
            o.condition.map_or("-".into(), |c| format!("{c:.3e}")),
            o.error,
            o.seconds
        ),
        Err(e) => format!("failed: {e}"),
    }
}

impl fmt::Display for Study {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let partition = match self.partition {
            Partition::Stripes => "stripes",
            Partition::Metis => "METIS subdomains",
        };
        writeln!(
            f,
            "{} unknowns, {} {partition}; b = A x*, x*_i = cos(i), x0 = 0, tolerance {:e} \
             (sum|r| / sum|b|); cond: Lanczos estimate from the PCG coefficients of a \
             solve with a random x* to 1e-10 (deflated: of M^-1 P A); * not converged",
            self.n, self.subdomains, self.tolerance
        )?;
        writeln!(
            f,
            "{:<4} {:<7} {:>9} | {:>7} {:>9} {:>8} {:>8} | {:>7} {:>9} {:>8} {:>8} | {:>5}",
            "dev",
            "precond",
            "paper T1",
            "iter",
            "cond",
            "error",
            "time s",
            "iter",
            "cond",
            "error",
            "time s",
            "ratio"
        )?;
        writeln!(f, "{:<22} | {:^35} | {:^35} |", "", "PCG", "deflated PCG")?;
        for row in &self.rows {
            writeln!(
                f,
                "{:<4} {:<7} {:>9} | {:<35} | {:<35} | {:>5}",
                row.device,
                row.kind.to_string(),
                paper_table1(&row.kind).map_or("-".into(), |c| format!("{c:.2e}")),
                cell(&row.plain),
                cell(&row.deflated),
                row.iteration_ratio()
                    .map_or("-".into(), |r| format!("{r:.2}"))
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fvpoisson::sparse::testing::random_symmetric;

    #[test]
    fn the_table_has_every_cpu_preconditioner_with_and_without_deflation() {
        let a = random_symmetric(300, 6, 4);
        for partition in [Partition::Stripes, Partition::Metis] {
            let config = StudyConfig {
                partition,
                subdomains: Some(12),
                ..StudyConfig::default()
            };
            let study = run(&a, &config, None).unwrap();
            assert_eq!(study.rows.len(), cpu_preconditioners().len());
            assert_eq!(study.rows.len(), PreconditionerKind::ALL.len() + 2);
            for row in &study.rows {
                let (plain, deflated) =
                    (row.plain.as_ref().unwrap(), row.deflated.as_ref().unwrap());
                assert!(plain.converged && deflated.converged, "{}", row.kind);
                assert!(plain.error < 1e-4 && deflated.error < 1e-4, "{}", row.kind);
                assert!(row.iteration_ratio().is_some());
            }
            let table = study.to_string();
            assert!(table.contains("neu2       1.74e3"), "{table}");
            assert!(table.contains("jacobi     9.68e3"), "{table}");
            assert!(table.contains("300 unknowns"), "{table}");
        }
    }
}

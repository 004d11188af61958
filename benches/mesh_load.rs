//! Mesh-loading benchmark: generate a box mesh, compute its geometry, and
//! order the rows of its cell graph by reverse Cuthill–McKee (the ordering
//! of GPU runs on a mesh whose own order is not banded).
//!
//! `cargo bench --bench mesh_load [CASE...]` where a case is a name below or
//! any `box:` spec. Each case runs in a child process (this binary re-executed
//! with `--child SPEC`) so its peak RSS (VmHWM) is its own. Times are wall
//! clock with rayon's default thread count (set RAYON_NUM_THREADS to change);
//! "CPU s" is the child's user + system time over all threads.

use fvpoisson::mesh::generate::BoxSpec;
use fvpoisson::mesh::Mesh;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::Csr;
use std::process::Command;
use std::time::Instant;

/// Named cases: hex 10M (216^3), tet 5M (95^3 hexes x 6), and their
/// perturbed + renumbered variants.
const CASES: [(&str, &str); 4] = [
    ("hex10M", "box:216x216x216"),
    ("tet5M", "box:95x95x95:tet"),
    (
        "hex10M-perturb-renumber",
        "box:216x216x216:perturb=0.3:seed=1:renumber",
    ),
    (
        "tet5M-perturb-renumber",
        "box:95x95x95:tet:perturb=0.3:seed=1:renumber",
    ),
];

/// Target for the 10M-cell hex box: generate + geometry on 2 cores.
const TARGET_SECONDS: f64 = 10.0;
const TARGET_PEAK_MB: f64 = 2500.0;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        let Some(spec) = args.get(at + 1) else {
            eprintln!("--child needs a box spec");
            std::process::exit(2);
        };
        std::process::exit(match run_child(spec) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{spec}: {e}");
                1
            }
        });
    }
    // `cargo bench` passes `--bench`; other dashed arguments are ignored too.
    let chosen: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let cases: Vec<(String, String)> = if chosen.is_empty() {
        CASES
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect()
    } else {
        let mut cases = Vec::new();
        for name in chosen {
            match CASES.iter().find(|(n, _)| *n == name) {
                Some((n, s)) => cases.push((n.to_string(), s.to_string())),
                None if name.starts_with("box:") => {
                    cases.push((name.to_string(), name.to_string()))
                }
                None => {
                    let names: Vec<&str> = CASES.iter().map(|(n, _)| *n).collect();
                    eprintln!("unknown case '{name}': expected one of {names:?} or a box: spec");
                    std::process::exit(2);
                }
            }
        }
        cases
    };
    let exe = std::env::current_exe().expect("bench executable path");
    println!(
        "threads: {}",
        std::env::var("RAYON_NUM_THREADS")
            .unwrap_or_else(|_| rayon::current_num_threads().to_string())
    );
    println!(
        "| {:<26} | {:>10} | {:>10} | {:>10} | {:>10} | {:>8} | {:>8} | {:>8} | {:>6} |",
        "case",
        "cells",
        "faces",
        "generate s",
        "geometry s",
        "total s",
        "CPU s",
        "peak MB",
        "RCM s"
    );
    println!("|{}|", ["---"; 9].join("|"));
    let mut failed = false;
    for (name, spec) in &cases {
        let out = Command::new(&exe)
            .args(["--child", spec])
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(r) = text.lines().find_map(ChildResult::parse) else {
            eprintln!(
                "{name}: child failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            failed = true;
            continue;
        };
        println!(
            "| {:<26} | {:>10} | {:>10} | {:>10.2} | {:>10.2} | {:>8.2} | {:>8.2} | {:>8.0} | {:>6.2} |",
            name,
            r.cells,
            r.faces,
            r.generate_s,
            r.geometry_s,
            r.generate_s + r.geometry_s,
            r.cpu_s,
            r.peak_mb,
            r.rcm_s
        );
        if name == "hex10M" {
            let total = r.generate_s + r.geometry_s;
            let ok = total < TARGET_SECONDS && r.peak_mb < TARGET_PEAK_MB;
            println!(
                "target (hex10M: < {TARGET_SECONDS} s, < {TARGET_PEAK_MB} MB): {} ({total:.2} s, {:.0} MB)",
                if ok { "MET" } else { "MISSED" },
                r.peak_mb
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}

struct ChildResult {
    cells: usize,
    faces: usize,
    generate_s: f64,
    geometry_s: f64,
    cpu_s: f64,
    peak_mb: f64,
    rcm_s: f64,
}

impl ChildResult {
    const TAG: &'static str = "RESULT";

    fn parse(line: &str) -> Option<Self> {
        let mut it = line.strip_prefix(Self::TAG)?.split_whitespace();
        Some(Self {
            cells: it.next()?.parse().ok()?,
            faces: it.next()?.parse().ok()?,
            generate_s: it.next()?.parse().ok()?,
            geometry_s: it.next()?.parse().ok()?,
            cpu_s: it.next()?.parse().ok()?,
            peak_mb: it.next()?.parse().ok()?,
            rcm_s: it.next()?.parse().ok()?,
        })
    }
}

fn run_child(spec: &str) -> Result<(), Box<dyn std::error::Error>> {
    let spec: BoxSpec = spec.parse()?;
    let start = Instant::now();
    let mesh = spec.generate()?;
    let generated = Instant::now();
    let geometry = mesh.geometry()?;
    let done = Instant::now();
    let (cells, faces) = (mesh.n_cells(), mesh.n_faces());
    drop(geometry);
    // CPU time and peak of generation and geometry, before the ordering.
    let (cpu_s, peak_mb) = (cpu_seconds()?, peak_rss_mb()?);
    let pattern = cell_graph_pattern(&mesh)?;
    drop(mesh);
    let ordering = Instant::now();
    let rcm = reverse_cuthill_mckee(&pattern);
    let rcm_s = ordering.elapsed().as_secs_f64();
    assert_eq!(rcm.len(), cells);
    println!(
        "{} {cells} {faces} {} {} {cpu_s} {peak_mb} {rcm_s}",
        ChildResult::TAG,
        (generated - start).as_secs_f64(),
        (done - generated).as_secs_f64(),
    );
    Ok(())
}

/// The pattern of the mesh's FVM matrix: per cell itself and its
/// neighbours across internal faces, sorted (unit values).
fn cell_graph_pattern(mesh: &Mesh) -> Result<Csr, Box<dyn std::error::Error>> {
    let n = mesh.n_cells();
    let mut rows: Vec<Vec<u32>> = (0..n as u32).map(|c| vec![c]).collect();
    for (&o, &nb) in mesh.owner().iter().zip(mesh.neighbour()) {
        rows[o as usize].push(nb);
        rows[nb as usize].push(o);
    }
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0);
    let mut cols = Vec::new();
    for mut row in rows {
        row.sort_unstable();
        cols.extend(row);
        row_ptr.push(cols.len());
    }
    let values = vec![1.0; cols.len()];
    Ok(Csr::new(n, row_ptr, cols, values)?)
}

/// User + system CPU time of this process, all threads (from /proc/self/stat,
/// in clock ticks of 1/100 s, Linux's USER_HZ): a load-independent measure
/// next to the wall times when the machine is shared.
fn cpu_seconds() -> Result<f64, Box<dyn std::error::Error>> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .ok_or("malformed /proc/self/stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> Result<f64, Box<dyn std::error::Error>> {
        Ok(fields
            .get(i)
            .ok_or("short /proc/self/stat")?
            .parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Peak resident set size of this process (VmHWM), in MB (10^6 bytes).
fn peak_rss_mb() -> Result<f64, Box<dyn std::error::Error>> {
    let rss = fvpoisson::timings::Rss::now().ok_or("no /proc/self/statm")?;
    Ok(rss.peak as f64 / 1e6)
}

//! simpleFoam parity: the cavity cases of `tests/data/simple_foam_parity`
//! (20², 40², 80² and a trapezoidal, non-orthogonal 20² cavity) run here
//! give OpenFOAM v1912's U and p after every SIMPLE iteration, to 1e-8 of
//! the field's largest magnitude. The reference fields were written by
//! simpleFoam itself (`make_reference.sh` in that folder regenerates them).

use fvpoisson::case::flow_case::{read_flow_case, run_flow_case};
use fvpoisson::case::Device;
use fvpoisson::mesh::Vec3;
use std::path::PathBuf;

mod common;
use common::{copy_dir, flow_fields, max_diff_over_max};

/// Largest difference relative to the reference's largest magnitude.
const PARITY: f64 = 1e-8;

fn data(name: &str) -> PathBuf {
    common::repo("tests/data/simple_foam_parity").join(name)
}

/// max |a − b| over max |b| of the components of two vector fields.
fn vector_difference(ours: &[Vec3], reference: &[Vec3]) -> f64 {
    let flat = |u: &[Vec3]| -> Vec<f64> { u.iter().flat_map(|v| [v.x, v.y, v.z]).collect() };
    max_diff_over_max(&flat(ours), &flat(reference))
}

/// Runs the case (its controlDict writes every iteration) and compares each
/// iteration's U and p with simpleFoam's; returns the rows (iteration, dU, dp).
fn parity(name: &str, cells: usize) -> Vec<(usize, f64, f64)> {
    let dir = common::unique_temp_dir(&format!("fvpoisson_parity_{name}"));
    for part in ["0", "constant", "system"] {
        copy_dir(&data(name).join(part), &dir.join(part));
    }
    let setup = read_flow_case(&dir).unwrap();
    let summary = run_flow_case(&setup, Device::Cpu).unwrap();
    let reference = data(name).join("reference");
    let mut rows = Vec::new();
    for iteration in 1..=summary.iterations {
        let (u, p) = flow_fields(&dir.join(iteration.to_string()), cells);
        let (u_ref, p_ref) = flow_fields(&reference.join(iteration.to_string()), cells);
        let du = vector_difference(&u, &u_ref);
        let dp = max_diff_over_max(&p, &p_ref);
        println!(
            "{name} iteration {iteration}: max |dU_i|/max|U_i| = {du:.2e}, max |dp|/max|p| = {dp:.2e}"
        );
        rows.push((iteration, du, dp));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(reference.join(summary.iterations.to_string()).is_dir() && !rows.is_empty());
    for &(iteration, du, dp) in &rows {
        assert!(
            du <= PARITY && dp <= PARITY,
            "{name}, iteration {iteration}: U differs by {du:.3e}, p by {dp:.3e} (relative)"
        );
    }
    rows
}

#[test]
fn cavity_20_matches_simple_foam_at_every_iteration() {
    assert_eq!(parity("cavity20", 400).len(), 12);
}

#[test]
fn cavity_40_matches_simple_foam_at_every_iteration() {
    assert_eq!(parity("cavity40", 1600).len(), 6);
}

#[test]
fn cavity_80_matches_simple_foam_at_every_iteration() {
    assert_eq!(parity("cavity80", 6400).len(), 4);
}

#[test]
fn non_orthogonal_cavity_matches_simple_foam_at_every_iteration() {
    assert_eq!(parity("skew20", 400).len(), 12);
}

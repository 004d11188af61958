//! potentialFoam parity: the cylinder and pitzDaily tutorials of
//! `tests/data/potential_foam` give OpenFOAM v1912's potential Φ and flux φ
//! to 1e-8 of the field's largest magnitude, and the velocity
//! `fvc::reconstruct(φ)` of OpenFOAM's φ (computed independently by
//! `reconstruct_phi.py`; the Debian build's own U is wrong in odd cells).
//! `make_reference.sh` in that folder regenerates the reference.

use fvpoisson::case::potential_foam::{run_potential_foam, PotentialOptions};
use fvpoisson::case::Device;
use fvpoisson::io::foam_field::{FieldValues, ScalarFieldFile, VectorFieldFile};
use fvpoisson::mesh::{MeshSource, PatchKind, Vec3};
use std::path::{Path, PathBuf};

mod common;
use common::{copy_dir, max_diff_over_max};

const PARITY: f64 = 1e-8;

fn data(name: &str) -> PathBuf {
    common::repo("tests/data/potential_foam").join(name)
}

/// A copy of the case (mesh, settings, initial fields) in a fresh directory.
fn case_copy(name: &str, tag: &str) -> PathBuf {
    let dir = common::unique_temp_dir(&format!("fvpoisson_potential_{name}_{tag}"));
    for part in ["0", "constant", "system"] {
        copy_dir(&data(name).join(part), &dir.join(part));
    }
    dir
}

/// φ on every face: internal values, then each patch's `value` (0 on empty patches).
fn flux(path: &Path, mesh: &fvpoisson::mesh::Mesh) -> Vec<f64> {
    let file =
        ScalarFieldFile::read_class(path, "surfaceScalarField", mesh.n_internal_faces()).unwrap();
    let mut phi = file.internal.clone().expand(mesh.n_internal_faces());
    for patch in mesh.patches() {
        let values = match patch.kind {
            PatchKind::Empty => vec![0.0; patch.size],
            _ => FieldValues::read(file.patch(patch).unwrap(), "value", patch.size)
                .unwrap()
                .expand(patch.size),
        };
        phi.extend(values);
    }
    phi
}

fn reconstructed_reference(name: &str) -> Vec<Vec3> {
    let path = data(name).join("reference/U_reconstructed.gz");
    let mut text = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|line| {
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            Vec3::new(v[0], v[1], v[2])
        })
        .collect()
}

fn components(u: &[Vec3]) -> Vec<f64> {
    u.iter().flat_map(|v| [v.x, v.y, v.z]).collect()
}

/// Runs the case with -writephi -writePhi; returns the relative differences of Φ, φ and U.
fn parity(name: &str) -> [f64; 3] {
    let dir = case_copy(name, "parity");
    let options = PotentialOptions {
        write_flux: true,
        write_potential: true,
    };
    let summary = run_potential_foam(&dir, options, Device::Cpu).unwrap();
    assert_eq!(summary.written.len(), 3, "{:?}", summary.written);
    let mesh = MeshSource::PolyMesh(dir.clone()).load().unwrap();
    let n = mesh.n_cells();
    let reference = data(name).join("reference");
    let potential = ScalarFieldFile::read(&dir.join("0/Phi"), n)
        .unwrap()
        .internal
        .expand(n);
    let potential_ref = ScalarFieldFile::read(&reference.join("Phi"), n)
        .unwrap()
        .internal
        .expand(n);
    let d_potential = max_diff_over_max(&potential, &potential_ref);
    let d_flux = max_diff_over_max(
        &flux(&dir.join("0/phi"), &mesh),
        &flux(&reference.join("phi"), &mesh),
    );
    let u = VectorFieldFile::read(&dir.join("0/U"), n)
        .unwrap()
        .internal
        .expand(n);
    let d_u = max_diff_over_max(&components(&u), &components(&reconstructed_reference(name)));
    println!(
        "{name}: {} Phi solves; max relative difference Phi {d_potential:.2e}, phi {d_flux:.2e}, \
         U {d_u:.2e}",
        summary.solves.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
    [d_potential, d_flux, d_u]
}

#[test]
fn cylinder_matches_potential_foam() {
    let d = parity("cylinder");
    assert!(d.iter().all(|&x| x <= PARITY), "Phi, phi, U: {d:?}");
}

#[test]
fn pitz_daily_matches_potential_foam() {
    let d = parity("pitzDaily");
    assert!(d.iter().all(|&x| x <= PARITY), "Phi, phi, U: {d:?}");
}

#[test]
fn command_line_dispatches_on_the_application_and_takes_its_options() {
    let dir = case_copy("cylinder", "cli");
    let run = |options: &[&str]| {
        common::fvpoisson(
            &[
                &["run", dir.to_str().unwrap(), "--device", "cpu", "--"],
                options,
            ]
            .concat(),
        )
    };
    let out = run(&["-writephi"]);
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Calculating potential flow"), "{log}");
    assert!(dir.join("0/phi.gz").is_file() || dir.join("0/phi").is_file());
    assert!(!dir.join("0/Phi.gz").is_file() && !dir.join("0/Phi").is_file());
    for (bad, says) in [
        ("-bogus", "option '-bogus' is not supported"),
        ("-writep", "-writep"),
    ] {
        let out = run(&[bad]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && log.contains(says), "{bad}: {log}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

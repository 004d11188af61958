//! potentialFoam parity: the cylinder and pitzDaily tutorials of
//! `tests/data/potential_foam` give OpenFOAM v1912's potential Φ and flux φ
//! to 1e-8 of the field's largest magnitude, and the velocity
//! `fvc::reconstruct(φ)` of OpenFOAM's φ (computed independently by
//! `reconstruct_phi.py`; the Debian build's own U is wrong in odd cells).
//! `make_reference.sh` in that folder regenerates the reference.

use fvpoisson::case::potential_foam::{run_potential_foam, PotentialFoamCase, PotentialOptions};
use fvpoisson::case::Device;
use fvpoisson::io::foam_field::{FieldValues, ScalarFieldFile, VectorFieldFile};
use fvpoisson::mesh::{MeshSource, PatchKind, Vec3};
use std::path::{Path, PathBuf};

mod common;
use common::{copy_dir, edit, max_diff_over_max};

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
        ..PotentialOptions::default()
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
    let out = run(&["-bogus"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && log.contains("option '-bogus' is not supported"),
        "{log}"
    );
    let vtk_dir = dir.join("VTK");
    assert!(vtk_dir.is_dir());
    std::fs::remove_dir_all(&vtk_dir).unwrap();
    let out = common::fvpoisson(&[
        "run",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--vtk",
        "ascii",
        "--",
        "-writep",
    ]);
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    let solving_p = log.find("Solving for p,");
    let calculating = log.find("Calculating approximate pressure field");
    assert!(calculating.is_some() && solving_p > calculating, "{log}");
    // The VTK series holds the p written.
    let n = MeshSource::PolyMesh(dir.clone()).load().unwrap().n_cells();
    let p = cells(&dir.join("0/p"), n);
    let name = dir.file_name().unwrap().to_str().unwrap();
    let vtu = std::fs::read_to_string(vtk_dir.join(format!("{name}_000000/internal.vtu"))).unwrap();
    let start = vtu.find("Name=\"p\"").expect("p in the VTK output");
    let values: Vec<f64> = vtu[start..]
        .split_once('>')
        .unwrap()
        .1
        .split("</DataArray>")
        .next()
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(values, p);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cells(path: &Path, n: usize) -> Vec<f64> {
    ScalarFieldFile::read(path, n).unwrap().internal.expand(n)
}

const WRITE_PRESSURE: PotentialOptions = PotentialOptions {
    write_flux: true,
    write_potential: true,
    write_pressure: true,
};

/// A change to the case against one of the reference runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// The case as OpenFOAM ran it.
    AsRun,
    /// nNonOrthogonalCorrectors 0 (against the run with 3).
    NoCorrectors,
    /// div(phi,U) Gauss upwind, not bounded (against that scheme's run).
    Upwind,
}

/// -writep's pressure step fed the reference φ and OpenFOAM's written U
/// (`openfoam_u`) or fvc::reconstruct of its φ: the relative difference from
/// the p OpenFOAM wrote, and the number of p solves.
fn pressure_of_reference_fields(name: &str, openfoam_u: bool, variant: Variant) -> (f64, usize) {
    let dir = case_copy(name, "pressure_step");
    let reference_p = match variant {
        Variant::AsRun => "p",
        Variant::NoCorrectors => {
            edit(
                &dir.join("system/fvSolution"),
                "nNonOrthogonalCorrectors 3;",
                "nNonOrthogonalCorrectors 0;",
            );
            "p"
        }
        Variant::Upwind => {
            edit(
                &dir.join("system/fvSchemes"),
                "bounded Gauss linear;",
                "Gauss upwind;",
            );
            "p_upwind"
        }
    };
    let case = PotentialFoamCase::read(&dir, WRITE_PRESSURE).unwrap();
    let mesh = case.mesh();
    let n = mesh.n_cells();
    let reference = data(name).join("reference");
    let u = match openfoam_u {
        true => VectorFieldFile::read(&reference.join("U_openfoam"), n)
            .unwrap()
            .internal
            .expand(n),
        false => reconstructed_reference(name),
    };
    let phi = flux(&reference.join("phi"), mesh);
    let pressure = case.approximate_pressure(&u, &phi, Device::Cpu).unwrap();
    let d = max_diff_over_max(&pressure.p, &cells(&reference.join(reference_p), n));
    println!(
        "{name} {variant:?}: {} p solves from {} U; max relative difference p {d:.2e}",
        pressure.solves.len(),
        if openfoam_u {
            "OpenFOAM's"
        } else {
            "the reconstructed"
        }
    );
    if openfoam_u && variant == Variant::AsRun {
        // The solves are OpenFOAM's: initial residuals (normalised as
        // OpenFOAM does) and iteration counts of its log.
        let log = std::fs::read_to_string(reference.join("log.potentialFoam")).unwrap();
        let logged: Vec<(f64, usize)> = log
            .lines()
            .filter_map(|line| line.strip_prefix("DICPCG:  Solving for p, Initial residual = "))
            .map(|rest| {
                let (initial, rest) = rest.split_once(',').unwrap();
                let iterations = rest.rsplit_once(' ').unwrap().1;
                (initial.parse().unwrap(), iterations.parse().unwrap())
            })
            .collect();
        assert_eq!(logged.len(), pressure.solves.len(), "{name}");
        for (solve, (initial, iterations)) in pressure.solves.iter().zip(logged) {
            println!(
                "  initial residual {:.6e} (OpenFOAM {initial:.6e}), {} iterations ({iterations})",
                solve.initial_residual, solve.iterations
            );
            assert!(
                (solve.initial_residual - initial).abs() <= 1e-8 * initial,
                "{name}: initial residual {} against {initial}",
                solve.initial_residual
            );
            assert!(solve.iterations.abs_diff(iterations) <= 1, "{name}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    (d, pressure.solves.len())
}

#[test]
fn pressure_step_on_openfoams_fields_matches_potential_foam() {
    // nNonOrthogonalCorrectors 3 and 2.
    for (name, solves) in [("cylinder", 4), ("pitzDaily", 3)] {
        let (d, n) = pressure_of_reference_fields(name, true, Variant::AsRun);
        assert!(d <= PARITY, "{name}: p differs by {d:.2e}");
        assert_eq!(n, solves, "{name}");
        // OpenFOAM's p is that of the U it wrote (wrong in odd cells), not
        // that of the reconstruction of its φ.
        let (d, _) = pressure_of_reference_fields(name, false, Variant::AsRun);
        assert!(d > 0.1, "{name}: {d:.2e}");
    }
    let (d, _) = pressure_of_reference_fields("cylinder", true, Variant::Upwind);
    assert!(d <= PARITY, "upwind: p differs by {d:.2e}");
    // The cylinder's mesh is non-orthogonal enough for the correctors to count.
    let (d, n) = pressure_of_reference_fields("cylinder", true, Variant::NoCorrectors);
    assert!(n == 1 && d > 1e-2, "{n} solves: {d:.2e}");
}

/// The values of the written field `file` on `patch`.
fn patch_values(file: &ScalarFieldFile, patch: &fvpoisson::mesh::Patch) -> Vec<f64> {
    FieldValues::read(file.patch(patch).unwrap(), "value", patch.size)
        .unwrap()
        .expand(patch.size)
}

#[test]
fn writep_writes_the_pressure_of_its_own_velocity() {
    let dir = case_copy("cylinder", "writep");
    // A nonzero outlet pressure: p's boundary values are the case's.
    edit(
        &dir.join("0/p"),
        "value           uniform 0;",
        "value           uniform 2.5;",
    );
    edit(
        &dir.join("system/controlDict"),
        "writeCompression on;",
        "writeCompression off;",
    );
    let case = PotentialFoamCase::read(&dir, WRITE_PRESSURE).unwrap();
    let summary = PotentialFoamCase::read(&dir, WRITE_PRESSURE)
        .unwrap()
        .run(Device::Cpu)
        .unwrap();
    assert_eq!(summary.pressure_solves.len(), 4);
    assert!(
        summary.written.iter().any(|p| p.ends_with("0/p")),
        "{:?}",
        summary.written
    );
    let mesh = case.mesh();
    let n = mesh.n_cells();
    let (u, p) = common::flow_fields(&dir.join("0"), n);
    let phi = flux(&dir.join("0/phi"), mesh);
    let expected = case.approximate_pressure(&u, &phi, Device::Cpu).unwrap();
    let file = ScalarFieldFile::read(&dir.join("0/p"), n).unwrap();
    assert!(p.iter().all(|x| x.is_finite()));
    let d = max_diff_over_max(&p, &expected.p);
    assert!(
        d <= 1e-14,
        "written p differs from the pressure step's by {d:.2e}"
    );
    // The cell values vary (a pressure field, not the outlet's value).
    let (lo, hi) = p
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi - lo > 0.1, "{lo} {hi}");
    for patch in mesh.patches() {
        let kind = file.patch(patch).unwrap().get_word("type").unwrap();
        let cells: Vec<f64> = patch.faces().map(|f| p[mesh.owner()[f] as usize]).collect();
        match patch.name.as_str() {
            "right" => {
                assert_eq!(kind, "fixedValue");
                assert!(patch_values(&file, patch).iter().all(|&v| v == 2.5));
            }
            "left" | "up" | "down" | "cylinder" => {
                // zeroGradient, symmetryPlane, symmetry: the cell's value.
                assert_eq!(patch_values(&file, patch), cells, "{}", patch.name);
            }
            _ => assert_eq!(kind, "empty"),
        }
    }
    // Every field written carries the constraint patches' own types, which
    // OpenFOAM requires to read it back.
    let fixed_p = [
        "symmetryPlane",
        "fixedValue",
        "symmetryPlane",
        "zeroGradient",
        "symmetry",
        "empty",
    ];
    let fixed_u = [
        "symmetryPlane",
        "zeroGradient",
        "symmetryPlane",
        "fixedValue",
        "symmetry",
        "empty",
    ];
    for (field, expected) in [("p", fixed_p), ("Phi", fixed_p), ("U", fixed_u)] {
        let text = std::fs::read_to_string(dir.join("0").join(field)).unwrap();
        let types: Vec<&str> = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("type "))
            .map(|rest| rest.trim().trim_end_matches(';'))
            .collect();
        assert_eq!(types, expected, "{field}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writep_without_a_fixed_pressure_takes_the_reference_cell() {
    let dir = case_copy("cylinder", "writep_reference");
    edit(
        &dir.join("0/p"),
        "type            fixedValue;\n        value           uniform 0;",
        "type            zeroGradient;",
    );
    // Nothing fixes Φ either: its problem is consistent only with as much
    // flow out as in.
    edit(
        &dir.join("0/U"),
        "right\n    {\n        type            zeroGradient;",
        "right\n    {\n        type            fixedValue;\n        value           uniform (1 0 0);",
    );
    let corrected = "nNonOrthogonalCorrectors 3;\n    PhiRefCell 0;";
    let solution = dir.join("system/fvSolution");
    edit(&solution, "nNonOrthogonalCorrectors 3;", corrected);
    let err = PotentialFoamCase::read(&dir, WRITE_PRESSURE)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("'pRefCell N;'") && err.contains("fvSolution"),
        "{err}"
    );
    // Each run starts from this p (a run overwrites it; the corrected
    // non-orthogonal part depends on the p the correctors start from).
    let initial_p = std::fs::read(dir.join("0/p")).unwrap();
    let pressure = |value: &str| {
        std::fs::write(dir.join("0/p"), &initial_p).unwrap();
        let with_reference = format!("{corrected}\n    pRefCell 7;\n    pRefValue {value};");
        edit(&solution, corrected, &with_reference);
        let run = PotentialFoamCase::read(&dir, WRITE_PRESSURE)
            .unwrap()
            .run(Device::Cpu);
        edit(&solution, &with_reference, corrected);
        run.unwrap();
        cells(&dir.join("0/p"), 2000)
    };
    let (p0, p5) = (pressure("0"), pressure("5"));
    assert!(p0.iter().chain(&p5).all(|x| x.is_finite()));
    // The reference value sets the level and nothing else.
    let shift: Vec<f64> = p5.iter().zip(&p0).map(|(a, b)| a - b).collect();
    let (lo, hi) = shift
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!((hi - 5.0).abs().max((lo - 5.0).abs()) < 1e-9, "{lo} {hi}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writep_refuses_what_it_cannot_compute() {
    let dir = case_copy("cylinder", "writep_refusals");
    let schemes = dir.join("system/fvSchemes");
    let refused = |says: &str| {
        let err = PotentialFoamCase::read(&dir, WRITE_PRESSURE)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(says), "{says}: {err}");
    };
    edit(
        &schemes,
        "bounded Gauss linear;",
        "bounded Gauss linearUpwind grad(U);",
    );
    refused("div(phi,U) scheme 'bounded Gauss linearUpwind grad(U)' is not supported");
    refused("fvSchemes");
    edit(
        &schemes,
        "bounded Gauss linearUpwind grad(U);",
        "bounded Gauss upwind;",
    );
    edit(
        &schemes,
        "div(div(phi,U)) Gauss linear;",
        "div(div(phi,U)) Gauss upwind;",
    );
    refused("div(div(phi,U)) scheme 'Gauss upwind' is not supported");
    edit(
        &schemes,
        "div(div(phi,U)) Gauss upwind;",
        "div(div(phi,U)) Gauss linear;",
    );
    PotentialFoamCase::read(&dir, WRITE_PRESSURE).unwrap();
    std::fs::remove_file(dir.join("0/p")).unwrap();
    refused("-writep needs the pressure field");
    // Without -writep none of it is read.
    run_potential_foam(&dir, PotentialOptions::default(), Device::Cpu).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

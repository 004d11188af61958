//! The `fvpoisson` binary run as a user runs it: exit codes, messages, reports.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::fvpoisson;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A path for one test's output, not yet created.
fn scratch(name: &str) -> PathBuf {
    common::unique_temp_dir(&format!("fvpoisson_cli_{name}"))
}

#[test]
fn help_lists_the_commands() {
    let o = fvpoisson(&["--help"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(
        text.contains("check-mesh") && text.contains("convert-mesh"),
        "{text}"
    );
    let o = fvpoisson(&["convert-mesh", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("--compress"));
}

#[test]
fn missing_path_is_an_error_naming_it() {
    let o = fvpoisson(&["check-mesh", "no/such/case"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("error: ") && err.contains("no/such/case"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn directory_without_a_mesh_is_an_error_naming_it() {
    let dir = common::Scratch::new("empty_case");
    let o = fvpoisson(&["check-mesh", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: ") && err.contains("empty_case"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_generator_spec_is_an_error() {
    let o = fvpoisson(&["check-mesh", "box:4xZx4"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: ") && err.contains("box:4xZx4"),
        "{err}"
    );
}

#[test]
fn unknown_format_is_a_usage_error() {
    let out = scratch("unknown_format");
    let o = fvpoisson(&[
        "convert-mesh",
        "box:2x2x2",
        out.to_str().unwrap(),
        "--format",
        "hdf5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("hdf5"));
    assert!(
        !out.exists(),
        "a refused conversion wrote {}",
        out.display()
    );
}

// The tests below need the box generator and the polyMesh reader/writer
// (other branches) and the committed meshes under meshes/foam.

#[test]
fn check_mesh_of_a_generated_box() {
    let o = fvpoisson(&["check-mesh", "box:4x4x4"]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert!(text.contains("    cells:            64\n"), "{text}");
    assert!(text.contains("    hexahedra:     64\n"), "{text}");
    assert!(text.ends_with("\nMesh OK.\n"), "{text}");
}

#[test]
fn check_mesh_of_the_cavity_case() {
    let o = fvpoisson(&["check-mesh", "meshes/foam/cavity"]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    for line in [
        "    points:           882\n",
        "    internal faces:   760\n",
        "    hexahedra:     400\n",
        "Overall domain bounding box (0 0 0) (0.1 0.1 0.01)",
        "Mesh has 2 solution (non-empty) directions (1 1 0)",
        "Min volume = 2.5e-07. Max volume = 2.5e-07.  Total volume = 0.0001.  Cell volumes OK.",
        "\nMesh OK.\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn converted_mesh_reads_back_the_same() {
    let case = scratch("converted_box");
    for extra in [
        &["--format", "ascii"][..],
        &["--format", "binary", "--compress"],
    ] {
        let mut args = vec!["convert-mesh", "box:3x2x2:tet", case.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = fvpoisson(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(case.join("system/controlDict").is_file());
        let original = stdout(&fvpoisson(&["check-mesh", "box:3x2x2:tet"]));
        let o = fvpoisson(&["check-mesh", case.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), original);
        std::fs::remove_dir_all(&case).unwrap();
    }
}

/// A unit cube whose faces all point inward: one inverted cell. check-mesh
/// measures it and fails (exit code 1) rather than refusing to load it.
#[test]
fn inverted_mesh_fails_the_checks() {
    use fvpoisson::mesh::{polymesh, FaceList, Mesh, Patch, PatchKind, Vec3};
    let points = (0..8)
        .map(|i| Vec3::new((i & 1) as f64, ((i >> 1) & 1) as f64, (i >> 2) as f64))
        .collect();
    // Each face listed with its normal pointing into the cube.
    let inward = vec![
        0, 1, 3, 2, // z = 0
        4, 6, 7, 5, // z = 1
        0, 4, 5, 1, // y = 0
        2, 3, 7, 6, // y = 1
        0, 2, 6, 4, // x = 0
        1, 5, 7, 3, // x = 1
    ];
    let faces = FaceList::uniform(4, inward).unwrap();
    let patches = vec![Patch::new("walls", PatchKind::Wall, 0, 6)];
    let mesh = Mesh::new(points, faces, vec![0; 6], vec![], patches).unwrap();
    let case = common::Scratch::new("inverted_cube");
    let dir = case.join("constant/polyMesh");
    std::fs::create_dir_all(&dir).unwrap();
    polymesh::write_polymesh(&mesh, &dir, polymesh::FoamFormat::Ascii, false).unwrap();
    let o = fvpoisson(&["check-mesh", case.to_str().unwrap()]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert!(text.contains("Minimum negative volume: -1,"), "{text}");
    assert!(
        text.contains("Number of negative volume cells: 1"),
        "{text}"
    );
    assert!(
        text.contains("***Error in face pyramids: 6 faces"),
        "{text}"
    );
    assert!(text.ends_with("\nFailed 3 mesh checks.\n"), "{text}");
}

#[test]
fn bench_on_the_cpu_is_refused_with_a_clear_error() {
    let out = fvpoisson(&["bench", "--device", "cpu", "box:4x4x4"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bench measures the GPU and there is none to use"),
        "{err}"
    );
}

/// A case directory holding only `system/controlDict` with `application`
/// and the extra files given (relative path, contents).
fn bare_case(name: &str, application: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = scratch(name);
    let header = |class: &str, object: &str| {
        format!("FoamFile {{ version 2.0; format ascii; class {class}; object {object}; }}\n")
    };
    let control = format!(
        "{}application {application};\nstartTime 0;\nendTime 1;\ndeltaT 1;\n",
        header("dictionary", "controlDict")
    );
    for (rel, text) in std::iter::once(("system/controlDict", control.as_str()))
        .chain(files.iter().map(|&(rel, text)| (rel, text)))
    {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let object = Path::new(rel).file_name().unwrap().to_str().unwrap();
        let body = if rel == "system/controlDict" {
            text.to_string()
        } else {
            header("dictionary", object) + text
        };
        std::fs::write(path, body).unwrap();
    }
    dir
}

/// The stderr of a failed `fvpoisson run DIR` (exit code 2, no panic).
fn run_error(dir: &Path) -> String {
    let o = fvpoisson(&["run", dir.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn unsupported_applications_are_refused_by_name_before_any_missing_file() {
    for app in ["interFoam", "rhoSimpleFoam", "buoyantPimpleFoam"] {
        // No transportProperties, fvSchemes, fvSolution, mesh or fields.
        let dir = bare_case(&format!("app_{app}"), app, &[]);
        let err = run_error(&dir);
        assert!(
            err.contains(&format!(
                "controlDict:2: application {app} is not supported (supported: laplacianFoam, \
                 simpleFoam, icoFoam, pimpleFoam, potentialFoam)"
            )),
            "{app}: {err}"
        );
        assert!(!err.contains("No such file"), "{app}: {err}");
        // The library's laplacianFoam reader refuses it first too.
        let e = fvpoisson::case::read_case_dir(&dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("application {app} is not supported")),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn turbulence_models_are_refused_by_name_before_any_missing_file() {
    let cases = [
        (
            "simpleFoam",
            "constant/momentumTransport",
            "simulationType RAS;\nRAS\n{\n    model kEpsilon;\n}\n",
            "momentumTransport:2: simulationType RAS: only laminar flow is supported \
             (simulationType laminar;); RAS model kEpsilon is not",
        ),
        (
            "pimpleFoam",
            "constant/turbulenceProperties",
            "simulationType LES;\nLES\n{\n    LESModel Smagorinsky;\n}\n",
            "turbulenceProperties:2: simulationType LES: only laminar flow is supported \
             (simulationType laminar;); LES model Smagorinsky is not",
        ),
        (
            "pimpleFoam",
            "constant/momentumTransport",
            "simulationType laminar;\nlaminar\n{\n    model Maxwell;\n}\n",
            "momentumTransport:5: laminar model Maxwell: only Stokes (Newtonian) is supported",
        ),
    ];
    for (k, (app, file, text, expected)) in cases.into_iter().enumerate() {
        // No transportProperties, fvSchemes, fvSolution, mesh or fields.
        let dir = bare_case(&format!("turbulence_{k}"), app, &[(file, text)]);
        let err = run_error(&dir);
        assert!(err.contains(expected), "{app} {file}: {err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // A laminar simpleFoam case goes on to name the first missing file.
    let dir = bare_case(
        "turbulence_laminar",
        "simpleFoam",
        &[("constant/momentumTransport", "simulationType laminar;\n")],
    );
    let err = run_error(&dir);
    assert!(err.contains("fvSchemes"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

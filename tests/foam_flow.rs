//! OpenFOAM simpleFoam case directories: the shipped cases/cavity_foam runs
//! to the same fields as the case.toml cavity on the same mesh, its time
//! directories (U, p, phi) read back and conserve mass, and bad entries are
//! named with file and line.

mod common;

use common::{cavity_case, edit, write_case_toml};

use fvpoisson::case::flow_case::{
    is_flow_case, read_flow_case, run_flow_case, run_flow_case_with_mesh,
};
use fvpoisson::case::simple_foam::read_simple_foam_case;
use fvpoisson::case::Device;
use fvpoisson::flow::VelocityCondition;
use fvpoisson::fvm::BoundaryCondition;
use fvpoisson::io::foam_field::{FieldFile, FieldValues, ScalarFieldFile, VectorFieldFile};
use fvpoisson::mesh::{MeshSource, Vec3};
use std::path::{Path, PathBuf};

/// A copy of the shipped case in a fresh temporary directory.
fn case_copy(name: &str) -> PathBuf {
    common::case_inputs_copy("cases/cavity_foam", name)
}

#[test]
fn cavity_foam_matches_the_case_toml_cavity_and_its_time_directories_read_back() {
    let dir = case_copy("cavity");
    edit(
        &dir.join("system/controlDict"),
        "writeInterval   100;",
        "writeInterval   20;",
    );
    edit(
        &dir.join("system/controlDict"),
        "writePrecision  12;",
        "writePrecision  17;",
    );
    assert!(is_flow_case(&dir));
    let case = read_simple_foam_case(&dir).unwrap();
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let setup = &case.setup;
    assert!(setup.settings.consistent);
    assert_eq!(
        (setup.settings.relaxation_u, setup.settings.relaxation_p),
        (0.9, 1.0)
    );
    assert_eq!(setup.max_iterations, 2000);
    assert_eq!(setup.settings.nu, 0.01);
    let names: Vec<&str> = setup.boundary.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(names, ["fixedWalls", "movingWall", "frontAndBack"]);
    assert_eq!(setup.boundary[2].1, VelocityCondition::Empty);
    assert_eq!(setup.boundary[0].2, BoundaryCondition::ZeroGradient);
    // The mesh read with the case is the one run on.
    let summary =
        run_flow_case_with_mesh(setup, &case.mesh, Device::Cpu, std::time::Instant::now()).unwrap();
    assert!(summary.converged, "{summary:?}");
    let last = summary.iterations;

    // The same cavity as a case.toml on the box the polyMesh was written from.
    let reference = common::unique_temp_dir("fvpoisson_foam_flow_ref");
    let toml = cavity_case(
        "box:20x20x1:2d",
        r#"[schemes]
div = "bounded Gauss linearUpwind grad(U)"
[SIMPLE]
consistent = true
explicitStress = true
maxIterations = 2000
residualControl = { U = 1e-6, p = 1e-6 }
[relaxationFactors]
U = 0.9
p = 1.0
[solver.p]
solver = "PCG"
preconditioner = "DIC"
tolerance = 1e-10
relTol = 0.01
[solver.U]
solver = "smoothSolver"
smoother = "symGaussSeidel"
tolerance = 1e-9
relTol = 0.1
[output]
formats = ["foam"]
"#,
    );
    write_case_toml(&reference, &toml);
    let ref_setup = read_flow_case(&reference).unwrap();
    assert!(!ref_setup.vtk && ref_setup.foam_output.is_some());
    let ref_summary = run_flow_case(&ref_setup, Device::Cpu).unwrap();
    assert_eq!(ref_summary.iterations, last);
    // Without `interval`, only the last iteration is written.
    let written: Vec<_> = std::fs::read_dir(&reference)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse::<usize>().ok())
        .collect();
    assert_eq!(written, [last]);

    let mesh = MeshSource::PolyMesh(dir.clone()).load().unwrap();
    let n = mesh.n_cells();
    let at = |case: &Path, field: &str| case.join(last.to_string()).join(field);
    let u = VectorFieldFile::read(&at(&dir, "U"), n)
        .unwrap()
        .internal
        .expand(n);
    let u_ref = VectorFieldFile::read(&at(&reference, "U"), n)
        .unwrap()
        .internal
        .expand(n);
    let p = ScalarFieldFile::read(&at(&dir, "p"), n)
        .unwrap()
        .internal
        .expand(n);
    let p_ref = ScalarFieldFile::read(&at(&reference, "p"), n)
        .unwrap()
        .internal
        .expand(n);
    let du = u
        .iter()
        .zip(&u_ref)
        .map(|(a, b)| (a - b).norm())
        .fold(0.0, f64::max);
    let dp = p
        .iter()
        .zip(&p_ref)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(du <= 1e-9 && dp <= 1e-9, "U differs by {du}, p by {dp}");

    // The vertical centreline (x = 0.5: the mean of the two middle columns):
    // the return flow under the vortex, as in Ghia et al. (u_min ≈ −0.21 at
    // Re 100; coarser here), and the lid-ward flow near the top.
    let column = |i: usize| (0..20).map(move |j| j * 20 + i);
    let centre: Vec<f64> = column(9)
        .zip(column(10))
        .map(|(a, b)| 0.5 * (u[a].x + u[b].x))
        .collect();
    let u_min = centre.iter().copied().fold(f64::INFINITY, f64::min);
    assert!((-0.25..-0.15).contains(&u_min), "centreline {centre:?}");
    assert!(centre[19] > 0.4, "centreline {centre:?}");

    // Written every 20 iterations and at the end.
    for it in (20..last).step_by(20).chain([last]) {
        for field in ["U", "p", "phi"] {
            assert!(
                dir.join(it.to_string()).join(field).is_file(),
                "{it}/{field}"
            );
        }
    }
    // U: the conditions with their face values; φ: internal faces and patches,
    // conserving mass in every cell.
    let u_file = VectorFieldFile::read(&at(&dir, "U"), n).unwrap();
    let lid = u_file.patch(mesh.patch("movingWall").unwrap()).unwrap();
    assert_eq!(lid.get_word("type").unwrap(), "fixedValue");
    assert_eq!(
        fvpoisson::io::foam_field::VectorFieldValues::read(lid, "value", 20).unwrap(),
        fvpoisson::io::foam_field::Values::Uniform(Vec3::new(1.0, 0.0, 0.0))
    );
    let phi_file = FieldFile::<f64>::read_class(
        &at(&dir, "phi"),
        "surfaceScalarField",
        mesh.n_internal_faces(),
    )
    .unwrap();
    let mut phi = phi_file.internal.clone().expand(mesh.n_internal_faces());
    for patch in mesh.patches() {
        let entry = phi_file.patch(patch).unwrap();
        let kind = entry.get_word("type").unwrap();
        if kind == "empty" {
            phi.extend(std::iter::repeat_n(0.0, patch.size));
        } else {
            assert_eq!(kind, "calculated");
            phi.extend(
                FieldValues::read(entry, "value", patch.size)
                    .unwrap()
                    .expand(patch.size),
            );
        }
    }
    let mut net = vec![0.0; n];
    for (f, &flux) in phi.iter().enumerate() {
        net[mesh.owner()[f] as usize] += flux;
        if f < mesh.n_internal_faces() {
            net[mesh.neighbour()[f] as usize] -= flux;
        }
    }
    let worst = net.iter().map(|x| x.abs()).fold(0.0, f64::max);
    assert!(worst < 1e-6, "largest net flux out of a cell {worst}");
    assert!(phi[..mesh.n_internal_faces()]
        .iter()
        .any(|&f| f.abs() > 1e-3));
    // The VTK series NAME.pvd (one step: the last iteration) and
    // NAME_residuals.png in VTK/, as foamToVTK would place them.
    let mut results: Vec<String> = dir
        .join("VTK")
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    results.sort();
    let name = fvpoisson::io::vtk::series_name_for(&dir);
    let mut expected =
        ["_000000", "_000000.vtm", ".pvd", "_residuals.png"].map(|s| name.clone() + s);
    expected.sort();
    assert_eq!(results, expected);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&reference).unwrap();
}

#[test]
fn simple_foam_variants_are_read_and_bad_entries_named() {
    // The flat relaxationFactors, physicalProperties (OpenFOAM >= v10),
    // turbulenceProperties, a plain nu, slip as symmetry, an unknown entry.
    let dir = case_copy("variants");
    let solution = dir.join("system/fvSolution");
    let text = std::fs::read_to_string(&solution).unwrap();
    let start = text.find("relaxationFactors").unwrap();
    std::fs::write(
        &solution,
        format!(
            "{}relaxationFactors\n{{\n    p 0.3;\n    U 0.7;\n}}\n",
            &text[..start]
        ),
    )
    .unwrap();
    edit(&solution, "    pRefCell", "    frobnicate 2;\n    pRefCell");
    std::fs::remove_file(dir.join("constant/transportProperties")).unwrap();
    std::fs::write(
        dir.join("constant/physicalProperties"),
        "FoamFile { format ascii; class dictionary; object physicalProperties; }\nviscosityModel constant;\nnu 0.002;\n",
    )
    .unwrap();
    std::fs::rename(
        dir.join("constant/momentumTransport"),
        dir.join("constant/turbulenceProperties"),
    )
    .unwrap();
    edit(
        &dir.join("0/U"),
        "type            noSlip;",
        "type            slip;",
    );
    let case = read_simple_foam_case(&dir).unwrap();
    let s = &case.setup.settings;
    assert_eq!((s.relaxation_u, s.relaxation_p, s.nu), (0.7, 0.3, 0.002));
    assert_eq!(case.setup.boundary[0].1, VelocityCondition::Symmetry);
    let warnings = case.warnings.join("\n");
    assert!(warnings.contains("slip is run as symmetry"), "{warnings}");
    assert!(
        warnings.contains("frobnicate") && warnings.contains("not used by fvpoisson's simpleFoam"),
        "{warnings}"
    );

    // Each error names the file, the line and what is supported.
    let error = |file: &str, from: &str, to: &str| -> String {
        let dir = case_copy("bad");
        edit(&dir.join(file), from, to);
        let e = read_flow_case(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        e
    };
    let e = error("constant/momentumTransport", "laminar;", "RAS;");
    assert!(
        e.contains("momentumTransport:18: simulationType RAS: only laminar"),
        "{e}"
    );
    let e = error(
        "0/U",
        "type            noSlip;",
        "type            pressureInletOutletVelocity;",
    );
    assert!(e.contains("0/U:32: U patch 'fixedWalls': condition type 'pressureInletOutletVelocity' is not supported"), "{e}");
    let e = error(
        "0/p",
        "    movingWall\n    {\n        type            zeroGradient;",
        "    movingWall\n    {\n        type            totalPressure;",
    );
    assert!(
        e.contains("0/p:26: p patch 'movingWall'") && e.contains("totalPressure"),
        "{e}"
    );
    let e = error(
        "system/fvSchemes",
        "bounded Gauss linearUpwind grad(U);",
        "Gauss cubic;",
    );
    assert!(
        e.contains("fvSchemes:31:") && e.contains("not supported"),
        "{e}"
    );
    let e = error(
        "system/fvSchemes",
        "div((nuEff*dev2(T(grad(U))))) Gauss linear;",
        "div((nuEff*dev2(T(grad(U))))) Gauss upwind;",
    );
    assert!(
        e.contains("fvSchemes:32:")
            && e.contains("'Gauss upwind' for div((nuEff*dev2(T(grad(U))))) is not supported"),
        "{e}"
    );
    let e = error(
        "system/fvSchemes",
        "default         steadyState;",
        "default         Euler;",
    );
    assert!(
        e.contains("fvSchemes:20:") && e.contains("simpleFoam is steady"),
        "{e}"
    );
    let e = error("system/controlDict", "simpleFoam;", "pisoFoam;");
    assert!(e.contains("controlDict:18: application pisoFoam"), "{e}");
    let e = error(
        "system/fvSolution",
        "solver          smoothSolver;\n        smoother        symGaussSeidel;",
        "solver          PCG;\n        preconditioner  DIC;",
    );
    assert!(
        e.contains("fvSolution:") && e.contains("solvers/U: the momentum matrix is not symmetric"),
        "{e}"
    );
    let e = error(
        "system/fvSolution",
        "U               0.9;",
        "U               1.5;",
    );
    assert!(
        e.contains("fvSolution:") && e.contains("relaxation factor U 1.5: it must be in (0, 1]"),
        "{e}"
    );
    let e = error("constant/transportProperties", "0.01;", "-0.01;");
    assert!(
        e.contains("transportProperties:20: nu is -0.01; it must be positive"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The cell fields of the last time directory of a run.
fn last_fields(dir: &Path, iterations: usize, n: usize) -> (Vec<Vec3>, Vec<f64>) {
    common::flow_fields(&dir.join(iterations.to_string()), n)
}

#[test]
fn command_line_runs_the_shipped_case() {
    let dir = case_copy("cli");
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("SIMPLE solution converged in 90 iterations"),
        "{log}"
    );
    assert!(!log.contains("WARN"), "{log}");
    let (u, p) = last_fields(&dir, 90, 400);
    assert!(u.iter().any(|v| v.x < -0.15) && p.iter().all(|x| x.is_finite()));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The pressure solves on the GPU (`fvpoisson run cases/cavity_foam --device
/// gpu`) reach the CPU's fields; skips without a CUDA device
/// (`FVPOISSON_REQUIRE_GPU=1` makes that a failure).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn cavity_foam_on_the_gpu_gives_the_cpu_fields() {
    let Some(gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    let tight = |name: &str| {
        let dir = case_copy(name);
        let solution = dir.join("system/fvSolution");
        edit(&solution, "p               1e-6;", "p               1e-10;");
        edit(&solution, "U               1e-6;", "U               1e-10;");
        edit(
            &solution,
            "tolerance       1e-10;\n        relTol          0.01;",
            "tolerance       1e-13;\n        relTol          0;",
        );
        dir
    };
    let mut fields = Vec::new();
    for (name, device) in [("cpu", Device::Cpu), ("gpu", Device::Gpu(&gpu))] {
        let dir = tight(name);
        let setup = read_flow_case(&dir).unwrap();
        let summary = run_flow_case(&setup, device).unwrap();
        assert!(summary.converged, "{name}: {summary:?}");
        fields.push(last_fields(&dir, summary.iterations, 400));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let ((u_cpu, p_cpu), (u_gpu, p_gpu)) = (&fields[0], &fields[1]);
    let du = u_cpu
        .iter()
        .zip(u_gpu)
        .map(|(a, b)| (a - b).norm())
        .fold(0.0, f64::max);
    let dp = p_cpu
        .iter()
        .zip(p_gpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("max |U_cpu - U_gpu| = {du:.3e}, max |p_cpu - p_gpu| = {dp:.3e}");
    assert!(
        du < 1e-7 && dp < 1e-7,
        "U differs by {du:.3e}, p by {dp:.3e}"
    );
}

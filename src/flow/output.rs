//! Results of a flow computation: the residual history as a PNG (simpleFoam's
//! `foamMonitor` view: initial residual of every field and the local
//! continuity error per outer iteration, log scale) and the fields U, p and
//! ∇·φ as a VTK file or a VTK series (`.pvd`, with the boundary values of U
//! and p per patch: one step of a steady run, or a step per write time of a
//! transient one), or U, p and φ as an OpenFOAM time directory.

use super::piso::OldTime;
use super::simple::{IterationReport, Simple};
use super::VelocityCondition;
use crate::fvm::BoundaryCondition;
use crate::io::foam_field::{Dimensions, FieldOutput, FoamWriteOptions, TimeDirectory};
use crate::io::vtk::{write_vtu, Field, VtkEncoding, VtkSeries};
use crate::io::OutputError;
use crate::mesh::{Mesh, PatchKind, Vec3};
use crate::validate::{
    draw_axes, draw_series_labels, write_png, DrawResult, PlotText, ValidateError,
};
use std::path::{Path, PathBuf};

const RESIDUAL_PLOT_SIZE: (u32, u32) = (1200, 700);

/// Writes the residual history of `reports` to `path` (PNG), titled `title`.
pub fn write_residual_plot(
    reports: &[IterationReport],
    title: &str,
    path: &Path,
) -> Result<PlotText, ValidateError> {
    write_png(path, RESIDUAL_PLOT_SIZE, |pixels, labels| {
        draw_residuals(reports, title, pixels, labels)
    })
}

/// The curves of the plot: name and (iteration, value) points.
fn residual_series(reports: &[IterationReport]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut push = |name: &str, x: f64, y: f64| {
        if y > 0.0 && y.is_finite() {
            match series.iter_mut().find(|(n, _)| n == name) {
                Some((_, points)) => points.push((x, y)),
                None => series.push((name.to_string(), vec![(x, y)])),
            }
        }
    };
    for r in reports {
        let x = r.iteration as f64;
        for (name, residual) in &r.u_initial {
            push(name, x, *residual);
        }
        push("p", x, r.p_initial);
        push("continuity (sum local)", x, r.continuity[0]);
    }
    series
}

fn draw_residuals(
    reports: &[IterationReport],
    title: &str,
    pixels: &mut [u8],
    labels: bool,
) -> DrawResult {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(pixels, RESIDUAL_PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let series = residual_series(reports);
    let values = series.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y));
    let (lo, hi) = values.fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if series.is_empty() {
        return Ok(());
    }
    let last = reports.last().map_or(1, |r| r.iteration).max(2) as f64;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if labels {
        builder
            .caption(title, ("sans-serif", 24))
            .x_label_area_size(50)
            .y_label_area_size(80);
    }
    let mut chart = builder.build_cartesian_2d(1.0..last, ((lo / 2.0)..(hi * 2.0)).log_scale())?;
    let descriptions = labels.then_some(("outer iteration", "initial residual"));
    draw_axes(&mut chart, descriptions, |mesh| {
        mesh.y_label_formatter(&|v| format!("{v:.0e}"));
    })?;
    let colours = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(0, 0, 0),
        RGBColor(255, 127, 14),
    ];
    for (k, (name, points)) in series.into_iter().enumerate() {
        let style = ShapeStyle::from(&colours[k % colours.len()]).stroke_width(2);
        let drawn = chart.draw_series(LineSeries::new(points, style))?;
        if labels {
            drawn
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
    }
    if labels {
        draw_series_labels(&mut chart)?;
    }
    Ok(())
}

/// Writes U, p and ∇·φ (per volume) as cell fields of one `.vtu` file.
pub fn write_fields(
    path: &Path,
    mesh: &Mesh,
    u: &[Vec3],
    p: &[f64],
    flux_divergence: &[f64],
) -> Result<(), OutputError> {
    write_vtu(
        path,
        mesh,
        &[
            Field::vector("U", u),
            Field::scalar("p", p),
            Field::scalar("div(phi)", flux_divergence),
        ],
        VtkEncoding::Binary,
    )?;
    Ok(())
}

/// Writes the state of `simple` as the series `dir/name.pvd` with one step
/// at its iteration: cell fields U, p and ∇·φ, and U and p on every patch
/// (as `foamToVTK` writes a case). Returns the `.pvd` and the bytes written.
pub fn write_series(
    dir: &Path,
    name: &str,
    simple: &Simple,
    encoding: VtkEncoding,
) -> Result<(PathBuf, u64), OutputError> {
    let mut series = VtkSeries::new(simple.mesh(), dir, name)?.with_encoding(encoding);
    write_step(&mut series, simple.iteration() as f64, simple)?;
    Ok((series.pvd_path(), series.bytes_written()))
}

/// Writes the state of `simple` as the step at `time` of `series` (a
/// series of its mesh): the fields of [`write_series`]. Returns the step's
/// `.vtm`.
pub fn write_step(
    series: &mut VtkSeries,
    time: f64,
    simple: &Simple,
) -> Result<PathBuf, OutputError> {
    let flux_divergence = simple.flux_divergence();
    let (boundary_u, boundary_p) = (simple.boundary_velocity(), simple.boundary_pressure());
    series.write_step(
        time,
        &[
            Field::vector("U", &simple.u),
            Field::scalar("p", &simple.p),
            Field::scalar("div(phi)", &flux_divergence),
        ],
        &[
            Field::vector("U", &boundary_u),
            Field::scalar("p", &boundary_p),
        ],
    )
}

/// Kinematic dimensions `[kg m s K mol A cd]` of U, p and φ.
pub(crate) const U_DIMENSIONS: Dimensions = Dimensions([0.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0]);
pub(crate) const P_DIMENSIONS: Dimensions = Dimensions([0.0, 2.0, -2.0, 0.0, 0.0, 0.0, 0.0]);
pub(crate) const PHI_DIMENSIONS: Dimensions = Dimensions([0.0, 3.0, -1.0, 0.0, 0.0, 0.0, 0.0]);

/// The patch types of a written flux φ: `calculated` on patches and walls,
/// the constraint type (`empty`, `symmetry`, ...) elsewhere.
pub(crate) fn flux_patch_types(mesh: &Mesh) -> Vec<&'static str> {
    written_patch_types(mesh, std::iter::repeat("calculated"))
}

/// The type to write for each patch of a field whose conditions have the
/// names `conditions` (in patch order): on constraint patches
/// (`symmetryPlane`, `symmetry`, `empty`) the patch's own type, which
/// OpenFOAM requires of every field there; a velocity's `symmetry` on a patch
/// or wall (read from `slip`) as `slip`; else the condition's name.
pub(crate) fn written_patch_types<'a>(
    mesh: &Mesh,
    conditions: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    mesh.patches()
        .iter()
        .zip(conditions)
        .map(|(patch, condition)| match patch.kind {
            PatchKind::Patch | PatchKind::Wall if condition == "symmetry" => "slip",
            PatchKind::Patch | PatchKind::Wall => condition,
            constraint => constraint.foam_name(),
        })
        .collect()
}

/// Writes the OpenFOAM time directory `<case_dir>/<iteration>/` of `simple`:
/// `U` (volVectorField, the `velocity` condition types with the boundary
/// face values), `p` (volScalarField, the `pressure` conditions) and `phi`
/// (surfaceScalarField: internal faces, `calculated` patches), each
/// atomically; returns the paths written.
pub fn write_time_directory(
    case_dir: &Path,
    simple: &Simple,
    velocity: &[VelocityCondition],
    pressure: &[BoundaryCondition],
    options: &FoamWriteOptions,
) -> Result<Vec<PathBuf>, OutputError> {
    let time = simple.iteration() as f64;
    write_time_directory_at(case_dir, time, simple, velocity, pressure, options)
}

/// [`write_time_directory`] named by `time` (transient runs).
pub fn write_time_directory_at(
    case_dir: &Path,
    time: f64,
    simple: &Simple,
    velocity: &[VelocityCondition],
    pressure: &[BoundaryCondition],
    options: &FoamWriteOptions,
) -> Result<Vec<PathBuf>, OutputError> {
    let mesh = simple.mesh();
    let directory = TimeDirectory {
        case_dir,
        time,
        mesh,
        options,
    };
    let u = write_velocity(&directory, simple, velocity, "U", &simple.u)?;
    let p_types = written_patch_types(mesh, pressure.iter().map(BoundaryCondition::foam_name));
    let p = directory.write_volume(
        "p",
        &simple.p,
        &p_types,
        &simple.boundary_pressure(),
        P_DIMENSIONS,
    )?;
    let phi = write_flux(case_dir, time, mesh, "phi", &simple.phi, options)?;
    Ok(vec![u, p, phi])
}

/// Writes the backward scheme's old-time level beside [`write_time_directory_at`]'s
/// fields as OpenFOAM does: `U_0` and `phi_0`, the velocity and flux of the time
/// before `time` (`old`), so that a restart from `time` continues with
/// second-order steps; returns the paths written.
pub fn write_old_time_level(
    case_dir: &Path,
    time: f64,
    simple: &Simple,
    velocity: &[VelocityCondition],
    old: &OldTime,
    options: &FoamWriteOptions,
) -> Result<Vec<PathBuf>, OutputError> {
    let directory = TimeDirectory {
        case_dir,
        time,
        mesh: simple.mesh(),
        options,
    };
    let u = write_velocity(&directory, simple, velocity, "U_0", &old.u)?;
    let phi = write_flux(case_dir, time, simple.mesh(), "phi_0", &old.phi, options)?;
    Ok(vec![u, phi])
}

/// Writes the velocity `u` as `name` into `directory`: the `velocity`
/// conditions' types, with their boundary values of `u`.
fn write_velocity(
    directory: &TimeDirectory,
    simple: &Simple,
    velocity: &[VelocityCondition],
    name: &str,
    u: &[Vec3],
) -> Result<PathBuf, OutputError> {
    let types = written_patch_types(
        directory.mesh,
        velocity.iter().map(VelocityCondition::foam_name),
    );
    directory.write_volume(name, u, &types, &simple.boundary_values(u), U_DIMENSIONS)
}

/// Writes the face flux `phi` (internal faces, then boundary faces in face
/// order) as `<case_dir>/<time name>/<name>`, a surfaceScalarField with
/// [`flux_patch_types`]; returns the path written.
pub(crate) fn write_flux(
    case_dir: &Path,
    time: f64,
    mesh: &Mesh,
    name: &str,
    phi: &[f64],
    options: &FoamWriteOptions,
) -> Result<PathBuf, OutputError> {
    let first = mesh.n_internal_faces();
    let phi_types = flux_patch_types(mesh);
    let directory = TimeDirectory {
        case_dir,
        time,
        mesh,
        options,
    };
    let field = FieldOutput {
        name,
        internal: &phi[..first],
        patch_types: &phi_types,
        boundary_values: &phi[first..],
    };
    directory.write(&field, true, PHI_DIMENSIONS)
}

//! `fvpoisson cavity-profiles CASE`: the centreline velocity profiles of a
//! lid-driven cube at a written time, against the spectral solution of
//! Albensoeder & Kuhlmann (2005) at Re = 1000.
//!
//! The case is an OpenFOAM transient case (icoFoam or pimpleFoam, as `run`
//! reads it) whose mesh is a lattice of hexahedra (uniform or graded, see
//! [`LatticeSampler`]) filling a cube; the lid is the wall with the fastest
//! boundary velocity, moving along x with the lid at y = max (OpenFOAM's
//! cavity). u is sampled along the vertical line x = z = ½ and v along the
//! horizontal line y = z = ½ (positions as fractions of the side), by
//! trilinear interpolation of the cell values, the walls taking the boundary
//! velocities the solver uses. Velocities are divided by the lid speed and
//! Re = U L / ν. At Re = 1000 the profiles are compared with the table at
//! its 17 + 17 points ([`ALBENSOEDER_KUHLMANN_1000`]); at another Re only the
//! profiles are given.
//!
//! The change of the 34 sampled values since the previous written time tells
//! how far the run is from its steady state.

use super::foam_to_vtk::time_directories;
use super::ico_foam::{read_transient_case, transient_state};
use super::CaseError;
use crate::flow::reference::{
    compare_with_albensoeder_kuhlmann, max_deviation, rms_deviation, Comparison, LatticeSampler,
    ALBENSOEDER_KUHLMANN_1000,
};
use crate::foam::write::format_general;
use crate::io::foam_field::VectorFieldFile;
use crate::mesh::{Geometry, Mesh, Vec3};
use crate::validate::{
    draw_axes, draw_series_labels, write_png, DrawResult, PlotText, ValidateError,
};
use std::fmt;
use std::path::{Path, PathBuf};

/// Points per line of the dense profiles (CSV and plot).
pub const PROFILE_POINTS: usize = 101;

/// The centreline profiles of a lid-driven cube.
#[derive(Clone, Debug)]
pub struct CubeProfiles {
    /// Cells along x, y, z.
    pub sizes: [usize; 3],
    pub lid_speed: f64,
    pub reynolds: f64,
    /// u / U_lid along x = z = ½ and v / U_lid along y = z = ½ at the
    /// table's 17 + 17 points; the reference values are the table's at
    /// Re = 1000, NaN at another Re.
    pub u_rows: Vec<Comparison>,
    pub v_rows: Vec<Comparison>,
    /// Whether the rows hold the table (Re = 1000).
    pub compared: bool,
    /// `PROFILE_POINTS` equally spaced (position, u) and (position, v).
    pub u_line: Vec<(f64, f64)>,
    pub v_line: Vec<(f64, f64)>,
}

/// The cube of a lattice: its low corner and side; an error unless the
/// lattice's box is a cube.
fn cube(sampler: &LatticeSampler) -> Result<(Vec3, f64), String> {
    let lo = Vec3::from_fn(|a, _| sampler.axis(a)[0]);
    let hi = Vec3::from_fn(|a, _| *sampler.axis(a).last().unwrap_or(&0.0));
    let extent = hi - lo;
    let side = extent.max();
    if extent.min() < (1.0 - 1e-9) * side {
        return Err(format!(
            "the mesh is a {} × {} × {} box, not a cube",
            extent.x, extent.y, extent.z
        ));
    }
    Ok((lo, side))
}

impl CubeProfiles {
    /// The profiles of the velocity `u` (per cell; `boundary_u` per boundary
    /// face) on the lattice of `sampler` for viscosity `nu`.
    pub fn sample(
        sampler: &LatticeSampler,
        (u, boundary_u): (&[Vec3], &[Vec3]),
        nu: f64,
    ) -> Result<Self, String> {
        let (origin, side) = cube(sampler)?;
        let lid_speed = boundary_u.iter().map(|v| v.norm()).fold(0.0, f64::max);
        if lid_speed <= 0.0 || !lid_speed.is_finite() {
            return Err("no wall moves: the boundary velocity is zero everywhere".into());
        }
        let reynolds = lid_speed * side / nu;
        let table = &ALBENSOEDER_KUHLMANN_1000;
        let compared = (reynolds - f64::from(table.reynolds)).abs() <= 1e-6 * reynolds;
        let (mut u_rows, mut v_rows) = compare_with_albensoeder_kuhlmann(
            table,
            sampler,
            (u, boundary_u),
            origin,
            side,
            lid_speed,
        );
        if !compared {
            for row in u_rows.iter_mut().chain(&mut v_rows) {
                row.reference = f64::NAN;
            }
        }
        let fractions: Vec<f64> = (0..PROFILE_POINTS)
            .map(|k| k as f64 / (PROFILE_POINTS - 1) as f64)
            .collect();
        let line = |c: usize, at: &dyn Fn(f64) -> Vec3| -> Vec<(f64, f64)> {
            let points: Vec<Vec3> = fractions.iter().map(|&s| origin + side * at(s)).collect();
            fractions
                .iter()
                .zip(sampler.sample(u, boundary_u, c, &points))
                .map(|(&s, value)| (s, value / lid_speed))
                .collect()
        };
        Ok(Self {
            sizes: sampler.sizes(),
            lid_speed,
            reynolds,
            u_line: line(0, &|y| Vec3::new(0.5, y, 0.5)),
            v_line: line(1, &|x| Vec3::new(x, 0.5, 0.5)),
            u_rows,
            v_rows,
            compared,
        })
    }

    /// The largest and the root mean square deviation from the table over
    /// both lines.
    pub fn deviations(&self) -> (f64, f64) {
        let rows: Vec<Comparison> = self.u_rows.iter().chain(&self.v_rows).copied().collect();
        (max_deviation(&rows), rms_deviation(&rows))
    }

    /// The largest change of the 34 sampled values from `earlier`'s.
    pub fn change_from(&self, earlier: &CubeProfiles) -> f64 {
        let now = self.u_rows.iter().chain(&self.v_rows);
        let before = earlier.u_rows.iter().chain(&earlier.v_rows);
        now.zip(before)
            .map(|(a, b)| (a.computed - b.computed).abs())
            .fold(0.0, f64::max)
    }

    /// The dense profiles as CSV: `s,u,v` (u at (½, s, ½), v at (s, ½, ½),
    /// both over the lid speed), one line per point.
    pub fn csv(&self) -> String {
        let mut text = String::from("s,u,v\n");
        for ((s, u), (_, v)) in self.u_line.iter().zip(&self.v_line) {
            text.push_str(&format!("{s},{u},{v}\n"));
        }
        text
    }

    /// Writes the profiles with the table's points as a PNG.
    pub fn write_plot(&self, path: &Path, title: &str) -> Result<PlotText, ValidateError> {
        write_png(path, PLOT_SIZE, |pixels, labels| {
            draw_profiles(self, title, pixels, labels)
        })
    }
}

impl fmt::Display for CubeProfiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [nx, ny, nz] = self.sizes;
        writeln!(
            f,
            "lid-driven cube, {nx} × {ny} × {nz} cells, lid speed {}, Re = {}",
            format_general(self.lid_speed, 6),
            format_general(self.reynolds, 6)
        )?;
        let source = "Albensoeder & Kuhlmann 2005";
        for (title, rows) in [
            (
                format!("u along x = z = 0.5 ({source}, Table 5)"),
                &self.u_rows,
            ),
            (
                format!("v along y = z = 0.5 ({source}, Table 6)"),
                &self.v_rows,
            ),
        ] {
            writeln!(f, "{title}")?;
            if self.compared {
                writeln!(
                    f,
                    "  {:>8} {:>10} {:>10} {:>10}",
                    "position", "reference", "computed", "deviation"
                )?;
                for r in rows {
                    writeln!(
                        f,
                        "  {:>8.4} {:>10.5} {:>10.5} {:>10.5}",
                        r.position,
                        r.reference,
                        r.computed,
                        r.computed - r.reference
                    )?;
                }
                writeln!(
                    f,
                    "  max |deviation| {:.5}, RMS {:.5}",
                    max_deviation(rows),
                    rms_deviation(rows)
                )?;
            } else {
                writeln!(f, "  {:>8} {:>10}", "position", "computed")?;
                for r in rows {
                    writeln!(f, "  {:>8.4} {:>10.5}", r.position, r.computed)?;
                }
            }
        }
        if self.compared {
            let (max, rms) = self.deviations();
            writeln!(f, "both lines: max |deviation| {max:.5}, RMS {rms:.5}")?;
        } else {
            writeln!(
                f,
                "no reference table for Re = {} (Albensoeder & Kuhlmann's is for Re = 1000)",
                format_general(self.reynolds, 6)
            )?;
        }
        Ok(())
    }
}

/// The profiles of a case at one of its written times.
#[derive(Clone, Debug)]
pub struct CaseProfiles {
    /// The time directory's name.
    pub time: String,
    pub profiles: CubeProfiles,
    /// The previous written time (other than the start) and the largest
    /// change of the sampled values since then.
    pub change: Option<(String, f64)>,
}

/// The profiles of the case in `case_dir` at the written time `time` (the
/// latest when `None`), and their change from the time written before it.
pub fn case_profiles(case_dir: &Path, time: Option<&str>) -> Result<CaseProfiles, CaseError> {
    let case = read_transient_case(case_dir)?;
    let mesh: &Mesh = &case.mesh;
    let geometry: Geometry = mesh.geometry()?;
    let sampler = LatticeSampler::new(mesh, &geometry).map_err(|e| {
        CaseError::invalid(format!(
            "{}: the cavity profiles need a lattice of hexahedra: {e}",
            case_dir.display()
        ))
    })?;
    let boundary_u = transient_state(&case.setup, mesh, &geometry)?
        .simple
        .boundary_velocity();
    let times: Vec<String> = time_directories(case_dir)?
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    let index = match time {
        Some(t) => times.iter().position(|name| name == t).ok_or_else(|| {
            CaseError::invalid(format!(
                "{}: no time directory {t} (written: {})",
                case_dir.display(),
                times.join(" ")
            ))
        })?,
        None => times.len().checked_sub(1).ok_or_else(|| {
            CaseError::invalid(format!("{}: no time directory", case_dir.display()))
        })?,
    };
    let nu = case.setup.settings.nu;
    let profiles_at = |name: &str| -> Result<CubeProfiles, CaseError> {
        let path: PathBuf = case_dir.join(name).join("U");
        let u = VectorFieldFile::read(&path, mesh.n_cells())?
            .internal
            .expand(mesh.n_cells());
        CubeProfiles::sample(&sampler, (&u, &boundary_u), nu)
            .map_err(|e| CaseError::invalid(format!("{}: {e}", path.display())))
    };
    let profiles = profiles_at(&times[index])?;
    let change = match index {
        0 | 1 => None,
        i => Some((
            times[i - 1].clone(),
            profiles.change_from(&profiles_at(&times[i - 1])?),
        )),
    };
    Ok(CaseProfiles {
        time: times[index].clone(),
        profiles,
        change,
    })
}

const PLOT_SIZE: (u32, u32) = (1400, 700);

fn draw_profiles(
    profiles: &CubeProfiles,
    title: &str,
    pixels: &mut [u8],
    labels: bool,
) -> DrawResult {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(pixels, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = if labels {
        root.titled(title, ("sans-serif", 24))?
    } else {
        root
    };
    let panels = root.split_evenly((1, 2));
    // u against y (vertical axis: y), v against x.
    let u_line: Vec<(f64, f64)> = profiles.u_line.iter().map(|&(s, u)| (u, s)).collect();
    let u_points: Vec<(f64, f64)> = profiles
        .u_rows
        .iter()
        .map(|r| (r.reference, r.position))
        .collect();
    let v_points: Vec<(f64, f64)> = profiles
        .v_rows
        .iter()
        .map(|r| (r.position, r.reference))
        .collect();
    let computed = ShapeStyle::from(&RGBColor(31, 119, 180)).stroke_width(2);
    for (panel, line, points, (x_desc, y_desc), (x_range, y_range)) in [
        (
            &panels[0],
            u_line,
            u_points,
            ("u / U_lid at x = z = 0.5", "y"),
            (-0.4..1.0, 0.0..1.0),
        ),
        (
            &panels[1],
            profiles.v_line.clone(),
            v_points,
            ("x", "v / U_lid at y = z = 0.5"),
            (0.0..1.0, -0.6..0.4),
        ),
    ] {
        let mut builder = ChartBuilder::on(panel);
        builder.margin(20);
        if labels {
            builder.x_label_area_size(50).y_label_area_size(70);
        }
        let mut chart = builder.build_cartesian_2d(x_range, y_range)?;
        draw_axes(&mut chart, labels.then_some((x_desc, y_desc)), |_| {})?;
        let drawn = chart.draw_series(LineSeries::new(line, computed))?;
        if labels {
            drawn
                .label("fvpoisson")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], computed));
        }
        if profiles.compared {
            let drawn = chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 5, ShapeStyle::from(&BLACK).stroke_width(2))),
            )?;
            if labels {
                drawn
                    .label("Albensoeder & Kuhlmann (2005)")
                    .legend(|(x, y)| Circle::new((x + 10, y), 5, BLACK.stroke_width(2)));
            }
        }
        if labels {
            draw_series_labels(&mut chart)?;
        }
    }
    Ok(())
}

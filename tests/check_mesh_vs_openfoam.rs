//! `check-mesh` against OpenFOAM v1912's `checkMesh`: for every
//! `meshes/foam/<name>/checkMesh.log`, the mesh is loaded and our report must
//! reproduce the log's numbers to the precision they are printed with.

use fvpoisson::mesh::{self, CellShape, MeshReport};
use std::path::{Path, PathBuf};

/// A number from the log with the precision it was printed at.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Printed {
    value: f64,
    /// Half a unit in the last printed significant digit.
    half_unit: f64,
}

impl Printed {
    fn parse(text: &str, digits: i32) -> Result<Self, String> {
        let value: f64 = text
            .parse()
            .map_err(|_| format!("'{text}' is not a number"))?;
        let half_unit = if value == 0.0 {
            0.0
        } else {
            0.5 * 10f64.powi(value.abs().log10().floor() as i32 - digits + 1)
        };
        Ok(Self { value, half_unit })
    }

    /// Whether `ours` rounds to the printed value, give or take `slack`.
    fn matches(&self, ours: f64, slack: Slack) -> bool {
        let tol = self
            .half_unit
            .max(slack.rel * self.value.abs())
            .max(slack.abs);
        (ours - self.value).abs() <= tol
    }
}

/// What a comparison allows beyond the printed precision.
#[derive(Clone, Copy, Debug)]
struct Slack {
    rel: f64,
    abs: f64,
}

/// Values computed face by face or cell by cell as OpenFOAM does: the geometry
/// agrees with OpenFOAM's to 1e-14 relative (see `tests/polymesh.rs`), a few ulp.
const EXACT: Slack = Slack {
    rel: 1e-14,
    abs: 0.0,
};
/// Skewness of faces that are not skewed at all is rounding noise (~1e-14).
const SKEWNESS: Slack = Slack {
    rel: 1e-14,
    abs: 1e-12,
};
/// Sums over the mesh, taken in parallel in another order than OpenFOAM's.
const SUM: Slack = Slack {
    rel: 1e-12,
    abs: 0.0,
};

/// The numbers of a `checkMesh` log (default options).
#[derive(Debug, Default)]
struct CheckMeshLog {
    points: usize,
    faces: usize,
    internal_faces: usize,
    cells: usize,
    faces_per_cell: Option<Printed>,
    /// Shape name as checkMesh prints it ("hexahedra", "tet wedges", ...) and count.
    shapes: Vec<(String, usize)>,
    /// Name, faces, points.
    patches: Vec<(String, usize, usize)>,
    bounding_box: Vec<Printed>,
    solution_directions: Option<[bool; 3]>,
    boundary_openness: Vec<Printed>,
    max_cell_openness: Option<Printed>,
    max_aspect_ratio: Option<Printed>,
    min_face_area: Option<Printed>,
    max_face_area: Option<Printed>,
    min_volume: Option<Printed>,
    max_volume: Option<Printed>,
    total_volume: Option<Printed>,
    max_non_orthogonality: Option<Printed>,
    avg_non_orthogonality: Option<Printed>,
    max_skewness: Option<Printed>,
    mesh_ok: Option<bool>,
}

/// Significant digits the log's numbers were written with: 6 by default, more
/// when the case sets `writePrecision` (the longest mantissa tells).
fn precision(text: &str) -> i32 {
    text.split(|c: char| c.is_whitespace() || "()=:,".contains(c))
        .filter(|t| t.contains('.') && t.parse::<f64>().is_ok())
        .map(|t| {
            let mantissa = t.split(['e', 'E']).next().unwrap_or("");
            let digits = mantissa.trim_start_matches(['-', '0', '.']);
            digits.chars().filter(char::is_ascii_digit).count() as i32
        })
        .max()
        .unwrap_or(6)
        .max(6)
}

/// The text after `label` on a line, trimmed.
fn after<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    line.find(label).map(|i| line[i + label.len()..].trim())
}

/// Numbers inside "(a b c)" groups, in order.
fn vectors(text: &str, digits: i32) -> Result<Vec<Printed>, String> {
    text.split(['(', ')'])
        .skip(1)
        .step_by(2)
        .flat_map(|group| group.split_whitespace())
        .map(|t| Printed::parse(t, digits))
        .collect()
}

fn count(text: &str, line_no: usize) -> Result<usize, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("line {line_no}: '{text}' is not a count"))
}

impl CheckMeshLog {
    fn parse(text: &str) -> Result<Self, String> {
        let digits = precision(text);
        let num = |t: &str| Printed::parse(t.trim().trim_end_matches('.'), digits);
        let mut log = Self::default();
        let mut section = "";
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let trimmed = line.trim();
            if trimmed.is_empty() {
                section = "";
                continue;
            }
            if trimmed == "Overall number of cells of each type:" {
                section = "shapes";
                continue;
            }
            if trimmed.starts_with("Patch ") && trimmed.contains("Faces") {
                section = "patches";
                continue;
            }
            match section {
                // Polyhedra by face count follow the shape counts (skipped).
                "shapes" if trimmed.starts_with("Breakdown") => {
                    section = "breakdown";
                    continue;
                }
                "breakdown" => continue,
                "shapes" => {
                    if let Some((name, k)) = trimmed.split_once(':') {
                        log.shapes.push((name.to_string(), count(k, n)?));
                    }
                    continue;
                }
                "patches" => {
                    let t: Vec<_> = trimmed.split_whitespace().collect();
                    if t.len() < 3 {
                        return Err(format!("line {n}: short patch row '{trimmed}'"));
                    }
                    log.patches
                        .push((t[0].to_string(), count(t[1], n)?, count(t[2], n)?));
                    continue;
                }
                _ => {}
            }
            if let Some(v) = after(line, "    points:") {
                log.points = count(v, n)?;
            } else if let Some(v) = after(line, "    internal faces:") {
                log.internal_faces = count(v, n)?;
            } else if let Some(v) = after(line, "    faces per cell:") {
                log.faces_per_cell = Some(num(v)?);
            } else if let Some(v) = after(line, "    faces:") {
                log.faces = count(v, n)?;
            } else if let Some(v) = after(line, "    cells:") {
                log.cells = count(v, n)?;
            } else if let Some(v) = after(line, "Overall domain bounding box") {
                log.bounding_box = vectors(v, digits).map_err(|e| format!("line {n}: {e}"))?;
            } else if let Some(v) = after(line, "solution (non-empty) directions") {
                let d = vectors(v, digits).map_err(|e| format!("line {n}: {e}"))?;
                if d.len() != 3 {
                    return Err(format!("line {n}: expected 3 directions"));
                }
                log.solution_directions =
                    Some([d[0].value > 0.0, d[1].value > 0.0, d[2].value > 0.0]);
            } else if let Some(v) = after(line, "Boundary openness") {
                log.boundary_openness = vectors(v, digits).map_err(|e| format!("line {n}: {e}"))?;
            } else if let Some(v) = after(line, "Max cell openness = ") {
                log.max_cell_openness = Some(num(v.trim_end_matches("OK."))?);
            } else if let Some(v) = after(line, "Max aspect ratio = ") {
                log.max_aspect_ratio = Some(num(v.trim_end_matches("OK."))?);
            } else if let Some(v) = after(line, "Minimum face area = ") {
                let (min, rest) = v
                    .split_once(". Maximum face area = ")
                    .ok_or(format!("line {n}: no maximum face area"))?;
                let max = rest.split("  ").next().unwrap_or(rest);
                log.min_face_area = Some(num(min)?);
                log.max_face_area = Some(num(max)?);
            } else if let Some(v) = after(line, "Min volume = ") {
                let (min, rest) = v
                    .split_once(". Max volume = ")
                    .ok_or(format!("line {n}: no max volume"))?;
                let (max, rest) = rest
                    .split_once(".  Total volume = ")
                    .ok_or(format!("line {n}: no total volume"))?;
                let total = rest.split("  ").next().unwrap_or(rest);
                log.min_volume = Some(num(min)?);
                log.max_volume = Some(num(max)?);
                log.total_volume = Some(num(total)?);
            } else if let Some(v) = after(line, "Mesh non-orthogonality Max: ") {
                let (max, avg) = v
                    .split_once(" average: ")
                    .ok_or(format!("line {n}: no average"))?;
                log.max_non_orthogonality = Some(num(max)?);
                log.avg_non_orthogonality = Some(num(avg)?);
            } else if let Some(v) = after(line, "Max skewness = ") {
                let v = v.split([' ', ',']).next().unwrap_or(v);
                log.max_skewness = Some(num(v)?);
            } else if trimmed == "Mesh OK." {
                log.mesh_ok = Some(true);
            } else if trimmed.starts_with("Failed ") && trimmed.ends_with("mesh checks.") {
                log.mesh_ok = Some(false);
            }
        }
        if log.cells == 0 || log.mesh_ok.is_none() {
            return Err("not a complete checkMesh log (no cell count or no verdict)".into());
        }
        Ok(log)
    }

    /// Differences between this log and our report, one line each.
    fn differences(&self, r: &MeshReport) -> Vec<String> {
        let mut out = Vec::new();
        let mut exact = |what: &str, log: usize, ours: usize| {
            if log != ours {
                out.push(format!("{what}: checkMesh {log}, ours {ours}"));
            }
        };
        exact("points", self.points, r.n_points);
        exact("faces", self.faces, r.n_faces);
        exact("internal faces", self.internal_faces, r.n_internal_faces);
        exact("cells", self.cells, r.n_cells);
        let log_shape = |name: &str| self.shapes.iter().find(|s| s.0 == name).map_or(0, |s| s.1);
        for &(shape, ours) in &r.shape_counts {
            // We do not tell wedges and tet-wedges from other polyhedra.
            let log = match shape {
                CellShape::Polyhedron => {
                    log_shape("polyhedra") + log_shape("wedges") + log_shape("tet wedges")
                }
                s => log_shape(s.name()),
            };
            exact(shape.name(), log, ours);
        }
        exact("patches", self.patches.len(), r.patches.len());
        for ((name, faces, points), p) in self.patches.iter().zip(&r.patches) {
            if (name, *faces, *points) != (&p.name, p.faces, p.points) {
                out.push(format!(
                    "patch: checkMesh {name} {faces} faces {points} points, ours {} {} faces {} points",
                    p.name, p.faces, p.points
                ));
            }
        }
        if self.solution_directions != Some(r.solution_directions) {
            out.push(format!(
                "solution directions: checkMesh {:?}, ours {:?}",
                self.solution_directions, r.solution_directions
            ));
        }
        let (lo, hi) = r.bounding_box;
        let ours_box = [lo.x, lo.y, lo.z, hi.x, hi.y, hi.z];
        if self.bounding_box.len() != 6
            || self
                .bounding_box
                .iter()
                .zip(ours_box)
                .any(|(l, o)| !l.matches(o, EXACT))
        {
            out.push(format!(
                "bounding box: checkMesh {:?}, ours {ours_box:?}",
                self.bounding_box
            ));
        }
        for (what, log, ours, slack) in [
            (
                "faces per cell",
                self.faces_per_cell,
                Some(r.faces_per_cell()),
                EXACT,
            ),
            (
                "max cell openness",
                self.max_cell_openness,
                Some(r.max_cell_openness),
                EXACT,
            ),
            (
                "max aspect ratio",
                self.max_aspect_ratio,
                Some(r.max_aspect_ratio),
                EXACT,
            ),
            (
                "min face area",
                self.min_face_area,
                Some(r.min_face_area),
                EXACT,
            ),
            (
                "max face area",
                self.max_face_area,
                Some(r.max_face_area),
                EXACT,
            ),
            ("min volume", self.min_volume, Some(r.min_volume), EXACT),
            ("max volume", self.max_volume, Some(r.max_volume), EXACT),
            ("total volume", self.total_volume, Some(r.total_volume), SUM),
            (
                "max non-orthogonality",
                self.max_non_orthogonality,
                r.max_non_orthogonality,
                EXACT,
            ),
            (
                "avg non-orthogonality",
                self.avg_non_orthogonality,
                r.avg_non_orthogonality,
                SUM,
            ),
            (
                "max skewness",
                self.max_skewness,
                Some(r.max_skewness),
                SKEWNESS,
            ),
        ] {
            match (log, ours) {
                (Some(l), Some(o)) if l.matches(o, slack) => {}
                (None, None) => {}
                _ => out.push(format!("{what}: checkMesh {log:?}, ours {ours:?}")),
            }
        }
        if self.mesh_ok != Some(r.is_ok()) {
            out.push(format!(
                "verdict: checkMesh OK {:?}, ours failed {:?}",
                self.mesh_ok,
                r.failed_checks()
            ));
        }
        out
    }
}

fn read_log(path: &Path) -> CheckMeshLog {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    CheckMeshLog::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The parser on logs written here by `checkMesh` for a graded, skewed 5x4x3
/// blockMesh block, at the default precision and at `writePrecision 17`.
#[test]
fn parses_check_mesh_logs() {
    let log = read_log(&data("checkMesh_skew3d.log"));
    assert_eq!(
        (log.points, log.faces, log.internal_faces, log.cells),
        (120, 227, 133, 60)
    );
    assert_eq!(log.shapes.len(), 7);
    assert_eq!(log.shapes[0], ("hexahedra".to_string(), 60));
    assert_eq!(log.shapes[4], ("tet wedges".to_string(), 0));
    let patches: Vec<_> = log
        .patches
        .iter()
        .map(|(n, f, p)| (n.as_str(), *f, *p))
        .collect();
    assert_eq!(
        patches,
        [("walls", 54, 72), ("lid", 20, 30), ("bottom", 20, 30)]
    );
    let values = |p: &[Printed]| p.iter().map(|p| p.value).collect::<Vec<_>>();
    assert_eq!(values(&log.bounding_box), [0.0, 0.0, 0.0, 1.4, 1.2, 1.2]);
    assert_eq!(log.solution_directions, Some([true; 3]));
    assert_eq!(
        values(&log.boundary_openness),
        [-6.09366e-17, -2.15523e-17, -1.64208e-17]
    );
    assert_eq!(log.max_cell_openness.unwrap().value, 1.61578e-16);
    let v = |p: Option<Printed>| p.unwrap().value;
    assert_eq!(v(log.faces_per_cell), 6.0);
    assert_eq!(v(log.max_aspect_ratio), 2.75187);
    assert_eq!(
        (v(log.min_face_area), v(log.max_face_area)),
        (0.0334877, 0.165241)
    );
    assert_eq!(
        (v(log.min_volume), v(log.max_volume), v(log.total_volume)),
        (0.00784498, 0.0416132, 1.16433)
    );
    assert_eq!(
        (v(log.max_non_orthogonality), v(log.avg_non_orthogonality)),
        (21.51, 11.4408)
    );
    assert_eq!(v(log.max_skewness), 0.394999);
    assert_eq!(log.mesh_ok, Some(true));
    // 6 digits: 1.16433 stands for [1.164325, 1.164335].
    let total = log.total_volume.unwrap();
    assert!((total.half_unit - 5e-6).abs() < 1e-18);
    assert!(total.matches(1.1643333, EXACT) && !total.matches(1.16434, EXACT));

    let log17 = read_log(&data("checkMesh_skew3d_precision17.log"));
    let total17 = log17.total_volume.unwrap();
    assert_eq!(total17.value, 1.1643333333321193);
    assert!(total17.half_unit < 1e-15);
    // The two logs agree to the coarser one's precision.
    for (a, b) in [
        (log.max_aspect_ratio, log17.max_aspect_ratio),
        (log.min_volume, log17.min_volume),
        (log.max_non_orthogonality, log17.max_non_orthogonality),
        (log.max_skewness, log17.max_skewness),
    ] {
        assert!(a.unwrap().matches(b.unwrap().value, EXACT), "{a:?} {b:?}");
    }
}

#[test]
fn truncated_logs_are_refused() {
    let text = std::fs::read_to_string(data("checkMesh_skew3d.log")).unwrap();
    let cut = text.find("Checking geometry").unwrap();
    assert!(CheckMeshLog::parse(&text[..cut]).is_err());
    let garbled = text.replace("cells:            60", "cells:            sixty");
    assert!(CheckMeshLog::parse(&garbled).unwrap_err().contains("sixty"));
}

/// Needs the polyMesh reader and the reference meshes of the polyMesh branch.
#[test]
fn reports_match_check_mesh_logs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("meshes/foam");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.join("checkMesh.log").is_file())
        .collect();
    cases.sort();
    assert!(
        !cases.is_empty(),
        "no checkMesh.log under {}",
        root.display()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let log = read_log(&case.join("checkMesh.log"));
        let mesh = mesh::load(case.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
        for d in log.differences(&MeshReport::new(&mesh)) {
            failures.push(format!("{}: {d}", case.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

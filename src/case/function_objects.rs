//! The `functions` of a transient case's `system/controlDict`: OpenFOAM
//! v1912's `residuals` (`solverInfo`), `fieldMinMax` and `probes` function
//! objects, read here and run after every time step by
//! [`super::ico_foam::run_transient_case`]. Other function objects are named
//! in a warning and ignored.
//!
//! `fieldMinMax` writes `postProcessing/<name>/<startTime>/fieldMinMax.dat`
//! and prints its `fieldMinMax <name> write:` block to the log as v1912 does:
//! the cells and the faces of every patch but the empty ones are searched,
//! cells first, then patch by patch, a later candidate winning only when
//! strictly smaller (larger). In `mode magnitude` a vector field is compared
//! by `mag`, a scalar field by its value. In `mode component` v1912 compares
//! vectors with its vector `<`, true only when every component is smaller: on
//! a two-dimensional case, where one component is zero everywhere, no vector
//! is ever smaller than another and both the minimum and the maximum are the
//! first cell's value. fvpoisson reproduces that, so the files match.
//!
//! `probes` writes `postProcessing/<name>/<startTime>/<field>` for each field:
//! each location's cell is the cell of the nearest centre when it contains the
//! location, else the first cell that does (a cell contains a point on the
//! inner side of all its faces); the cell's value is written, not
//! interpolated (v1912's default). A location in no cell is warned about by
//! name, marked `# Not Found` and written as `-1e+300`.
//!
//! `writeControl timeStep|writeTime|outputTime|runTime|adjustableRunTime` and
//! `writeInterval` choose the steps each object runs at (default: every step).

use super::openfoam::{at, at_key, interval_in_steps, one_of, Reader};
use super::CaseError;
use crate::flow::simple::Simple;
use crate::foam::dict::{Value, ValueKind};
use crate::foam::foam_dict::compile_key;
use crate::foam::write::{format_general, format_scientific};
use crate::foam::{FoamDict, FoamEntry};
use crate::io::foam_field::time_name;
use crate::io::OutputError;
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The fields a function object may name.
const FIELDS: [&str; 2] = ["U", "p"];

/// The function objects of a case, as read.
#[derive(Clone, Debug, Default)]
pub struct FunctionObjects {
    /// `solverInfo` objects (`#includeFunc residuals`): each writes
    /// `postProcessing/<name>/<start>/solverInfo.dat`.
    pub residuals: Vec<SolverInfo>,
    pub field_min_max: Vec<FieldMinMax>,
    pub probes: Vec<Probes>,
}

/// One `solverInfo` object: its name and the fields whose solves it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolverInfo {
    pub name: String,
    /// Whether U's and p's columns are written (U first, as v1912 sorts
    /// the fields).
    pub u: bool,
    pub p: bool,
}

/// What `fieldMinMax` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinMaxMode {
    Magnitude,
    Component,
}

/// One `fieldMinMax` object.
#[derive(Clone, Debug)]
pub struct FieldMinMax {
    pub name: String,
    pub fields: Vec<String>,
    pub mode: MinMaxMode,
    /// `location yes`: the cell and position of each extreme.
    pub location: bool,
    /// Runs at the steps that are multiples of this.
    pub every: usize,
}

/// One `probes` object.
#[derive(Clone, Debug)]
pub struct Probes {
    pub name: String,
    pub fields: Vec<String>,
    pub locations: Vec<Vec3>,
    pub every: usize,
}

/// Reads `functions { ... }` of `control` (entries named in warnings when
/// not supported). `write_every` (the steps between the run's writes;
/// `None` where it writes by time, so that `writeControl writeTime` is
/// refused) and `delta_t` turn each object's `writeControl` into steps.
pub(super) fn read_functions(
    r: &mut Reader,
    control: &FoamDict,
    write_every: Option<usize>,
    delta_t: f64,
) -> Result<FunctionObjects, CaseError> {
    let mut objects = FunctionObjects::default();
    let Some(functions) = control.get_dict_opt("functions")? else {
        return Ok(objects);
    };
    for e in functions.entries() {
        let kind = match e.as_dict() {
            Some(d) => d.get_opt::<String>("type")?.unwrap_or_default(),
            // `#includeFunc residuals` (or `residuals(p U)`) is kept as an
            // entry of key `#includeFunc residuals`.
            None => {
                let name = e
                    .key()
                    .strip_prefix("#includeFunc")
                    .unwrap_or(e.key())
                    .trim();
                name.split('(').next().unwrap_or(name).trim().to_string()
            }
        };
        functions.ignore(e.key());
        if let Some(dict) = e.as_dict() {
            // OpenFOAM's switch: the object is read but does not run.
            if !dict.get_or("enabled", true)? {
                log::info!("function object '{}': enabled false, not run", e.key());
                continue;
            }
        }
        match (kind.as_str(), e.as_dict()) {
            ("residuals" | "solverInfo", dict) => {
                let (name, fields) = match dict {
                    Some(dict) => {
                        let fields = match dict.contains("fields") {
                            true => {
                                let (fields, unknown) = selected_fields(dict)?;
                                warn_unsolved(r, e, &unknown);
                                fields
                            }
                            false => {
                                r.warn(format!(
                                    "{}:{}: function object '{}' names no 'fields': U and p \
                                     written (OpenFOAM asks for the list)",
                                    e.file().display(),
                                    e.line(),
                                    e.key()
                                ));
                                FIELDS.map(String::from).to_vec()
                            }
                        };
                        common_entries(r, dict);
                        (e.key().to_string(), fields)
                    }
                    // `#includeFunc residuals(p)`: the fields in brackets
                    // (the packaged object's own are (p U)); v1912 names the
                    // object by the call without its white space, so
                    // `residuals(p)` writes postProcessing/residuals(p).
                    None => {
                        let call = e.key().strip_prefix("#includeFunc").unwrap_or(e.key());
                        let name: String = call.chars().filter(|c| !c.is_whitespace()).collect();
                        let listed: Vec<String> = match name.split_once('(') {
                            Some((_, list)) => list
                                .trim_end_matches(')')
                                .split(',')
                                .filter(|f| !f.is_empty())
                                .map(String::from)
                                .collect(),
                            None => FIELDS.map(String::from).to_vec(),
                        };
                        let (fields, unknown): (Vec<String>, Vec<String>) = listed
                            .into_iter()
                            .partition(|f| FIELDS.contains(&f.as_str()));
                        warn_unsolved(r, e, &unknown);
                        (name, fields)
                    }
                };
                objects.residuals.push(SolverInfo {
                    name,
                    u: fields.iter().any(|f| f == "U"),
                    p: fields.iter().any(|f| f == "p"),
                });
            }
            ("fieldMinMax", Some(dict)) => {
                let mode = one_of(
                    dict,
                    "mode",
                    "magnitude",
                    [
                        ("magnitude", MinMaxMode::Magnitude),
                        ("component", MinMaxMode::Component),
                    ],
                )?;
                objects.field_min_max.push(FieldMinMax {
                    name: e.key().to_string(),
                    // v1912 runs the fields in sorted order, whatever order they are given in.
                    fields: sorted(field_names(dict)?),
                    mode,
                    location: dict.get_or("location", true)?,
                    every: steps_between(dict, write_every, delta_t)?,
                });
                dict.ignore("log");
                common_entries(r, dict);
            }
            ("probes", Some(dict)) => {
                let (entry, values) = dict
                    .stream_entry("probeLocations")?
                    .ok_or_else(|| CaseError::Mesh(dict.missing("probeLocations")))?;
                let locations = match values {
                    [list] => list.to_vectors(e.file())?,
                    _ => return Err(at(entry, "probeLocations: expected a list of (x y z)")),
                };
                if let Some(scheme) = dict.get_opt::<String>("interpolationScheme")? {
                    if scheme != "cell" {
                        return Err(at_key(
                            dict,
                            "interpolationScheme",
                            format!(
                                "interpolationScheme {scheme}: only cell (the cell's value) is \
                                 supported"
                            ),
                        ));
                    }
                }
                dict.ignore("fixedLocations");
                objects.probes.push(Probes {
                    name: e.key().to_string(),
                    fields: field_names(dict)?,
                    locations,
                    every: steps_between(dict, write_every, delta_t)?,
                });
                common_entries(r, dict);
            }
            _ => r.warn(format!(
                "{}:{}: function object '{}' (type {kind}) is not supported by fvpoisson, \
                 ignored",
                e.file().display(),
                e.line(),
                e.key()
            )),
        }
    }
    Ok(objects)
}

/// Marks the entries every function object may carry, then warns about the rest.
fn common_entries(r: &mut Reader, dict: &FoamDict) {
    for key in ["type", "libs", "enabled"] {
        dict.ignore(key);
    }
    r.warn_unread(dict);
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// `fields (U p)`: each of U and p (a quoted name as a regular expression).
fn field_names(dict: &FoamDict) -> Result<Vec<String>, CaseError> {
    let (fields, unknown) = selected_fields(dict)?;
    if let Some(other) = unknown.first() {
        let entry = dict.entry("fields").expect("read above");
        return Err(at(
            entry,
            format!("fields: '{other}' is not a field of the run; U and p are"),
        ));
    }
    Ok(fields)
}

/// Names `unknown` fields of a solverInfo object `e` in a warning: v1912
/// writes only the fields that were solved.
fn warn_unsolved(r: &mut Reader, e: &FoamEntry, unknown: &[String]) {
    for field in unknown {
        r.warn(format!(
            "{}:{}: function object '{}': field '{field}' has no solve in this solver, not \
             written",
            e.file().display(),
            e.line(),
            e.key()
        ));
    }
}

/// The run's fields that `fields (...)` selects, in the order listed, each
/// once: a word by its name, a quoted name as a regular expression (v1912's
/// `(".*")`); and the words that name no field of the run.
fn selected_fields(dict: &FoamDict) -> Result<(Vec<String>, Vec<String>), CaseError> {
    let (entry, values) = dict
        .stream_entry("fields")?
        .ok_or_else(|| CaseError::Mesh(dict.missing("fields")))?;
    let bad = || at(entry, "fields: expected a list of field names, (U p)");
    let [Value {
        kind: ValueKind::List(items),
        ..
    }] = values
    else {
        return Err(bad());
    };
    let (mut fields, mut unknown) = (Vec::new(), Vec::new());
    for item in items {
        let selected: Vec<&str> = match &item.kind {
            ValueKind::Word(w) if FIELDS.contains(&w.as_str()) => vec![w.as_str()],
            ValueKind::Word(w) => {
                unknown.push(w.clone());
                continue;
            }
            ValueKind::Str(pattern) => {
                let re = compile_key(pattern).map_err(|e| at(entry, format!("fields: {e}")))?;
                FIELDS.into_iter().filter(|f| re.is_match(f)).collect()
            }
            _ => return Err(bad()),
        };
        for field in selected {
            if !fields.iter().any(|f| f == field) {
                fields.push(field.to_string());
            }
        }
    }
    Ok((fields, unknown))
}

/// `writeControl` and `writeInterval` as a number of steps.
fn steps_between(
    dict: &FoamDict,
    write_every: Option<usize>,
    delta_t: f64,
) -> Result<usize, CaseError> {
    let control = dict.get_or("writeControl", "timeStep".to_string())?;
    let interval = dict.get_or("writeInterval", 1.0)?;
    if write_every.is_none() && matches!(control.as_str(), "writeTime" | "outputTime") {
        return Err(at_key(
            dict,
            "writeControl",
            format!(
                "writeControl {control}: the run writes by time (adjustTimeStep, or a \
                 writeInterval that is not a whole number of steps), so its write times are \
                 no count of steps; use runTime or timeStep here"
            ),
        ));
    }
    interval_in_steps(dict, &control, interval, delta_t, write_every)
}

/// A field's extreme: its value, the cell (the face's owner on a patch) and
/// where it lies (cell centre or face centre).
#[derive(Clone, Copy, Debug)]
struct Extreme<T> {
    value: T,
    cell: usize,
    location: Vec3,
}

/// Output precision and widths of the postProcessing files.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// `writePrecision`.
    pub precision: usize,
    /// `timePrecision`.
    pub time_precision: usize,
}

impl Format {
    /// `fieldMinMax.dat`'s column width (v1912: precision + 8).
    fn column(self) -> usize {
        self.precision + 8
    }

    /// The probe files' column width (v1912: precision + 7).
    fn probe_column(self) -> usize {
        self.precision + 7
    }

    fn general(self, x: f64) -> String {
        format_general(x, self.precision)
    }

    fn general_vector(self, v: Vec3) -> String {
        vector_text(v, |x| self.general(x))
    }

    fn scientific(self, x: f64) -> String {
        format_scientific(x, self.precision)
    }

    fn scientific_vector(self, v: Vec3) -> String {
        vector_text(v, |x| self.scientific(x))
    }
}

/// `(x y z)`, each component written by `number`.
fn vector_text(v: Vec3, number: impl Fn(f64) -> String) -> String {
    format!("({} {} {})", number(v.x), number(v.y), number(v.z))
}

/// A value of U or p as the objects see it.
#[derive(Clone, Copy, Debug)]
enum Sample {
    Scalar(f64),
    Vector(Vec3),
}

/// The function objects of one run: files open, probes located.
pub struct RunningFunctionObjects {
    min_max: Vec<(FieldMinMax, PathBuf)>,
    probes: Vec<(Probes, Vec<Option<usize>>, Vec<PathBuf>)>,
    format: Format,
}

/// The data file `<stem>.dat` of an object in `dir`, or, where an earlier
/// run left one there, `<stem>_<start_name>.dat` (rewritten by each later
/// run): the earlier run's file is kept, as v1912's function objects keep it.
pub(super) fn data_file(dir: &Path, stem: &str, start_name: &str) -> PathBuf {
    let path = dir.join(format!("{stem}.dat"));
    match path.exists() {
        true => dir.join(format!("{stem}_{start_name}.dat")),
        false => path,
    }
}

/// Creates (truncates) `path` with `text`.
pub(super) fn create_file(path: &Path, text: &str) -> Result<(), OutputError> {
    if let Some(dir) = path.parent() {
        crate::io::create_dir_all(dir)?;
    }
    std::fs::write(path, text).map_err(|e| OutputError::io(path, e))
}

/// Appends `text` to `path`.
pub(super) fn append_file(path: &Path, text: &str) -> Result<(), OutputError> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| OutputError::io(path, e))
}

impl FunctionObjects {
    /// Locates the probes (warning about each location in no cell) and
    /// writes the files' headers under `case_dir/postProcessing/<name>/<start>`.
    pub fn start(
        &self,
        case_dir: &Path,
        start: f64,
        format: Format,
        mesh: &Mesh,
        geometry: &Geometry,
    ) -> Result<RunningFunctionObjects, CaseError> {
        let start_name = time_name(start, format.time_precision);
        let dir = |name: &str| case_dir.join("postProcessing").join(name).join(&start_name);
        let mut min_max = Vec::new();
        for object in &self.field_min_max {
            let path = data_file(&dir(&object.name), "fieldMinMax", &start_name);
            create_file(&path, &min_max_header(object, format))?;
            min_max.push((object.clone(), path));
        }
        let mut probes = Vec::new();
        for object in &self.probes {
            let cells: Vec<Option<usize>> = object
                .locations
                .iter()
                .map(|&x| {
                    let cell = find_cell(mesh, geometry, x);
                    if cell.is_none() {
                        log::warn!(
                            "probes '{}': Did not find location {} in any cell. Skipping location.",
                            object.name,
                            format.general_vector(x)
                        );
                    }
                    cell
                })
                .collect();
            let header = probe_header(&object.locations, &cells, format);
            let mut paths = Vec::new();
            for field in &object.fields {
                let path = dir(&object.name).join(field);
                create_file(&path, &header)?;
                paths.push(path);
            }
            probes.push((object.clone(), cells, paths));
        }
        Ok(RunningFunctionObjects {
            min_max,
            probes,
            format,
        })
    }
}

/// `fieldMinMax.dat`'s two header lines.
fn min_max_header(object: &FieldMinMax, format: Format) -> String {
    let w = format.column();
    let mut text = format!("# Field minima and maxima\n{:<w$}", "# Time");
    let names: Vec<String> = match object.location {
        true => ["field", "min", "location(min)", "max", "location(max)"]
            .map(String::from)
            .to_vec(),
        false => object
            .fields
            .iter()
            .flat_map(|f| [format!("min({f})"), format!("max({f})")])
            .collect(),
    };
    for name in names {
        text += &format!("\t{name:<w$}");
    }
    text.push('\n');
    text
}

/// The probe files' header: each location, then the probe numbers and `Time`.
fn probe_header(locations: &[Vec3], cells: &[Option<usize>], format: Format) -> String {
    let w = format.probe_column();
    let mut text = String::new();
    for (i, (&x, cell)) in locations.iter().zip(cells).enumerate() {
        let missing = if cell.is_none() { "  # Not Found" } else { "" };
        text += &format!("# Probe {i} {}{missing}\n", format.general_vector(x));
    }
    text += &format!("#{:>width$}", "Probe", width = w - 1);
    for i in 0..locations.len() {
        text += &format!(" {i:>w$}");
    }
    text += &format!("\n#{:>width$}\n", "Time", width = w - 1);
    text
}

/// The cell containing `x`: the one of the nearest centre when it does, else
/// the first that does; `None` outside the mesh.
fn find_cell(mesh: &Mesh, geometry: &Geometry, x: Vec3) -> Option<usize> {
    let nearest = geometry
        .cell_centres
        .iter()
        .enumerate()
        .min_by(|a, b| {
            (a.1 - x)
                .norm_squared()
                .total_cmp(&(b.1 - x).norm_squared())
        })?
        .0;
    // A cell is left out once `x` lies outside one of its faces' planes.
    let mut outside = vec![false; mesh.n_cells()];
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    for f in 0..mesh.n_faces() {
        let area = geometry.area_vector(mesh, f);
        let side = (x - geometry.face_centre(mesh, f)).dot(&area);
        // Tolerance: a point on a face belongs to both its cells.
        let tolerance = 1e-12 * area.norm() * area.norm().sqrt();
        if side > tolerance {
            outside[owner[f] as usize] = true;
        }
        if f < neighbour.len() && -side > tolerance {
            outside[neighbour[f] as usize] = true;
        }
    }
    if !outside[nearest] {
        return Some(nearest);
    }
    outside.iter().position(|&out| !out)
}

/// `a` before `b` in v1912's order for the mode: scalars by value; vectors by
/// `mag` (magnitude) or, component-wise, only when every component is.
fn less(a: Sample, b: Sample) -> bool {
    match (a, b) {
        (Sample::Scalar(a), Sample::Scalar(b)) => a < b,
        (Sample::Vector(a), Sample::Vector(b)) => a.x < b.x && a.y < b.y && a.z < b.z,
        _ => false,
    }
}

/// The minimum (`sign` 1) or maximum (`sign` −1) over the cells, then each
/// non-empty patch (a patch's own extreme replacing the running one only
/// when strictly beyond it).
fn extreme(
    mesh: &Mesh,
    geometry: &Geometry,
    cells: &[Sample],
    faces: &[Sample],
    maximum: bool,
) -> Extreme<Sample> {
    let beyond = |a: Sample, b: Sample| if maximum { less(b, a) } else { less(a, b) };
    let mut best = 0;
    for (i, &v) in cells.iter().enumerate() {
        if beyond(v, cells[best]) {
            best = i;
        }
    }
    let mut result = Extreme {
        value: cells[best],
        cell: best,
        location: geometry.cell_centres[best],
    };
    let first = mesh.n_internal_faces();
    for patch in mesh.patches() {
        if patch.kind == PatchKind::Empty || patch.size == 0 {
            continue;
        }
        let range = patch.faces();
        let mut best = range.start;
        for f in range {
            if beyond(faces[f - first], faces[best - first]) {
                best = f;
            }
        }
        if beyond(faces[best - first], result.value) {
            result = Extreme {
                value: faces[best - first],
                cell: mesh.owner()[best] as usize,
                location: geometry.boundary_face_centres[best - first],
            };
        }
    }
    result
}

impl RunningFunctionObjects {
    /// Runs each object due at `step` (the step just taken to `time`).
    pub fn execute(&mut self, simple: &Simple, time: f64, step: usize) -> Result<(), CaseError> {
        let format = self.format;
        let mut boundary: Option<(Vec<Vec3>, Vec<f64>)> = None;
        let mut boundary_values = |simple: &Simple| {
            boundary
                .get_or_insert_with(|| (simple.boundary_velocity(), simple.boundary_pressure()))
                .clone()
        };
        for (object, path) in &self.min_max {
            if !step.is_multiple_of(object.every) {
                continue;
            }
            let (u_faces, p_faces) = boundary_values(simple);
            let w = format.column();
            let time_column = format!("{:<w$}", time_name(time, format.time_precision));
            // With locations one line per field, each starting with the
            // time; without, one line for all fields.
            let mut text = match object.location {
                true => String::new(),
                false => time_column.clone(),
            };
            let mut log = vec![format!("fieldMinMax {} write:", object.name)];
            for field in &object.fields {
                let vector = field == "U";
                let magnitude = vector && object.mode == MinMaxMode::Magnitude;
                let (cells, faces): (Vec<Sample>, Vec<Sample>) = match (field.as_str(), magnitude) {
                    ("U", true) => (
                        simple.u.iter().map(|u| Sample::Scalar(u.norm())).collect(),
                        u_faces.iter().map(|u| Sample::Scalar(u.norm())).collect(),
                    ),
                    ("U", false) => (
                        simple.u.iter().map(|&u| Sample::Vector(u)).collect(),
                        u_faces.iter().map(|&u| Sample::Vector(u)).collect(),
                    ),
                    _ => (
                        simple.p.iter().map(|&p| Sample::Scalar(p)).collect(),
                        p_faces.iter().map(|&p| Sample::Scalar(p)).collect(),
                    ),
                };
                let (mesh, geometry) = (simple.mesh(), simple.geometry());
                let min = extreme(mesh, geometry, &cells, &faces, false);
                let max = extreme(mesh, geometry, &cells, &faces, true);
                let name = if magnitude {
                    format!("mag({field})")
                } else {
                    field.clone()
                };
                let log_value = |s: Sample| match s {
                    Sample::Scalar(x) => format.general(x),
                    Sample::Vector(v) => format.general_vector(v),
                };
                let dat_value = |s: Sample| match s {
                    Sample::Scalar(x) => format.scientific(x),
                    Sample::Vector(v) => format.scientific_vector(v),
                };
                if object.location {
                    text += &format!(
                        "{time_column}\t{name:<w$}\t{}\t{}\t{}\t{}\n",
                        dat_value(min.value),
                        format.scientific_vector(min.location),
                        dat_value(max.value),
                        format.scientific_vector(max.location)
                    );
                    for (which, e) in [("min", min), ("max", max)] {
                        log.push(format!(
                            "    {which}({name}) = {} in cell {} at location {}",
                            log_value(e.value),
                            e.cell,
                            format.general_vector(e.location)
                        ));
                    }
                } else {
                    text += &format!("\t{}\t{}", dat_value(min.value), dat_value(max.value));
                    log.push(format!(
                        "    min/max({name}) = {} {}",
                        log_value(min.value),
                        log_value(max.value)
                    ));
                }
            }
            if !object.location {
                text.push('\n');
            }
            append_file(path, &text)?;
            for line in log {
                log::info!("{line}");
            }
            log::info!("");
        }
        for (object, cells, paths) in &self.probes {
            if !step.is_multiple_of(object.every) {
                continue;
            }
            let w = format.probe_column();
            for (field, path) in object.fields.iter().zip(paths) {
                let mut row = format!("{:>w$}", format.general(time));
                for cell in cells {
                    let value = match (field.as_str(), cell) {
                        ("U", Some(c)) => Sample::Vector(simple.u[*c]),
                        ("U", None) => Sample::Vector(Vec3::repeat(NOT_FOUND)),
                        (_, Some(c)) => Sample::Scalar(simple.p[*c]),
                        (_, None) => Sample::Scalar(NOT_FOUND),
                    };
                    row += &match value {
                        Sample::Scalar(x) => format!(" {:>w$}", format.general(x)),
                        Sample::Vector(v) => format!(
                            " {:>w$}{} {} {})",
                            "(",
                            format.general(v.x),
                            format.general(v.y),
                            format.general(v.z)
                        ),
                    };
                }
                row.push('\n');
                append_file(path, &row)?;
            }
        }
        Ok(())
    }
}

/// The value v1912 writes for a probe in no cell.
const NOT_FOUND: f64 = -1e300;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::generate::BoxSpec;

    /// Whether `x` lies in the convex `cell`: the pyramids from `x` on its
    /// faces fill the cell's volume exactly when it does.
    fn inside_by_volume(mesh: &Mesh, geometry: &Geometry, cell: usize, x: Vec3) -> bool {
        let mut pyramids = 0.0;
        for f in 0..mesh.n_faces() {
            let on_owner = mesh.owner()[f] as usize == cell;
            let on_neighbour = f < mesh.n_internal_faces() && mesh.neighbour()[f] as usize == cell;
            if on_owner || on_neighbour {
                let height =
                    (x - geometry.face_centre(mesh, f)).dot(&geometry.area_vector(mesh, f));
                pyramids += height.abs() / 3.0;
            }
        }
        (pyramids - geometry.cell_volumes[cell]).abs() <= 1e-9 * geometry.cell_volumes[cell]
    }

    #[test]
    fn find_cell_returns_the_containing_cell_also_when_the_nearest_centre_is_another() {
        let mut spec = BoxSpec::new([3, 3, 3]);
        spec.tet = true;
        spec.perturb = 0.2;
        let mesh = spec.generate().unwrap();
        let geometry = mesh.geometry().unwrap();
        let mut not_nearest = 0;
        for i in 0..200 {
            // A fixed spread of points over the box.
            let t = i as f64;
            let x = Vec3::new(
                (0.05 + 0.618_034 * t).fract() * 0.9 + 0.05,
                (0.05 + 0.414_214 * t).fract() * 0.9 + 0.05,
                (0.05 + 0.732_051 * t).fract() * 0.9 + 0.05,
            );
            let cell = find_cell(&mesh, &geometry, x).expect("a point of the box");
            assert!(
                inside_by_volume(&mesh, &geometry, cell, x),
                "{x:?} not in {cell}"
            );
            let nearest = (0..mesh.n_cells())
                .min_by(|&a, &b| {
                    let d = |c: usize| (geometry.cell_centres[c] - x).norm_squared();
                    d(a).total_cmp(&d(b))
                })
                .unwrap();
            not_nearest += usize::from(nearest != cell);
        }
        assert!(
            not_nearest > 0,
            "every point was in its nearest centre's cell"
        );
        assert_eq!(find_cell(&mesh, &geometry, Vec3::new(1.5, 0.5, 0.5)), None);
    }
}

//! `fvpoisson foam-to-vtk CASE`: the written time directories of an OpenFOAM
//! case as a VTK series, as OpenFOAM's `foamToVTK` converts them.
//!
//! Reads `constant/polyMesh` and, in each selected time directory, every
//! `volScalarField` and `volVectorField` file (ascii or binary, plain or
//! gzipped); other files (`phi` and other surface fields, `uniform/`) are
//! skipped. Cell values go to the cells; on each patch the field's `value`
//! entry, or, where a patch has none (`zeroGradient` in `0/`, `empty`), the
//! values of the cells next to its faces. The series is `CASE/VTK/NAME.pvd`
//! (NAME the case directory's name; `--out DIR` elsewhere), one step per
//! time, every step's fields those its directory holds.

use super::CaseError;
use crate::foam::FoamFile;
use crate::io::foam_field::{FieldFile, FieldItem, Values};
use crate::io::vtk::{series_name_for, Field, VtkEncoding, VtkSeries};
use crate::io::OutputError;
use crate::mesh::{Mesh, MeshError, Vec3};
use std::path::{Path, PathBuf};

/// Which time directories to convert.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TimeSelection {
    /// Every time directory.
    #[default]
    All,
    /// The last one.
    Latest,
    /// Times and inclusive ranges, OpenFOAM's `-time '0,0.5:1,2:'`.
    List(Vec<(Option<f64>, Option<f64>)>),
}

impl std::str::FromStr for TimeSelection {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let number = |s: &str| -> Result<Option<f64>, String> {
            match s.trim() {
                "" => Ok(None),
                t => t
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .map(Some)
                    .ok_or_else(|| format!("time '{t}' in '{text}' is not a number")),
            }
        };
        let mut items = Vec::new();
        for item in text.split(',') {
            match item.split_once(':') {
                Some((from, to)) => items.push((number(from)?, number(to)?)),
                None => {
                    let t = number(item)?.ok_or_else(|| format!("an empty time in '{text}'"))?;
                    items.push((Some(t), Some(t)));
                }
            }
        }
        Ok(Self::List(items))
    }
}

impl TimeSelection {
    fn selects(&self, time: f64) -> bool {
        match self {
            Self::All | Self::Latest => true,
            Self::List(items) => items.iter().any(|(from, to)| {
                // Times as written are rounded; compare with a relative slack.
                let slack = 1e-9 * time.abs().max(1e-12);
                from.is_none_or(|f| time >= f - slack) && to.is_none_or(|t| time <= t + slack)
            }),
        }
    }
}

/// What [`foam_to_vtk`] wrote.
#[derive(Debug)]
pub struct Converted {
    pub pvd: PathBuf,
    /// The time directories converted, in time order, with the fields of each.
    pub times: Vec<(String, Vec<String>)>,
    pub bytes: u64,
}

/// A field read from a time directory.
enum CellField {
    Scalar(String, Vec<f64>, Vec<f64>),
    Vector(String, Vec<Vec3>, Vec<Vec3>),
}

/// Converts the time directories of `case_dir` selected by `times` into the
/// series `out_dir/NAME.pvd` (default `case_dir/VTK`).
pub fn foam_to_vtk(
    case_dir: &Path,
    times: &TimeSelection,
    out_dir: Option<&Path>,
    encoding: VtkEncoding,
) -> Result<Converted, CaseError> {
    let mesh = crate::mesh::polymesh::read_polymesh(case_dir)?;
    let mut selected: Vec<(f64, String)> = time_directories(case_dir)?
        .into_iter()
        .filter(|(t, _)| times.selects(*t))
        .collect();
    if *times == TimeSelection::Latest {
        selected.drain(..selected.len().saturating_sub(1));
    }
    if selected.is_empty() {
        return Err(CaseError::invalid(format!(
            "{}: no time directory {}",
            case_dir.display(),
            match times {
                TimeSelection::List(_) => "matches the times asked for",
                _ => "to convert",
            }
        )));
    }
    let out_dir = out_dir.map_or_else(
        || case_dir.join(super::openfoam::VTK_DIRECTORY),
        Path::to_path_buf,
    );
    // The steps are written into a staging folder beside the series and
    // moved in once every time has converted: a time that fails to read
    // leaves the earlier series as it was, not a listing cut short.
    let series_name = series_name_for(case_dir);
    let staging = out_dir.join(format!(".{series_name}.converting"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| OutputError::io(&staging, e))?;
    }
    let staged = convert_times(&mesh, case_dir, &staging, &series_name, selected, encoding);
    let mut converted = match staged {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    publish(&staging, &out_dir, &series_name)?;
    converted.pvd = out_dir.join(format!("{series_name}.pvd"));
    Ok(converted)
}

/// Moves the staged series' files into `out_dir`, replacing those of the
/// same names, the `.pvd` listing last; then removes the staging folder.
fn publish(staging: &Path, out_dir: &Path, series_name: &str) -> Result<(), CaseError> {
    let pvd = format!("{series_name}.pvd");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(staging)
        .map_err(|e| OutputError::io(staging, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    // The listing after the files it lists.
    entries.sort_by_key(|path| path.file_name().is_some_and(|n| *n == *pvd));
    for from in entries {
        let Some(name) = from.file_name() else {
            continue;
        };
        let to = out_dir.join(name);
        if to.is_dir() {
            std::fs::remove_dir_all(&to).map_err(|e| OutputError::io(&to, e))?;
        }
        std::fs::rename(&from, &to).map_err(|e| OutputError::io(&to, e))?;
    }
    std::fs::remove_dir(staging).map_err(|e| OutputError::io(staging, e))?;
    Ok(())
}

/// Converts `selected` times of `case_dir` into the series `series_name` in
/// `dir`.
fn convert_times(
    mesh: &Mesh,
    case_dir: &Path,
    dir: &Path,
    series_name: &str,
    selected: Vec<(f64, String)>,
    encoding: VtkEncoding,
) -> Result<Converted, CaseError> {
    let mut series = VtkSeries::new(mesh, dir, series_name)?.with_encoding(encoding);
    let mut converted = Vec::new();
    for (time, name) in selected {
        let fields = read_time_directory(mesh, &case_dir.join(&name))?;
        let (cell, boundary): (Vec<Field>, Vec<Field>) = fields
            .iter()
            .map(|f| match f {
                CellField::Scalar(n, cells, faces) => {
                    (Field::scalar(n, cells), Field::scalar(n, faces))
                }
                CellField::Vector(n, cells, faces) => {
                    (Field::vector(n, cells), Field::vector(n, faces))
                }
            })
            .unzip();
        series.write_step(time, &cell, &boundary)?;
        let names = cell.iter().map(|f| f.name.to_string()).collect();
        log::info!(
            "Time = {name}: {}",
            if cell.is_empty() {
                "mesh only (no volScalarField or volVectorField)".to_string()
            } else {
                cell.iter().map(|f| f.name).collect::<Vec<_>>().join(" ")
            }
        );
        converted.push((name, names));
    }
    Ok(Converted {
        pvd: series.pvd_path(),
        times: converted,
        bytes: series.bytes_written(),
    })
}

/// Numeric directory names of `case_dir` with their times, sorted by time.
pub(crate) fn time_directories(case_dir: &Path) -> Result<Vec<(f64, String)>, CaseError> {
    let entries = std::fs::read_dir(case_dir).map_err(|e| MeshError::io(case_dir, e))?;
    let mut times: Vec<(f64, String)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let t = name.parse::<f64>().ok().filter(|t| t.is_finite())?;
            Some((t, name))
        })
        .collect();
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(times)
}

/// The cell fields of one time directory, by file name.
fn read_time_directory(mesh: &Mesh, dir: &Path) -> Result<Vec<CellField>, CaseError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| MeshError::io(dir, e))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .map(|n| n.strip_suffix(".gz").map_or(n.clone(), str::to_string))
        .collect();
    names.sort();
    names.dedup();
    let mut fields = Vec::new();
    for name in names {
        let file = FoamFile::read(&dir.join(&name))?;
        let n = mesh.n_cells();
        match file.header.class.as_str() {
            "volScalarField" => {
                let field = FieldFile::<f64>::from_foam_file(file, f64::VOL_CLASS, n)?;
                let (cells, faces) = cell_and_face_values(mesh, &field)?;
                fields.push(CellField::Scalar(name, cells, faces));
            }
            "volVectorField" => {
                let field = FieldFile::<Vec3>::from_foam_file(file, Vec3::VOL_CLASS, n)?;
                let (cells, faces) = cell_and_face_values(mesh, &field)?;
                fields.push(CellField::Vector(name, cells, faces));
            }
            other => log::debug!("{}: class {other}, skipped", dir.join(&name).display()),
        }
    }
    Ok(fields)
}

/// The cell values and the value on every boundary face: the patch's
/// `value` entry, else the owner cell's value.
fn cell_and_face_values<T: FieldItem>(
    mesh: &Mesh,
    field: &FieldFile<T>,
) -> Result<(Vec<T>, Vec<T>), CaseError> {
    let cells = field.internal.clone().expand(mesh.n_cells());
    let first = mesh.n_internal_faces();
    let mut faces: Vec<T> = mesh.owner()[first..]
        .iter()
        .map(|&c| cells[c as usize].clone())
        .collect();
    for patch in mesh.patches() {
        let Ok(entry) = field.patch(patch) else {
            continue;
        };
        if let Some(values) = Values::<T>::read_opt(entry, "value", patch.size)? {
            let range = patch.boundary_faces(first);
            faces[range].clone_from_slice(&values.expand(patch.size));
        }
    }
    Ok((cells, faces))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_selections_parse_like_openfoams() {
        let sel: TimeSelection = "0,0.5:1,2:".parse().unwrap();
        let picked: Vec<f64> = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 10.0]
            .into_iter()
            .filter(|&t| sel.selects(t))
            .collect();
        assert_eq!(picked, [0.0, 0.5, 0.75, 1.0, 2.0, 10.0]);
        let e = "0,x".parse::<TimeSelection>().unwrap_err();
        assert!(e.contains("time 'x' in '0,x' is not a number"), "{e}");
        assert!(":".parse::<TimeSelection>().unwrap().selects(5.0));
    }
}

//! OpenFOAM field files (`volScalarField`, `volVectorField`, `surfaceScalarField`):
//! reading `0/T`, `0/U` (and any written time) and
//! writing `<case>/<time>/<field>` so that OpenFOAM utilities and ParaView's
//! OpenFOAM reader open it.
//!
//! Format (OpenFOAM v1912 `GeometricField::readFields`, `Field::writeEntry`):
//! `dimensions [kg m s K mol A cd];`, `internalField uniform v;` or
//! `internalField nonuniform List<scalar> N (...);` (raw little-endian
//! doubles in binary files), and `boundaryField { patch { type ...; ... } }`
//! where each patch entry is looked up by patch name, then by regular
//! expression keys, then by the patch type's group (`empty`, `wall`, ...).
//! Macros (`value $internalField;`) and includes are expanded by [`FoamDict`].

use super::{create_dir_all, OutputError};
use crate::foam::dict::{Value, ValueKind};
use crate::foam::foam_dict::{describe_values, FoamDict, FoamEntry};
use crate::foam::write::{
    format_general, format_scalar, write_atomic, write_footer, write_header, write_list,
    HeaderSpec, WriteItem,
};
use crate::foam::{FoamFile, FoamFormat};
use crate::fvm::{BoundaryCondition, PatchValues};
use crate::mesh::{Mesh, MeshError, Patch, PatchKind, Vec3};
use rayon::prelude::*;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Values of a field over cells or over one patch's faces: one for all, or
/// one each.
#[derive(Clone, Debug, PartialEq)]
pub enum Values<T> {
    Uniform(T),
    NonUniform(Vec<T>),
}

/// Scalar values (`volScalarField`, `surfaceScalarField`).
pub type FieldValues = Values<f64>;
/// Vector values (`volVectorField`).
pub type VectorFieldValues = Values<Vec3>;

/// The value types of field files: `scalar` and `vector`.
pub trait FieldItem: Sized + Clone + PartialEq + Send + WriteItem {
    /// OpenFOAM's name of the type (`List<scalar>`).
    const NAME: &'static str;
    /// The `vol*Field` class of a cell field of this type.
    const VOL_CLASS: &'static str;
    /// One value (`1.5`, `(1 0 0)`).
    fn from_value(value: &Value) -> Option<Self>;
    /// The items of a list value.
    fn list(value: &Value, file: &Path) -> Result<Vec<Self>, MeshError>;
    /// Rounded to `digits` significant digits (each component).
    fn rounded(&self, digits: usize) -> Self;
    fn is_finite_item(&self) -> bool;
}

impl FieldItem for f64 {
    const NAME: &'static str = "scalar";
    const VOL_CLASS: &'static str = "volScalarField";
    fn from_value(value: &Value) -> Option<Self> {
        value.number()
    }
    fn list(value: &Value, file: &Path) -> Result<Vec<Self>, MeshError> {
        value.to_scalars(file)
    }
    fn rounded(&self, digits: usize) -> Self {
        round_to_digits(*self, digits)
    }
    fn is_finite_item(&self) -> bool {
        self.is_finite()
    }
}

impl FieldItem for Vec3 {
    const NAME: &'static str = "vector";
    const VOL_CLASS: &'static str = "volVectorField";
    fn from_value(value: &Value) -> Option<Self> {
        value.vector()
    }
    fn list(value: &Value, file: &Path) -> Result<Vec<Self>, MeshError> {
        value.to_vectors(file)
    }
    fn rounded(&self, digits: usize) -> Self {
        self.map(|x| round_to_digits(x, digits))
    }
    fn is_finite_item(&self) -> bool {
        self.iter().all(|x| x.is_finite())
    }
}

impl<T: FieldItem> Values<T> {
    /// The entry `key` of `dict` (`uniform v`, `nonuniform List<T> N(...)`,
    /// or a bare value as OpenFOAM 2.0 files have it), which must hold
    /// `size` values; `None` when missing.
    pub fn read_opt(dict: &FoamDict, key: &str, size: usize) -> Result<Option<Self>, MeshError> {
        let Some((entry, values)) = dict.stream_entry(key)? else {
            return Ok(None);
        };
        Self::parse(entry, values, size).map(Some)
    }

    /// As [`Values::read_opt`], an error naming the dictionary when missing.
    pub fn read(dict: &FoamDict, key: &str, size: usize) -> Result<Self, MeshError> {
        Self::read_opt(dict, key, size)?.ok_or_else(|| dict.missing(key))
    }

    /// One value per item: the uniform value repeated `size` times.
    pub fn expand(self, size: usize) -> Vec<T> {
        match self {
            Self::Uniform(v) => vec![v; size],
            Self::NonUniform(v) => v,
        }
    }

    fn parse(entry: &FoamEntry, values: &[Value], size: usize) -> Result<Self, MeshError> {
        let key = entry.key();
        let name = T::NAME;
        let list_type = format!("List<{name}>");
        let list = match values {
            [v] if T::from_value(v).is_some() => {
                return Ok(Self::Uniform(T::from_value(v).expect("checked")))
            }
            [Value {
                kind: ValueKind::Word(w),
                ..
            }, v]
                if w == "uniform" =>
            {
                return T::from_value(v).map(Self::Uniform).ok_or_else(|| {
                    entry.error(format!(
                        "'{key}': expected a {name} after 'uniform', found {}",
                        v.kind.describe()
                    ))
                })
            }
            [Value {
                kind: ValueKind::Word(w),
                ..
            }, rest @ ..]
                if w == "nonuniform" =>
            {
                match rest {
                    [Value {
                        kind: ValueKind::Word(t),
                        ..
                    }, list]
                        if *t == list_type =>
                    {
                        list
                    }
                    [list] => list,
                    _ => {
                        return Err(entry.error(format!(
                            "'{key}': expected 'nonuniform {list_type} N (...)', found \
                             nonuniform followed by {}",
                            describe_values(rest)
                        )))
                    }
                }
            }
            _ => {
                return Err(entry.error(format!(
                    "'{key}': expected 'uniform <{name}>' or 'nonuniform {list_type} N (...)', \
                     found {}",
                    describe_values(values)
                )))
            }
        };
        let values = T::list(list, entry.file())?;
        if values.len() != size {
            return Err(entry.error(format!(
                "'{key}' has {} values but {size} are needed",
                values.len()
            )));
        }
        Ok(Self::NonUniform(values))
    }
}

/// A dimension set `[kg m s K mol A cd]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dimensions(pub [f64; 7]);

impl Dimensions {
    pub const NONE: Self = Self([0.0; 7]);

    /// Parses `[a b c d e]` or `[a b c d e f g]` (OpenFOAM accepts 5 or 7 exponents).
    pub fn parse(entry: &FoamEntry, values: &[Value]) -> Result<Self, MeshError> {
        let exponents = match values {
            [Value {
                kind: ValueKind::Bracket(items),
                ..
            }] => items
                .iter()
                .map(Value::number)
                .collect::<Option<Vec<f64>>>(),
            _ => None,
        };
        match exponents {
            Some(e) if e.len() == 5 || e.len() == 7 => {
                let mut d = [0.0; 7];
                d[..e.len()].copy_from_slice(&e);
                Ok(Self(d))
            }
            _ => Err(entry.error(format!(
                "'{}': expected a dimension set of 5 or 7 numbers like [0 2 -1 0 0 0 0], found {}",
                entry.key(),
                describe_values(values)
            ))),
        }
    }
}

impl fmt::Display for Dimensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = String::new();
        let text: Vec<String> = self
            .0
            .iter()
            .map(|x| {
                format_scalar(*x, &mut buf);
                buf.clone()
            })
            .collect();
        write!(f, "[{}]", text.join(" "))
    }
}

/// A field file (`volScalarField`, `volVectorField`, `surfaceScalarField`),
/// read and expanded, with the internal field checked against the mesh.
/// Patch entries are looked up with [`FieldFile::patch`].
#[derive(Debug)]
pub struct FieldFile<T> {
    pub path: PathBuf,
    pub dimensions: Dimensions,
    pub internal: Values<T>,
    /// The whole file, to find entries nobody read ([`FoamDict::unread`]).
    pub dict: FoamDict,
    /// `type empty;`: the condition of an empty patch that no entry names
    /// or groups (OpenFOAM's, whatever the patterns say).
    empty: FoamDict,
}

/// A `volScalarField` file.
pub type ScalarFieldFile = FieldFile<f64>;
/// A `volVectorField` file.
pub type VectorFieldFile = FieldFile<Vec3>;

impl<T: FieldItem> FieldFile<T> {
    /// Reads the cell field `path` (or `path.gz`) for a mesh of `n_cells` cells.
    pub fn read(path: &Path, n_cells: usize) -> Result<Self, MeshError> {
        Self::read_class(path, T::VOL_CLASS, n_cells)
    }

    /// Reads `path` (or `path.gz`), a field of class `class` (when the header
    /// names one) with `size` internal values.
    pub fn read_class(path: &Path, class: &str, size: usize) -> Result<Self, MeshError> {
        Self::from_foam_file(FoamFile::read(path)?, class, size)
    }

    /// As [`FieldFile::read_class`], from a file already read (whose header
    /// told its class).
    pub fn from_foam_file(file: FoamFile, class: &str, size: usize) -> Result<Self, MeshError> {
        if !file.header.class.is_empty() && file.header.class != class {
            return Err(MeshError::InFile {
                file: file.path.clone(),
                msg: format!(
                    "expected a {class}, found class {} (give the {} field here)",
                    file.header.class,
                    T::NAME
                ),
            });
        }
        let dict = FoamDict::from_file(&file)?;
        let (entry, values) = dict
            .stream_entry("dimensions")?
            .ok_or_else(|| dict.error("missing entry 'dimensions'"))?;
        let dimensions = Dimensions::parse(entry, values)?;
        let internal = Values::read(&dict, "internalField", size)?;
        dict.get_dict("boundaryField")?;
        let empty = FoamDict::from_file(&FoamFile::from_bytes(
            file.path.clone(),
            b"type empty;".to_vec(),
        )?)?;
        Ok(Self {
            path: file.path,
            dimensions,
            internal,
            dict,
            empty,
        })
    }

    /// The `boundaryField` entry of `patch` as OpenFOAM picks it: its exact
    /// name, then its groups (`inGroups`, and the type of a wall or
    /// constraint patch: `wall`, `empty`, ...), then regular expressions;
    /// an empty patch that no name or group names is `type empty;`.
    pub fn patch(&self, patch: &Patch) -> Result<&FoamDict, MeshError> {
        let boundary = self.dict.get_dict("boundaryField")?;
        let group = patch.kind.foam_name();
        let empty = patch.kind == PatchKind::Empty;
        if let Some(dict) = boundary.get_patch_dict(&patch.name, &patch.groups(), !empty)? {
            return Ok(dict);
        }
        if empty {
            return Ok(&self.empty);
        }
        Err(boundary.error(format!(
            "boundaryField has no entry for patch '{}' (type {group}); add '{} {{ type ...; }}'",
            patch.name, patch.name
        )))
    }
}

/// How fields are written (OpenFOAM `controlDict` `writeFormat`,
/// `writePrecision`, `writeCompression`, `timePrecision`) and the written
/// field's dimensions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FoamWriteOptions {
    pub format: FoamFormat,
    /// Significant digits of ascii values (17 keeps every double exact).
    pub precision: usize,
    /// gzip the files (`T.gz`).
    pub compress: bool,
    /// Significant digits of time directory names (`timeFormat general`).
    pub time_precision: usize,
    pub dimensions: Dimensions,
}

impl Default for FoamWriteOptions {
    fn default() -> Self {
        Self {
            format: FoamFormat::Ascii,
            precision: 17,
            compress: false,
            time_precision: 6,
            dimensions: Dimensions::NONE,
        }
    }
}

/// A scalar field to write: cell values, the condition of each patch (in
/// patch order) and the field's value on every boundary face (index
/// face − nInternalFaces; e.g. `fvm::BoundaryCoeffs::face_values`), which
/// becomes each patch's `value` entry.
#[derive(Clone, Copy, Debug)]
pub struct ScalarFieldOutput<'a> {
    pub name: &'a str,
    pub cells: &'a [f64],
    pub boundary: &'a [BoundaryCondition],
    pub boundary_values: &'a [f64],
}

/// A time as OpenFOAM names its directory with `timeFormat general` and
/// `timePrecision` digits (`0.5`, `2`, `14`, `0.005`, `1e-05`).
pub fn time_name(time: f64, precision: usize) -> String {
    format_general(time, precision)
}

/// The precision, `precision` or more (at most 17, which names every
/// double apart), at which `time` is named apart from `previous`: OpenFOAM
/// raises `timePrecision` so when a step's time would take the name of the
/// one before (and its directory).
pub fn distinct_time_precision(previous: f64, time: f64, precision: usize) -> usize {
    let mut digits = precision;
    while digits < 17 && time_name(time, digits) == time_name(previous, digits) {
        digits += 1;
    }
    digits
}

/// `x` rounded to `digits` significant digits, as OpenFOAM's `writePrecision`
/// prints it; unchanged from 17 digits on, which represent every double.
///
/// The value is that of `format_general(x, digits)` read back, from one
/// conversion: `%.<digits − 1>e` rounds x once at the same digit as the
/// general format (whose fixed notation rounds at the digit the exponent of
/// that same `%e` text sets; where the rounding carries to the next power of
/// ten both give that power). Zero of either sign reads back as +0, as the
/// general format writes it `0`.
fn round_to_digits(x: f64, digits: usize) -> f64 {
    use std::fmt::Write as _;
    if digits >= 17 || !x.is_finite() {
        return x;
    }
    if x == 0.0 {
        return 0.0;
    }
    let mut text = String::with_capacity(32);
    let _ = write!(text, "{:.*e}", digits.clamp(1, 40) - 1, x);
    text.parse().unwrap_or(x)
}

/// Writes `<case_dir>/<time name>/<field name>` (or `.gz`) atomically and
/// returns the path written. Every patch but `empty` ones gets a `value`.
pub fn write_time_field(
    case_dir: &Path,
    time: f64,
    mesh: &Mesh,
    field: &ScalarFieldOutput,
    options: &FoamWriteOptions,
) -> Result<PathBuf, OutputError> {
    check_sizes(
        field.name,
        mesh,
        (field.cells.len(), mesh.n_cells()),
        field.boundary.len(),
        field.boundary_values.len(),
    )?;
    let first = mesh.n_internal_faces();
    write_field_file(
        case_dir,
        time,
        options,
        f64::VOL_CLASS,
        field.name,
        field.cells,
        &|w, writer| {
            for (patch, bc) in mesh.patches().iter().zip(field.boundary) {
                let range = patch.boundary_faces(first);
                writer.patch(w, &patch.name, bc, &field.boundary_values[range])?;
            }
            Ok(())
        },
    )
}

/// Writes `<case_dir>/<time name>/<name>` with the cell values `cells` and an
/// empty `boundaryField`: one rank's part of a field in a `processorK`
/// directory (`case::decompose`), which `reconstruct` reads back.
pub fn write_internal_field(
    case_dir: &Path,
    time: f64,
    name: &str,
    cells: &[f64],
    options: &FoamWriteOptions,
) -> Result<PathBuf, OutputError> {
    write_field_file(
        case_dir,
        time,
        options,
        f64::VOL_CLASS,
        name,
        cells,
        &|_, _| Ok(()),
    )
}

/// A field to write whose patches each have a type name and, but for `empty`
/// ones, the face values (`value`): a `volVectorField` (cells) or a
/// `surfaceScalarField` (internal faces).
#[derive(Clone, Copy, Debug)]
pub struct FieldOutput<'a, T> {
    pub name: &'a str,
    /// Cell values, or internal face values of a surface field.
    pub internal: &'a [T],
    /// The type of each patch, in patch order (`fixedValue`, `calculated`, `empty`, ...).
    pub patch_types: &'a [&'a str],
    /// The value on every boundary face (index face − nInternalFaces).
    pub boundary_values: &'a [T],
}

/// The time directory `<case_dir>/<time name>/` of `mesh`'s fields, written
/// with `options` but for each field's own dimensions.
#[derive(Clone, Copy, Debug)]
pub struct TimeDirectory<'a> {
    pub case_dir: &'a Path,
    pub time: f64,
    pub mesh: &'a Mesh,
    pub options: &'a FoamWriteOptions,
}

impl TimeDirectory<'_> {
    /// Writes `field` with `dimensions` as [`write_time_field_of`] does
    /// (`surface`: a surface field); returns the path written.
    pub fn write<T: FieldItem>(
        &self,
        field: &FieldOutput<T>,
        surface: bool,
        dimensions: Dimensions,
    ) -> Result<PathBuf, OutputError> {
        let options = FoamWriteOptions {
            dimensions,
            ..*self.options
        };
        write_time_field_of(
            self.case_dir,
            self.time,
            self.mesh,
            field,
            surface,
            &options,
        )
    }

    /// Writes the volume field `name`: cell values `internal`, the patches'
    /// types and the boundary face values, with `dimensions`; returns the
    /// path written.
    pub fn write_volume<T: FieldItem>(
        &self,
        name: &str,
        internal: &[T],
        patch_types: &[&str],
        boundary_values: &[T],
        dimensions: Dimensions,
    ) -> Result<PathBuf, OutputError> {
        let field = FieldOutput {
            name,
            internal,
            patch_types,
            boundary_values,
        };
        self.write(&field, false, dimensions)
    }
}

/// The time's own record that OpenFOAM keeps beside its fields,
/// `<time name>/uniform/time`: a transient run's step index and the Δt of
/// the step that reached the time (`deltaT`: what the backward scheme's
/// first step after a restart takes as the step before it; OpenFOAM's
/// restart moves it into its `deltaT0`) and of the one before that
/// (`deltaT0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UniformTime {
    pub time: f64,
    pub index: usize,
    pub delta_t: f64,
    pub delta_t0: f64,
}

impl UniformTime {
    /// Writes `<case_dir>/<time name>/uniform/time` (ascii, values to the
    /// last bit), atomically; returns the path written.
    pub fn write(
        &self,
        case_dir: &Path,
        options: &FoamWriteOptions,
    ) -> Result<PathBuf, OutputError> {
        let name = time_name(self.time, options.time_precision);
        let dir = case_dir.join(&name).join("uniform");
        create_dir_all(&dir)?;
        let location = format!("{name}/uniform");
        let scalar = |x: f64| {
            let mut s = String::new();
            format_scalar(x, &mut s);
            s
        };
        let content = |w: &mut dyn Write| -> io::Result<()> {
            write_header(
                w,
                &HeaderSpec {
                    format: FoamFormat::Ascii,
                    class: "dictionary",
                    note: None,
                    location: &location,
                    object: "time",
                },
            )?;
            writeln!(w, "{:<15} {};\n", "value", scalar(self.time))?;
            writeln!(w, "{:<15} \"{name}\";\n", "name")?;
            writeln!(w, "{:<15} {};\n", "index", self.index)?;
            writeln!(w, "{:<15} {};\n", "deltaT", scalar(self.delta_t))?;
            writeln!(w, "{:<15} {};", "deltaT0", scalar(self.delta_t0))?;
            write_footer(w)
        };
        write_atomic(&dir.join("time"), false, content).map_err(output_error)
    }

    /// Reads `<time_dir>/uniform/time` where it exists (`None` where it
    /// does not): its `deltaT` and `deltaT0` (`deltaT0` defaults to
    /// `deltaT`, and both to `delta_t`), `index` (else 0) and `value`
    /// (else `time`).
    pub fn read(time_dir: &Path, time: f64, delta_t: f64) -> Result<Option<Self>, MeshError> {
        let path = time_dir.join("uniform").join("time");
        if !crate::foam::file_or_gz_exists(&path) {
            return Ok(None);
        }
        let dict = FoamDict::read(&path)?;
        let positive = |key: &str, default: f64| -> Result<f64, MeshError> {
            let value = dict.get_or(key, default)?;
            if value.is_finite() && value > 0.0 {
                Ok(value)
            } else {
                Err(dict.error(format!("{key} is {value}; it must be a positive number")))
            }
        };
        let delta_t = positive("deltaT", delta_t)?;
        let delta_t0 = positive("deltaT0", delta_t)?;
        dict.ignore("name");
        Ok(Some(Self {
            time: dict.get_or("value", time)?,
            index: dict.get_or("index", 0usize)?,
            delta_t,
            delta_t0,
        }))
    }
}

/// Writes `<case_dir>/<time name>/<name>` as a `volVectorField` (`surface =
/// false`; one value per cell) or a `surfaceScalarField`/`surfaceVectorField`
/// (`surface`; one per internal face), atomically; returns the path written.
pub fn write_time_field_of<T: FieldItem>(
    case_dir: &Path,
    time: f64,
    mesh: &Mesh,
    field: &FieldOutput<T>,
    surface: bool,
    options: &FoamWriteOptions,
) -> Result<PathBuf, OutputError> {
    let (class, internal_size) = if surface {
        let class = T::VOL_CLASS.replacen("vol", "surface", 1);
        (class, mesh.n_internal_faces())
    } else {
        (T::VOL_CLASS.to_string(), mesh.n_cells())
    };
    check_sizes(
        &format!("{} ({class})", field.name),
        mesh,
        (field.internal.len(), internal_size),
        field.patch_types.len(),
        field.boundary_values.len(),
    )?;
    let first = mesh.n_internal_faces();
    write_field_file(
        case_dir,
        time,
        options,
        &class,
        field.name,
        field.internal,
        &|w, writer| {
            for (patch, kind) in mesh.patches().iter().zip(field.patch_types) {
                let range = patch.boundary_faces(first);
                writeln!(
                    w,
                    "    {}\n    {{\n{PATCH_INDENT}{:<15} {kind};",
                    patch.name, "type"
                )?;
                if *kind != "empty" {
                    writer.entry(w, PATCH_INDENT, "value", &field.boundary_values[range])?;
                }
                writeln!(w, "    }}")?;
            }
            Ok(())
        },
    )
}

/// An error unless there are as many internal values as needed (`internal`:
/// given, needed), one patch entry per patch and one boundary value per
/// boundary face.
fn check_sizes(
    name: &str,
    mesh: &Mesh,
    internal: (usize, usize),
    patches: usize,
    boundary_values: usize,
) -> Result<(), OutputError> {
    let n_boundary = mesh.n_faces() - mesh.n_internal_faces();
    let (given, needed) = internal;
    if given != needed || patches != mesh.patches().len() || boundary_values != n_boundary {
        return Err(OutputError::invalid(format!(
            "field {name}: {given} internal values, {patches} patch entries and \
             {boundary_values} boundary values given for {needed} internal values (cells or \
             internal faces), {} patches and {n_boundary} boundary faces",
            mesh.patches().len(),
        )));
    }
    Ok(())
}

/// Writes the patches of `boundaryField` (inside its braces).
type PatchWriter<'f> = dyn Fn(&mut dyn Write, &ValueWriter) -> io::Result<()> + 'f;

/// A failed atomic write as an output error: its I/O error kept with the
/// path, anything else as its message.
fn output_error(e: MeshError) -> OutputError {
    match e {
        MeshError::Io { path, source } => OutputError::Io { path, source },
        other => OutputError::invalid(other.to_string()),
    }
}

/// The one writer of field files: header, dimensions, `internalField`,
/// `boundaryField` (from `patches`), atomically into `<case_dir>/<time name>/`.
fn write_field_file<T: FieldItem>(
    case_dir: &Path,
    time: f64,
    options: &FoamWriteOptions,
    class: &str,
    name: &str,
    internal: &[T],
    patches: &PatchWriter,
) -> Result<PathBuf, OutputError> {
    if let Some(i) = internal.iter().position(|v| !v.is_finite_item()) {
        return Err(OutputError::invalid(format!(
            "field {name}: internal value {i} is not finite; refusing to write a non-finite field"
        )));
    }
    let time_dir_name = time_name(time, options.time_precision);
    let dir = case_dir.join(&time_dir_name);
    create_dir_all(&dir)?;
    let path = dir.join(name);
    let content = |w: &mut dyn Write| -> io::Result<()> {
        write_header(
            w,
            &HeaderSpec {
                format: options.format,
                class,
                note: None,
                location: &time_dir_name,
                object: name,
            },
        )?;
        writeln!(w, "{:<15} {};\n", "dimensions", options.dimensions)?;
        let writer = ValueWriter { options };
        writer.entry(w, "", "internalField", internal)?;
        writeln!(w, "\nboundaryField\n{{")?;
        patches(w, &writer)?;
        writeln!(w, "}}")?;
        write_footer(w)
    };
    write_atomic(&path, options.compress, content).map_err(output_error)
}

/// The values of patch data, one per face or one for all.
fn patch_slice(values: &PatchValues) -> &[f64] {
    match values {
        PatchValues::Uniform(v) => std::slice::from_ref(v),
        PatchValues::PerFace(v) => v,
    }
}

const PATCH_INDENT: &str = "        ";

struct ValueWriter<'a> {
    options: &'a FoamWriteOptions,
}

impl ValueWriter<'_> {
    /// `key uniform v;` when all values are equal (as OpenFOAM writes), else
    /// `key nonuniform List<T> N (...);`, indented.
    fn entry<T: FieldItem>(
        &self,
        w: &mut dyn Write,
        indent: &str,
        key: &str,
        values: &[T],
    ) -> io::Result<()> {
        let digits = self.options.precision;
        write!(w, "{indent}{key:<15} ")?;
        if let Some(first) = values.first().filter(|&f| values.iter().all(|v| v == f)) {
            let mut buf = String::new();
            write!(w, "uniform ")?;
            first.rounded(digits).write_ascii(w, &mut buf)?;
            return writeln!(w, ";");
        }
        let rounded: Vec<T>;
        let items = if digits >= 17 || self.options.format == FoamFormat::Binary {
            values
        } else {
            // Each value's rounding is its own (formatted and read back):
            // on every core.
            rounded = values.par_iter().map(|x| x.rounded(digits)).collect();
            &rounded
        };
        write!(w, "nonuniform List<{}> ", T::NAME)?;
        write_list(w, items, self.options.format)?;
        writeln!(w, ";")
    }

    fn patch(
        &self,
        w: &mut dyn Write,
        name: &str,
        bc: &BoundaryCondition,
        face_values: &[f64],
    ) -> io::Result<()> {
        writeln!(
            w,
            "    {name}\n    {{\n{PATCH_INDENT}{:<15} {};",
            "type",
            bc.foam_name()
        )?;
        match bc {
            BoundaryCondition::Empty => {}
            BoundaryCondition::FixedValue(v) => {
                self.entry(w, PATCH_INDENT, "value", patch_slice(v))?
            }
            BoundaryCondition::ZeroGradient => self.entry(w, PATCH_INDENT, "value", face_values)?,
            BoundaryCondition::FixedGradient(g) => {
                self.entry(w, PATCH_INDENT, "gradient", patch_slice(g))?;
                self.entry(w, PATCH_INDENT, "value", face_values)?;
            }
            BoundaryCondition::Mixed {
                ref_value,
                ref_gradient,
                value_fraction,
            } => {
                self.entry(w, PATCH_INDENT, "refValue", patch_slice(ref_value))?;
                self.entry(w, PATCH_INDENT, "refGradient", patch_slice(ref_gradient))?;
                self.entry(
                    w,
                    PATCH_INDENT,
                    "valueFraction",
                    patch_slice(value_fraction),
                )?;
                self.entry(w, PATCH_INDENT, "value", face_values)?;
            }
        }
        writeln!(w, "    }}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::source::load;

    /// The one-conversion rounding reads back to the general format's text:
    /// at carries to the next power of ten, at the ends of the fixed
    /// notation's range, for negative zero and tiny and huge values, and on
    /// a stream of values from all exponents.
    #[test]
    fn rounding_equals_the_general_format_read_back() {
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            9.999995,
            9.9999949,
            99.99996,
            0.000099999996,
            0.0001,
            0.00009999995,
            999999.5,
            999999.4,
            1e-300,
            5e-324,
            -2.5e-310,
            1.7976931348623157e308,
            0.5,
            0.25,
            0.125,
            1.5e-5,
            123456.5,
            1234565.0,
        ];
        // SplitMix64 (Steele, Lea & Flood 2014) bits as doubles of every
        // exponent, finite only.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        while values.len() < 20_000 {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let z = z ^ (z >> 31);
            let x = f64::from_bits(z);
            if x.is_finite() {
                values.push(x);
            }
            // And values of the magnitudes fields have (1e-7 to 1e8).
            let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
            values.push(unit * 10f64.powi((z % 16) as i32 - 7));
        }
        for digits in [0, 1, 2, 5, 6, 7, 10, 15, 16] {
            for &x in &values {
                let general: f64 = format_general(x, digits).parse().unwrap();
                let ours = round_to_digits(x, digits);
                assert_eq!(
                    ours.to_bits(),
                    general.to_bits(),
                    "{x:e} to {digits} digits: {ours:e} against {general:e}"
                );
            }
        }
    }

    /// One condition of each kind, values that differ per face, and the
    /// boundary face values to write.
    fn sample(mesh: &Mesh) -> (Vec<f64>, Vec<BoundaryCondition>, Vec<f64>) {
        let cells: Vec<f64> = (0..mesh.n_cells())
            .map(|c| 273.0 + (c as f64).sqrt() / 3.0)
            .collect();
        let per_face = |p: usize, k: f64| {
            PatchValues::PerFace(
                (0..mesh.patches()[p].size)
                    .map(|i| k + i as f64 / 7.0)
                    .collect(),
            )
        };
        let boundary = vec![
            BoundaryCondition::FixedValue(PatchValues::Uniform(573.0)),
            BoundaryCondition::FixedValue(per_face(1, 300.0)),
            BoundaryCondition::ZeroGradient,
            BoundaryCondition::FixedGradient(PatchValues::Uniform(-0.1)),
            BoundaryCondition::Mixed {
                ref_value: per_face(4, 10.0),
                ref_gradient: PatchValues::Uniform(0.0),
                value_fraction: PatchValues::Uniform(0.25),
            },
            BoundaryCondition::Empty,
        ];
        let n_boundary = mesh.n_faces() - mesh.n_internal_faces();
        let values = (0..n_boundary).map(|b| 1.0 / (b as f64 + 3.0)).collect();
        (cells, boundary, values)
    }

    fn temp_case(name: &str) -> PathBuf {
        crate::test_support::unique_temp_dir(&format!("fvpoisson_field_{name}"))
    }

    #[test]
    fn written_fields_read_back() {
        // 2-D box: xmin xmax ymin ymax frontAndBack (empty): the sample's
        // conditions without the mixed one (tested on a 3-D box below).
        let mesh = load("box:3x2x1:2d").unwrap();
        let (cells, mut boundary, face_values) = sample(&mesh);
        boundary.remove(4);
        let dir = temp_case("round_trip");
        for (format, compress, precision) in [
            (FoamFormat::Ascii, false, 17),
            (FoamFormat::Binary, false, 6),
            (FoamFormat::Ascii, true, 17),
            (FoamFormat::Binary, true, 17),
            (FoamFormat::Ascii, false, 6),
        ] {
            let options = FoamWriteOptions {
                format,
                precision,
                compress,
                time_precision: 6,
                dimensions: Dimensions([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]),
            };
            let field = ScalarFieldOutput {
                name: "T",
                cells: &cells,
                boundary: &boundary,
                boundary_values: &face_values,
            };
            let path =
                write_time_field(&dir, 0.05000000000000003, &mesh, &field, &options).unwrap();
            let expected_name = if compress { "T.gz" } else { "T" };
            assert!(
                path.ends_with(Path::new("0.05").join(expected_name)),
                "{}",
                path.display()
            );
            let read = ScalarFieldFile::read(&dir.join("0.05/T"), mesh.n_cells()).unwrap();
            assert_eq!(read.dimensions, options.dimensions);
            let exact = format == FoamFormat::Binary || precision == 17;
            let round = |v: &[f64]| -> Vec<f64> {
                v.iter()
                    .map(|&x| {
                        if exact {
                            x
                        } else {
                            round_to_digits(x, precision)
                        }
                    })
                    .collect()
            };
            assert_eq!(read.internal, FieldValues::NonUniform(round(&cells)));
            let first = mesh.n_internal_faces();
            let patches = mesh.patches();
            let face_values_of = |p: usize| {
                let start = patches[p].start - first;
                round(&face_values[start..start + patches[p].size])
            };
            let xmin = read.patch(&patches[0]).unwrap();
            assert_eq!(xmin.get_word("type").unwrap(), "fixedValue");
            let n = |p: usize| patches[p].size;
            assert_eq!(
                FieldValues::read(xmin, "value", n(0)).unwrap(),
                FieldValues::Uniform(573.0)
            );
            let xmax = read.patch(&patches[1]).unwrap();
            let BoundaryCondition::FixedValue(PatchValues::PerFace(want)) = &boundary[1] else {
                unreachable!()
            };
            assert_eq!(
                FieldValues::read(xmax, "value", n(1)).unwrap(),
                FieldValues::NonUniform(round(want))
            );
            let ymin = read.patch(&patches[2]).unwrap();
            assert_eq!(ymin.get_word("type").unwrap(), "zeroGradient");
            assert_eq!(
                FieldValues::read(ymin, "value", n(2)).unwrap(),
                FieldValues::NonUniform(face_values_of(2))
            );
            let ymax = read.patch(&patches[3]).unwrap();
            assert_eq!(ymax.get_word("type").unwrap(), "fixedGradient");
            assert_eq!(
                FieldValues::read(ymax, "gradient", n(3)).unwrap(),
                FieldValues::Uniform(-0.1)
            );
            let back = read.patch(&patches[4]).unwrap();
            assert_eq!(back.get_word("type").unwrap(), "empty");
            assert!(!back.contains("value"));
            std::fs::remove_dir_all(dir.join("0.05")).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mixed_patches_and_uniform_internal_field() {
        let mesh = load("box:2x2x2").unwrap();
        let (_, boundary, face_values) = sample(&mesh);
        let cells = vec![5.0; mesh.n_cells()];
        let dir = temp_case("mixed");
        // The 3-D box has six plain patches: no empty one.
        let mut boundary = boundary;
        boundary[5] = BoundaryCondition::ZeroGradient;
        let field = ScalarFieldOutput {
            name: "p",
            cells: &cells,
            boundary: &boundary,
            boundary_values: &face_values,
        };
        write_time_field(&dir, 2.0, &mesh, &field, &FoamWriteOptions::default()).unwrap();
        let read = ScalarFieldFile::read(&dir.join("2/p"), mesh.n_cells()).unwrap();
        assert_eq!(read.internal, FieldValues::Uniform(5.0));
        assert_eq!(read.dimensions, Dimensions::NONE);
        let zmin = read.patch(&mesh.patches()[4]).unwrap();
        assert_eq!(zmin.get_word("type").unwrap(), "mixed");
        let n = mesh.patches()[4].size;
        assert_eq!(
            FieldValues::read(zmin, "valueFraction", n).unwrap(),
            FieldValues::Uniform(0.25)
        );
        assert_eq!(
            FieldValues::read(zmin, "refGradient", n).unwrap(),
            FieldValues::Uniform(0.0)
        );
        assert!(
            matches!(FieldValues::read(zmin, "refValue", n).unwrap(), FieldValues::NonUniform(v) if v.len() == n)
        );
        // Wrong sizes are refused before anything is written.
        let short = ScalarFieldOutput {
            cells: &cells[1..],
            ..field
        };
        let e =
            write_time_field(&dir, 3.0, &mesh, &short, &FoamWriteOptions::default()).unwrap_err();
        assert!(e.to_string().contains("7 internal values"), "{e}");
        assert!(!dir.join("3").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn field_files_are_checked() {
        let dir = temp_case("bad");
        std::fs::create_dir_all(dir.join("0")).unwrap();
        let path = dir.join("0/T");
        let check = |body: &str, n_cells: usize| {
            std::fs::write(&path, body).unwrap();
            ScalarFieldFile::read(&path, n_cells)
                .unwrap_err()
                .to_string()
        };
        let head = "FoamFile { format ascii; class volScalarField; object T; }\n";
        let e = check(&format!("{head}dimensions [0 0 0 1 0 0 0];\ninternalField nonuniform List<scalar> 2(1 2);\nboundaryField {{}}\n"), 3);
        assert!(
            e.ends_with("0/T:3: 'internalField' has 2 values but 3 are needed"),
            "{e}"
        );
        let e = check(
            &format!("{head}dimensions [0 0 1];\ninternalField uniform 1;\nboundaryField {{}}\n"),
            3,
        );
        assert!(e.ends_with("0/T:2: 'dimensions': expected a dimension set of 5 or 7 numbers like [0 2 -1 0 0 0 0], found a [ ] set"), "{e}");
        let e = check(
            &format!(
                "{head}dimensions [0 0 0 1 0 0 0];\ninternalField uniform;\nboundaryField {{}}\n"
            ),
            3,
        );
        assert!(e.ends_with("0/T:3: 'internalField': expected 'uniform <scalar>' or 'nonuniform List<scalar> N (...)', found word 'uniform'"), "{e}");
        let e = check(
            &format!("{head}dimensions [0 0 0 1 0 0 0];\ninternalField uniform 1;\n"),
            3,
        );
        assert!(e.ends_with("0/T: missing entry 'boundaryField'"), "{e}");
        let e = check("FoamFile { class volVectorField; }\n", 3);
        assert!(
            e.contains("expected a volScalarField, found class volVectorField"),
            "{e}"
        );
        // `$internalField` and patch lookup by pattern and by group.
        std::fs::write(
            &path,
            format!("{head}dimensions [0 0 0 1 0 0 0];\ninternalField uniform 7;\nboundaryField {{\n  \"x.*\" {{ type fixedValue; value $internalField; }}\n  sides {{ type zeroGradient; }}\n}}\n"),
        )
        .unwrap();
        let mesh = load("box:2x1x1").unwrap();
        let field = ScalarFieldFile::read(&path, mesh.n_cells()).unwrap();
        let xmax = field.patch(&mesh.patches()[1]).unwrap();
        assert_eq!(
            FieldValues::read(xmax, "value", 1).unwrap(),
            FieldValues::Uniform(7.0)
        );
        let mut side = mesh.patches()[2].clone();
        side.in_groups = vec!["sides".into()];
        assert_eq!(
            field.patch(&side).unwrap().get_word("type").unwrap(),
            "zeroGradient"
        );
        std::fs::write(&path, format!("{head}dimensions [0 0 0 1 0 0 0];\ninternalField uniform 7;\nboundaryField {{\n  xmin {{ type zeroGradient; }}\n}}\n")).unwrap();
        let field = ScalarFieldFile::read(&path, mesh.n_cells()).unwrap();
        let e = field.patch(&mesh.patches()[1]).unwrap_err().to_string();
        assert!(e.ends_with("0/T:4: boundaryField has no entry for patch 'xmax' (type patch); add 'xmax { type ...; }'"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vector_and_surface_fields_read_back() {
        let mesh = load("box:3x2x1:2d").unwrap();
        let dir = temp_case("vector");
        let n_boundary = mesh.n_faces() - mesh.n_internal_faces();
        let cells: Vec<Vec3> = (0..mesh.n_cells())
            .map(|c| Vec3::new(c as f64 / 3.0, -(c as f64).sqrt(), 0.0))
            .collect();
        let faces: Vec<Vec3> = (0..n_boundary)
            .map(|b| Vec3::new(1.0 / (b as f64 + 7.0), 0.25, 0.0))
            .collect();
        let fluxes: Vec<f64> = (0..mesh.n_faces()).map(|f| (f as f64).sin()).collect();
        let types = [
            "fixedValue",
            "zeroGradient",
            "noSlip",
            "calculated",
            "empty",
        ];
        for (format, precision) in [
            (FoamFormat::Ascii, 17),
            (FoamFormat::Binary, 17),
            (FoamFormat::Ascii, 5),
        ] {
            let options = FoamWriteOptions {
                format,
                precision,
                ..FoamWriteOptions::default()
            };
            let u = FieldOutput {
                name: "U",
                internal: &cells,
                patch_types: &types,
                boundary_values: &faces,
            };
            write_time_field_of(&dir, 7.0, &mesh, &u, false, &options).unwrap();
            let n_internal = mesh.n_internal_faces();
            let phi = FieldOutput {
                name: "phi",
                internal: &fluxes[..n_internal],
                patch_types: &types,
                boundary_values: &fluxes[n_internal..],
            };
            write_time_field_of(&dir, 7.0, &mesh, &phi, true, &options).unwrap();
            let round = |v: &Vec3| v.rounded(precision);
            let read = VectorFieldFile::read(&dir.join("7/U"), mesh.n_cells()).unwrap();
            assert_eq!(
                read.internal,
                Values::NonUniform(cells.iter().map(round).collect())
            );
            let read_phi =
                ScalarFieldFile::read_class(&dir.join("7/phi"), "surfaceScalarField", n_internal)
                    .unwrap();
            assert_eq!(
                read_phi.internal,
                Values::NonUniform(
                    fluxes[..n_internal]
                        .iter()
                        .map(|x| x.rounded(precision))
                        .collect()
                )
            );
            let first = mesh.n_internal_faces();
            for (patch, kind) in mesh.patches().iter().zip(types) {
                let range = patch.boundary_faces(first);
                let entry = read.patch(patch).unwrap();
                assert_eq!(entry.get_word("type").unwrap(), kind);
                let phi_entry = read_phi.patch(patch).unwrap();
                if kind == "empty" {
                    assert!(!entry.contains("value") && !phi_entry.contains("value"));
                    continue;
                }
                let want: Vec<Vec3> = faces[range.clone()].iter().map(round).collect();
                assert_eq!(
                    VectorFieldValues::read(entry, "value", patch.size)
                        .unwrap()
                        .expand(patch.size),
                    want
                );
                let want: Vec<f64> = fluxes[first..][range]
                    .iter()
                    .map(|x| x.rounded(precision))
                    .collect();
                assert_eq!(
                    FieldValues::read(phi_entry, "value", patch.size)
                        .unwrap()
                        .expand(patch.size),
                    want
                );
            }
            // A vector field is not a scalar one, and surface fields have one
            // value per internal face.
            let e = ScalarFieldFile::read(&dir.join("7/U"), mesh.n_cells()).unwrap_err();
            assert!(
                e.to_string()
                    .contains("expected a volScalarField, found class volVectorField"),
                "{e}"
            );
            let e = write_time_field_of(&dir, 8.0, &mesh, &phi, false, &options).unwrap_err();
            assert!(e.to_string().contains("internal values"), "{e}");
            std::fs::remove_dir_all(dir.join("7")).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

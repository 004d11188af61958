//! Dictionaries as OpenFOAM reads them: `#include`d files spliced in, `$var`
//! macros substituted, quoted keys matched as regular expressions, and typed
//! accessors whose errors name the file, line and key. Every entry remembers
//! whether it was read, so a caller can name the entries it ignored
//! ([`FoamDict::unread`]).
//!
//! Semantics follow OpenFOAM v1912 (`dictionary`, `entry`, `primitiveEntry`,
//! `functionEntries`):
//! - entries are expanded in file order, so `$var` sees the entries written
//!   before it: first in its own dictionary, then in the enclosing ones;
//!   `$a.b.c` descends into sub-dictionaries, `$:a.b` starts at the top,
//!   `$..a` starts one level up; `${a.b}` is the same as `$a.b`;
//! - `$name` in keyword position (`pFinal { $p; relTol 0; }`) copies the
//!   entries of dictionary `name` in;
//! - a quoted key (`"(U|k|epsilon)"`, `"p.*"`) is a regular expression that
//!   must match the whole key looked up; exact keys win over patterns, and of
//!   several matching patterns the last one written wins;
//! - a repeated key replaces the earlier entry, except that two dictionaries
//!   merge (`#inputMode merge`, the default; also `overwrite`, `protect`,
//!   `warn`, `error`); `#remove key` or `#remove (a "b.*")` deletes entries;
//! - `#include "file"` (relative to the including file) and
//!   `#includeIfPresent` splice a file's entries in; `#includeEtc` (OpenFOAM's
//!   installation files) is refused, except `caseDicts/setConstraintTypes`,
//!   whose constraint types (`empty`, ...) follow from the mesh patch types here;
//!   `#includeFunc name` (a function object) is kept as an entry of that name;
//! - `#calc`, `#eval`, `#codeStream` need OpenFOAM's run-time C++ compilation
//!   or its expression parser and are refused with the file and line.

use super::dict::{Dict, EntryValue, Value, ValueKind};
use super::FoamFile;
use crate::mesh::MeshError;
use regex::Regex;
use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;

/// Includes nested deeper than this are refused (an include cycle otherwise
/// never ends).
const MAX_INCLUDE_DEPTH: usize = 32;

/// `$var` copies of more values than this in one file are refused: macros
/// that copy each other can grow exponentially. Case files copy a few values
/// at a time (`value $internalField;` of a uniform field).
const MAX_SPLICED_VALUES: usize = 1 << 22;

/// How much of an entry its reader used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    Unread,
    /// Read; for a dictionary, its entries are tracked one by one.
    Opened,
    /// Read as a whole (a macro copied it): its entries count as read.
    Whole,
}

/// An expanded dictionary (see the module documentation).
#[derive(Clone, Debug)]
pub struct FoamDict {
    /// Where the dictionary sits, for messages: `solvers/T` (empty at the top).
    scope: String,
    file: Arc<Path>,
    /// Line of the dictionary's key (0 for a whole file).
    line: usize,
    entries: Vec<FoamEntry>,
}

/// One entry of a [`FoamDict`].
#[derive(Clone, Debug)]
pub struct FoamEntry {
    key: String,
    /// Compiled `^(?:key)$` for a quoted key.
    pattern: Option<Regex>,
    file: Arc<Path>,
    line: usize,
    value: FoamValue,
    used: Cell<Use>,
}

#[derive(Clone, Debug)]
pub enum FoamValue {
    Dict(FoamDict),
    /// The values between the key and `;`, macros substituted.
    Stream(Vec<Value>),
}

/// A type an entry's values can be read as: each type here is read from
/// exactly one value.
pub trait FromEntry: Sized {
    /// What was expected, for messages ("a number").
    const EXPECTED: &'static str;
    fn from_value(value: &Value) -> Option<Self>;
    /// `None` unless `values` is one value of this type.
    fn from_values(values: &[Value]) -> Option<Self> {
        match values {
            [v] => Self::from_value(v),
            _ => None,
        }
    }
}

impl FromEntry for f64 {
    const EXPECTED: &'static str = "one number";
    fn from_value(value: &Value) -> Option<Self> {
        value.number()
    }
}

impl FromEntry for usize {
    const EXPECTED: &'static str = "one non-negative integer";
    fn from_value(value: &Value) -> Option<Self> {
        match &value.kind {
            ValueKind::Int(i) => usize::try_from(*i).ok(),
            _ => None,
        }
    }
}

impl FromEntry for String {
    const EXPECTED: &'static str = "one word";
    fn from_value(value: &Value) -> Option<Self> {
        match &value.kind {
            ValueKind::Word(w) | ValueKind::Str(w) => Some(w.clone()),
            _ => None,
        }
    }
}

impl FromEntry for bool {
    const EXPECTED: &'static str = "a switch (true/false, on/off, yes/no)";
    /// OpenFOAM `Switch` words.
    fn from_value(value: &Value) -> Option<Self> {
        match &value.kind {
            ValueKind::Word(w) => match w.as_str() {
                "true" | "on" | "yes" | "y" | "t" | "any" => Some(true),
                "false" | "off" | "no" | "n" | "f" | "none" => Some(false),
                _ => None,
            },
            ValueKind::Int(i @ (0 | 1)) => Some(*i == 1),
            _ => None,
        }
    }
}

/// Text of values for messages, shortened.
pub fn describe_values(values: &[Value]) -> String {
    match values {
        [] => "nothing".into(),
        [v] => v.kind.describe(),
        [v, ..] => format!(
            "{} values starting with {}",
            values.len(),
            v.kind.describe()
        ),
    }
}

impl FoamEntry {
    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn file(&self) -> &Path {
        &self.file
    }
    pub fn line(&self) -> usize {
        self.line
    }
    /// Whether the key is a quoted regular expression.
    pub fn is_pattern(&self) -> bool {
        self.pattern.is_some()
    }
    /// The value; does not count as reading it (see [`FoamDict::entry`]).
    pub fn value(&self) -> &FoamValue {
        &self.value
    }
    pub fn as_dict(&self) -> Option<&FoamDict> {
        match &self.value {
            FoamValue::Dict(d) => Some(d),
            FoamValue::Stream(_) => None,
        }
    }
    pub fn as_stream(&self) -> Option<&[Value]> {
        match &self.value {
            FoamValue::Stream(v) => Some(v),
            FoamValue::Dict(_) => None,
        }
    }
    /// An error at this entry: `file:line: msg`.
    pub fn error(&self, msg: impl Into<String>) -> MeshError {
        MeshError::parse(&self.file, self.line, msg)
    }

    fn matches(&self, key: &str) -> bool {
        match &self.pattern {
            None => self.key == key,
            Some(re) => re.is_match(key),
        }
    }

    /// Renames the scopes of a copied dictionary entry for its new parent.
    fn rescope(&mut self, parent: &str) {
        if let FoamValue::Dict(d) = &mut self.value {
            d.scope = child_scope(parent, &self.key);
            let scope = d.scope.clone();
            for e in &mut d.entries {
                e.rescope(&scope);
            }
        }
    }

    fn mark(&self, used: Use) {
        if self.used.get() != Use::Whole {
            self.used.set(used);
        }
    }
}

impl FoamDict {
    /// Reads `path` (or `path.gz`) and expands it.
    pub fn read(path: &Path) -> Result<Self, MeshError> {
        Self::from_file(&FoamFile::read(path)?)
    }

    /// Expands the body of a file already read.
    pub fn from_file(file: &FoamFile) -> Result<Self, MeshError> {
        Self::expand(&file.dict()?, &file.path)
    }

    /// Expands a parsed dictionary that was read from `file` (includes are
    /// relative to it).
    pub fn expand(dict: &Dict, file: &Path) -> Result<Self, MeshError> {
        let file: Arc<Path> = Arc::from(file);
        let mut out = Self {
            scope: String::new(),
            file: file.clone(),
            line: 0,
            entries: Vec::new(),
        };
        let mut expander = Expander {
            mode: InputMode::Merge,
            spliced: 0,
        };
        expander.expand_into(dict, &file, &mut out, &[], 0)?;
        Ok(out)
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Line of the dictionary's key (0 for a whole file).
    pub fn line(&self) -> usize {
        self.line
    }

    /// Where the dictionary sits (`solvers/T`; empty at the top of a file).
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The entries in order (reading them this way marks nothing as read).
    pub fn entries(&self) -> impl Iterator<Item = &FoamEntry> {
        self.entries.iter()
    }

    /// The entry `key`, exact keys first, then the last matching pattern; marks it read.
    pub fn entry(&self, key: &str) -> Option<&FoamEntry> {
        let e = self.find(key)?;
        e.mark(Use::Opened);
        Some(e)
    }

    fn find(&self, key: &str) -> Option<&FoamEntry> {
        let mut entries = self.entries.iter().rev();
        entries
            .clone()
            .find(|e| e.pattern.is_none() && e.key == key)
            .or_else(|| entries.find(|e| e.pattern.is_some() && e.matches(key)))
    }

    /// Whether `key` is present (marks nothing).
    pub fn contains(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    /// Marks `key`, if present, as read in full: for entries known not to
    /// matter (they then never show in [`FoamDict::unread`]).
    pub fn ignore(&self, key: &str) {
        if let Some(e) = self.find(key) {
            e.used.set(Use::Whole);
        }
    }

    /// `key 'name' in scope` for messages.
    fn describe_key(&self, key: &str) -> String {
        let key = crate::limits::quote(key);
        if self.scope.is_empty() {
            format!("'{key}'")
        } else {
            format!("'{key}' in {}", crate::limits::quote(&self.scope))
        }
    }

    /// An error about this dictionary: at its line, or naming only the file
    /// for a whole file.
    pub fn error(&self, msg: impl Into<String>) -> MeshError {
        if self.line == 0 {
            MeshError::InFile {
                file: self.file.to_path_buf(),
                msg: msg.into(),
            }
        } else {
            MeshError::parse(&self.file, self.line, msg)
        }
    }

    /// The error for a required entry `key` that is missing.
    pub fn missing(&self, key: &str) -> MeshError {
        self.error(format!("missing entry {}", self.describe_key(key)))
    }

    /// The entry `key` and its values, or `None`; an error when it is a dictionary.
    pub fn stream_entry(&self, key: &str) -> Result<Option<(&FoamEntry, &[Value])>, MeshError> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        match &e.value {
            FoamValue::Stream(values) => Ok(Some((e, values))),
            FoamValue::Dict(_) => Err(e.error(format!(
                "{} is a dictionary; expected a value",
                self.describe_key(key)
            ))),
        }
    }

    /// The values of the entry `key` (an error when missing or a dictionary).
    pub fn get_stream(&self, key: &str) -> Result<&[Value], MeshError> {
        match self.stream_entry(key)? {
            Some((_, values)) => Ok(values),
            None => Err(self.missing(key)),
        }
    }

    /// The entry `key` as `T`, or `None` when missing; an error when present
    /// but not a `T`.
    pub fn get_opt<T: FromEntry>(&self, key: &str) -> Result<Option<T>, MeshError> {
        let Some((e, values)) = self.stream_entry(key)? else {
            return Ok(None);
        };
        T::from_values(values).map(Some).ok_or_else(|| {
            e.error(format!(
                "{}: expected {}, found {}",
                self.describe_key(key),
                T::EXPECTED,
                describe_values(values)
            ))
        })
    }

    /// The entry `key` as `T` (an error naming file, line and key when missing or not a `T`).
    pub fn get<T: FromEntry>(&self, key: &str) -> Result<T, MeshError> {
        self.get_opt(key)?.ok_or_else(|| self.missing(key))
    }

    /// The entry `key` as `T`, or `default` when missing.
    pub fn get_or<T: FromEntry>(&self, key: &str, default: T) -> Result<T, MeshError> {
        Ok(self.get_opt(key)?.unwrap_or(default))
    }

    pub fn get_scalar(&self, key: &str) -> Result<f64, MeshError> {
        self.get(key)
    }

    pub fn get_word(&self, key: &str) -> Result<String, MeshError> {
        self.get(key)
    }

    /// The sub-dictionary `key`, or `None`; an error when `key` is not a dictionary.
    pub fn get_dict_opt(&self, key: &str) -> Result<Option<&FoamDict>, MeshError> {
        match self.entry(key) {
            None => Ok(None),
            Some(e) => e.as_dict().map(Some).ok_or_else(|| {
                e.error(format!(
                    "expected {} to be a dictionary {{ ... }}, found {}",
                    self.describe_key(key),
                    describe_values(e.as_stream().unwrap_or_default())
                ))
            }),
        }
    }

    /// The sub-dictionary of a patch in a `boundaryField`, by OpenFOAM's
    /// precedence: the entry of its exact name; else the last entry in the
    /// file named by one of its `groups`; else the last pattern matching
    /// its name (patterns do not match group names), where `patterns`.
    /// `None` when none is there; an error when the entry found is not a
    /// dictionary.
    pub fn get_patch_dict(
        &self,
        name: &str,
        groups: &[&str],
        patterns: bool,
    ) -> Result<Option<&FoamDict>, MeshError> {
        let mut entries = self.entries.iter().rev();
        let found = entries
            .clone()
            .find(|e| e.pattern.is_none() && e.key == name)
            .or_else(|| {
                entries
                    .clone()
                    .find(|e| e.pattern.is_none() && groups.contains(&e.key.as_str()))
            })
            .or_else(|| entries.find(|e| patterns && e.pattern.is_some() && e.matches(name)));
        let Some(e) = found else {
            return Ok(None);
        };
        e.mark(Use::Opened);
        e.as_dict().map(Some).ok_or_else(|| {
            e.error(format!(
                "expected {} to be a dictionary {{ ... }}, found {}",
                self.describe_key(&e.key),
                describe_values(e.as_stream().unwrap_or_default())
            ))
        })
    }

    /// The sub-dictionary `key` (an error when missing or not a dictionary).
    pub fn get_dict(&self, key: &str) -> Result<&FoamDict, MeshError> {
        self.get_dict_opt(key)?.ok_or_else(|| self.missing(key))
    }

    /// Entries never read, as `file:line: scope/key`, for warnings about
    /// unsupported settings. A dictionary read only in part lists its unread
    /// entries; one never opened is listed as a whole.
    pub fn unread(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_unread(&mut out);
        out
    }

    fn collect_unread(&self, out: &mut Vec<String>) {
        for e in &self.entries {
            match (e.used.get(), &e.value) {
                (Use::Unread, _) => {
                    let key = if e.pattern.is_some() {
                        format!("\"{}\"", e.key)
                    } else {
                        e.key.clone()
                    };
                    let scoped = child_scope(&self.scope, &key);
                    out.push(format!("{}:{}: {scoped}", e.file.display(), e.line));
                }
                (Use::Opened, FoamValue::Dict(d)) => d.collect_unread(out),
                _ => {}
            }
        }
    }

    /// Adds `entry` as OpenFOAM does under `mode` (see the module documentation).
    fn add(&mut self, mut entry: FoamEntry, mode: InputMode) -> Result<(), MeshError> {
        let same =
            |e: &FoamEntry| e.key == entry.key && e.pattern.is_some() == entry.pattern.is_some();
        let Some(i) = self.entries.iter().position(same) else {
            self.entries.push(entry);
            return Ok(());
        };
        let old = &mut self.entries[i];
        match mode {
            InputMode::Merge => {
                if let (FoamValue::Dict(old_dict), FoamValue::Dict(new_dict)) =
                    (&mut old.value, &mut entry.value)
                {
                    for child in std::mem::take(&mut new_dict.entries) {
                        old_dict.add(child, mode)?;
                    }
                } else {
                    *old = entry;
                }
            }
            InputMode::Overwrite => *old = entry,
            InputMode::Protect => {}
            InputMode::Warn => log::warn!(
                "{}:{}: entry '{}' is already defined on line {}; keeping the first (#inputMode warn)",
                entry.file.display(),
                entry.line,
                entry.key,
                old.line
            ),
            InputMode::Error => {
                return Err(entry.error(format!(
                    "entry '{}' is already defined in {} line {} (#inputMode error)",
                    entry.key,
                    old.file.display(),
                    old.line
                )))
            }
        }
        Ok(())
    }

    /// Removes the entries a `#remove` argument names (a word exactly, a
    /// quoted string as a pattern).
    fn remove(&mut self, what: &Value, file: &Path) -> Result<(), MeshError> {
        match &what.kind {
            ValueKind::List(items) => {
                for item in items {
                    self.remove(item, file)?;
                }
            }
            ValueKind::Word(w) => self.entries.retain(|e| e.key != *w),
            ValueKind::Str(s) => {
                let re = compile_key(s).map_err(|m| MeshError::parse(file, what.line, m))?;
                self.entries.retain(|e| !re.is_match(&e.key));
            }
            other => {
                return Err(MeshError::parse(
                    file,
                    what.line,
                    format!(
                        "#remove expects a key or a list of keys, found {}",
                        other.describe()
                    ),
                ))
            }
        }
        Ok(())
    }
}

/// The scope of entry `key` of a dictionary at `parent`.
fn child_scope(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}/{key}")
    }
}

/// `^(?:key)$`: OpenFOAM matches the whole key (of an entry, or of a
/// name in a list such as a function object's `fields`).
pub fn compile_key(key: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{key})$"))
        .map_err(|e| format!("key \"{key}\" is not a valid regular expression: {e}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InputMode {
    Merge,
    Overwrite,
    Protect,
    Warn,
    Error,
}

struct Expander {
    /// `#inputMode`: like OpenFOAM's global mode, it holds to the end of the
    /// file being expanded, includes too.
    mode: InputMode,
    /// Values copied by `$var` so far, bounded by [`MAX_SPLICED_VALUES`].
    spliced: usize,
}

/// Dictionaries from the top down to the one being filled, for `$var` lookups.
type Scopes<'a> = [&'a FoamDict];

impl Expander {
    fn expand_into(
        &mut self,
        src: &Dict,
        file: &Arc<Path>,
        out: &mut FoamDict,
        parents: &Scopes,
        include_depth: usize,
    ) -> Result<(), MeshError> {
        for entry in &src.entries {
            let key = entry.key.as_str();
            let err = |msg: String| MeshError::parse(file, entry.line, msg);
            if let Some(directive) = key.strip_prefix('#') {
                let EntryValue::Stream(args) = &entry.value else {
                    return Err(err(format!("directive '{key}' needs an argument")));
                };
                let arg = args
                    .first()
                    .ok_or_else(|| err(format!("'{key}' needs an argument")))?;
                self.directive(directive, arg, file, out, parents, include_depth)?;
                continue;
            }
            if key.starts_with('$') {
                let scopes = with(parents, out);
                let found = lookup(&scopes, key).ok_or_else(|| {
                    err(format!(
                        "unknown variable '{key}': no entry of that name is defined before this \
                         line in this dictionary or the ones around it"
                    ))
                })?;
                let FoamValue::Dict(d) = &found.value else {
                    return Err(err(format!(
                        "'{key}' in keyword position must name a dictionary, but it names a value \
                         ({}); write 'key {key};' to copy a value",
                        describe_values(found.as_stream().unwrap_or_default())
                    )));
                };
                found.used.set(Use::Whole);
                let mut copies = d.entries.clone();
                for copy in &mut copies {
                    copy.rescope(&out.scope);
                }
                for copy in copies {
                    out.add(copy, self.mode)?;
                }
                continue;
            }
            let pattern = if entry.quoted {
                Some(compile_key(key).map_err(err)?)
            } else {
                None
            };
            let value = match &entry.value {
                EntryValue::Dict(d) => {
                    let mut child = FoamDict {
                        scope: child_scope(&out.scope, key),
                        file: file.clone(),
                        line: entry.line,
                        entries: Vec::new(),
                    };
                    let scopes = with(parents, out);
                    self.expand_into(d, file, &mut child, &scopes, include_depth)?;
                    FoamValue::Dict(child)
                }
                EntryValue::Stream(values) => {
                    let scopes = with(parents, out);
                    FoamValue::Stream(self.substitute(values, &scopes, file)?)
                }
            };
            out.add(
                FoamEntry {
                    key: key.to_string(),
                    pattern,
                    file: file.clone(),
                    line: entry.line,
                    value,
                    used: Cell::new(Use::Unread),
                },
                self.mode,
            )?;
        }
        Ok(())
    }

    fn directive(
        &mut self,
        name: &str,
        arg: &Value,
        file: &Arc<Path>,
        out: &mut FoamDict,
        parents: &Scopes,
        include_depth: usize,
    ) -> Result<(), MeshError> {
        let err = |msg: String| MeshError::parse(file, arg.line, msg);
        let text = || match &arg.kind {
            ValueKind::Str(s) | ValueKind::Word(s) => Ok(s.as_str()),
            other => Err(err(format!(
                "'#{name}' expects a file name or word, found {}",
                other.describe()
            ))),
        };
        match name {
            "include" | "includeIfPresent" | "sinclude" => {
                let rel = text()?;
                if rel.contains('$') {
                    return Err(err(format!(
                        "#{name} \"{rel}\": environment variables in include paths are not \
                         supported; give the path relative to this file"
                    )));
                }
                let path = file.parent().unwrap_or(Path::new(".")).join(rel);
                if name != "include" && !super::file_or_gz_exists(&path) {
                    return Ok(());
                }
                if include_depth >= MAX_INCLUDE_DEPTH {
                    return Err(err(format!(
                        "#include \"{rel}\": includes nested deeper than {MAX_INCLUDE_DEPTH} \
                         levels (does a file include itself?)"
                    )));
                }
                let included = FoamFile::read(&path).map_err(|e| {
                    err(format!(
                        "#include \"{rel}\": cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                let dict = included.dict()?;
                let inc_file: Arc<Path> = Arc::from(included.path.as_path());
                self.expand_into(&dict, &inc_file, out, parents, include_depth + 1)
            }
            "includeEtc" if text()? == "caseDicts/setConstraintTypes" => {
                log::info!(
                    "{}:{}: #includeEtc \"caseDicts/setConstraintTypes\" skipped: constraint \
                     patches (empty) take their condition from the mesh patch type",
                    file.display(),
                    arg.line
                );
                Ok(())
            }
            "includeEtc" => Err(err(format!(
                "#includeEtc \"{}\" reads OpenFOAM installation files, which is not supported; \
                 copy the file into the case and use #include",
                text()?
            ))),
            // A function object: kept as an entry, so that a reader that does not
            // run function objects names it among the unread entries.
            "includeFunc" => {
                let entry = FoamEntry {
                    key: format!("#includeFunc {}", text()?),
                    pattern: None,
                    file: file.clone(),
                    line: arg.line,
                    value: FoamValue::Stream(vec![arg.clone()]),
                    used: Cell::new(Use::Unread),
                };
                out.add(entry, self.mode)
            }
            "inputMode" => {
                self.mode = match text()? {
                    "merge" | "default" => InputMode::Merge,
                    "overwrite" => InputMode::Overwrite,
                    "protect" => InputMode::Protect,
                    "warn" => InputMode::Warn,
                    "error" => InputMode::Error,
                    other => {
                        return Err(err(format!(
                            "#inputMode '{other:.80}': expected merge, overwrite, protect, warn, \
                             error or default"
                        )))
                    }
                };
                Ok(())
            }
            "remove" => out.remove(arg, file),
            _ => Err(refuse(&format!("#{name}"), file, arg.line)),
        }
    }

    /// `values` with every `$var` replaced by the referenced entry's values
    /// (lines set to the reference's, since the entry's file is the referencing
    /// one), and unsupported `#` directives refused.
    fn substitute(
        &mut self,
        values: &[Value],
        scopes: &Scopes,
        file: &Path,
    ) -> Result<Vec<Value>, MeshError> {
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            match &v.kind {
                ValueKind::Word(w) if w.starts_with('$') => {
                    let found = lookup(scopes, w).ok_or_else(|| {
                        MeshError::parse(
                            file,
                            v.line,
                            format!(
                                "unknown variable '{w}': no entry of that name is defined before \
                                 this line in this dictionary or the ones around it"
                            ),
                        )
                    })?;
                    let FoamValue::Stream(spliced) = &found.value else {
                        return Err(MeshError::parse(
                            file,
                            v.line,
                            format!(
                                "'{w}' names a dictionary; copy a dictionary with 'key {{ {w}; }}'"
                            ),
                        ));
                    };
                    found.used.set(Use::Whole);
                    self.spliced += spliced.iter().map(count_values).sum::<usize>();
                    if self.spliced > MAX_SPLICED_VALUES {
                        return Err(MeshError::parse(
                            file,
                            v.line,
                            format!(
                                "'{w}': macros copy more than {MAX_SPLICED_VALUES} values in this \
                                 file (do they copy each other?)"
                            ),
                        ));
                    }
                    out.extend(spliced.iter().map(|s| with_line(s, v.line)));
                }
                ValueKind::Word(w) if w.starts_with('#') => return Err(refuse(w, file, v.line)),
                ValueKind::List(items) => out.push(Value {
                    line: v.line,
                    kind: ValueKind::List(self.substitute(items, scopes, file)?),
                }),
                _ => out.push(v.clone()),
            }
        }
        Ok(out)
    }
}

/// The error for a directive that is not supported.
fn refuse(directive: &str, file: &Path, line: usize) -> MeshError {
    let why = match directive {
        "#calc" | "#codeStream" => {
            "it needs OpenFOAM's run-time C++ compilation; write the value it computes instead"
        }
        "#eval" => "it needs OpenFOAM's expression parser; write the value it computes instead",
        _ => "it is not an OpenFOAM directive this reader knows",
    };
    MeshError::parse(file, line, format!("{directive} is not supported: {why}"))
}

/// `parents` followed by `current`.
fn with<'a>(parents: &Scopes<'a>, current: &'a FoamDict) -> Vec<&'a FoamDict> {
    let mut scopes = parents.to_vec();
    scopes.push(current);
    scopes
}

/// Resolves `$name`, `${name}`, `$a.b.c`, `$:a.b`, `$..a` from the innermost scope.
fn lookup<'a>(scopes: &Scopes<'a>, reference: &str) -> Option<&'a FoamEntry> {
    let name = reference.strip_prefix('$')?;
    let name = name
        .strip_prefix('{')
        .and_then(|n| n.strip_suffix('}'))
        .unwrap_or(name);
    if let Some(rest) = name.strip_prefix(':') {
        return walk(scopes.first()?, rest);
    }
    if name.starts_with('.') {
        let ups = name.chars().take_while(|&c| c == '.').count();
        let start = scopes.len().checked_sub(ups)?;
        return walk(scopes.get(start)?, &name[ups..]);
    }
    // Whole name first (keys may contain dots), then the first component
    // searched outwards and the rest descended into.
    let (first, rest) = name.split_once('.').unwrap_or((name, ""));
    scopes.iter().rev().find_map(|d| {
        d.find(name).or_else(|| {
            let e = d.find(first)?;
            if rest.is_empty() {
                Some(e)
            } else {
                walk(e.as_dict()?, rest)
            }
        })
    })
}

/// The entry at the dotted `path` below `dict`.
fn walk<'a>(dict: &'a FoamDict, path: &str) -> Option<&'a FoamEntry> {
    let mut parts = path.split('.');
    let mut entry = dict.find(parts.next()?)?;
    for part in parts {
        entry = entry.as_dict()?.find(part)?;
    }
    Some(entry)
}

/// Numbers, words and lists in `v`, itself included.
fn count_values(v: &Value) -> usize {
    1 + match &v.kind {
        ValueKind::List(items) | ValueKind::Bracket(items) => items.iter().map(count_values).sum(),
        ValueKind::Uniform(_, item) => count_values(item),
        ValueKind::Numbers { data, .. } => data.len(),
        _ => 0,
    }
}

/// A copy of `v` with its line, and its items' lines, set to `line`.
fn with_line(v: &Value, line: usize) -> Value {
    let kind = match &v.kind {
        ValueKind::List(items) => {
            ValueKind::List(items.iter().map(|i| with_line(i, line)).collect())
        }
        ValueKind::Bracket(items) => {
            ValueKind::Bracket(items.iter().map(|i| with_line(i, line)).collect())
        }
        ValueKind::Uniform(n, item) => ValueKind::Uniform(*n, Box::new(with_line(item, line))),
        other => other.clone(),
    };
    Value { line, kind }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foam::{Arch, FoamFormat, Lexer};

    fn expand(src: &str) -> Result<FoamDict, MeshError> {
        let path = Path::new("case/system/d");
        let mut lx = Lexer::new(path, src.as_bytes(), 0, 1);
        let dict = Dict::parse_body(&mut lx, FoamFormat::Ascii, Arch::default(), false)?;
        FoamDict::expand(&dict, path)
    }

    fn err(src: &str) -> String {
        expand(src).unwrap_err().to_string()
    }

    #[test]
    fn macros_copy_values_and_dictionaries() {
        let d = expand(
            "T0 273;\n\
             solvers { p { solver PCG; tolerance 1e-6; relTol 0.05; }\n\
                       pFinal { $p; relTol 0; }\n\
                       q { min $T0; top $:T0; braces ${T0}; tol $p.tolerance; } }\n\
             init $T0;\n",
        )
        .unwrap();
        let solvers = d.get_dict("solvers").unwrap();
        let fin = solvers.get_dict("pFinal").unwrap();
        assert_eq!(fin.get_word("solver").unwrap(), "PCG");
        assert_eq!(fin.get_scalar("relTol").unwrap(), 0.0);
        assert_eq!(fin.get_scalar("tolerance").unwrap(), 1e-6);
        let q = solvers.get_dict("q").unwrap();
        for key in ["min", "top", "braces"] {
            assert_eq!(q.get_scalar(key).unwrap(), 273.0, "{key}");
        }
        assert_eq!(q.get_scalar("tol").unwrap(), 1e-6);
        assert_eq!(d.get_scalar("init").unwrap(), 273.0);
        // Copies are named after where they are.
        let d = expand("a { b { c 1; } }\nx { $a; }").unwrap();
        d.get_dict("x").unwrap().get_dict("b").unwrap();
        assert_eq!(d.unread(), ["case/system/d:1: x/b/c".to_string()]);
        // A copied dictionary is independent of its source.
        assert_eq!(
            solvers.get_dict("p").unwrap().get_scalar("relTol").unwrap(),
            0.05
        );
    }

    #[test]
    fn scoped_lookups() {
        let d = expand("a { b { c 1; } }\ns { x 7; t { y $..x; w $:a.b.c; v $a.b.c; u $.y; } }")
            .unwrap();
        let t = d.get_dict("s").unwrap().get_dict("t").unwrap();
        assert_eq!(t.get_scalar("y").unwrap(), 7.0);
        assert_eq!(t.get_scalar("w").unwrap(), 1.0);
        assert_eq!(t.get_scalar("v").unwrap(), 1.0);
        assert_eq!(t.get_scalar("u").unwrap(), 7.0);
        // `$...x` is two levels up: the top.
        let e = err("s { x 7; t { z $...x; } }");
        assert!(e.contains("unknown variable '$...x'"), "{e}");
        let d = expand("x 1; s { t { z $...x; } }").unwrap();
        let t = d.get_dict("s").unwrap().get_dict("t").unwrap();
        assert_eq!(t.get_scalar("z").unwrap(), 1.0);
        // Plain `$x` searches outwards.
        let d = expand("x 1; s { t { z $x; } }").unwrap();
        let t = d.get_dict("s").unwrap().get_dict("t").unwrap();
        assert_eq!(t.get_scalar("z").unwrap(), 1.0);
    }

    #[test]
    fn includes_are_relative_to_the_including_file() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson_foam_dict");
        std::fs::create_dir_all(dir.join("system/inc")).unwrap();
        std::fs::write(
            dir.join("system/inc/values"),
            "T0 300;\n#include \"more\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("system/inc/more"), "T1 $T0;\nbad\n").unwrap();
        std::fs::write(dir.join("system/inc/fine"), "T1 $T0;\n").unwrap();
        std::fs::write(dir.join("system/loop"), "#include \"loop\"\n").unwrap();
        let read = |body: &str| {
            std::fs::write(dir.join("system/d"), body).unwrap();
            FoamDict::read(&dir.join("system/d"))
        };
        // The include's error names the included file and its line.
        let e = read("#include \"inc/values\"\n").unwrap_err().to_string();
        assert!(
            e.ends_with("system/inc/more:3: expected ';' to end entry 'bad', found end of file"),
            "{e}"
        );
        std::fs::write(
            dir.join("system/inc/values"),
            "T0 300;\n#include \"fine\"\n",
        )
        .unwrap();
        let d = read("a 1;\n#include \"inc/values\"\nb { c $T1; }\n#includeIfPresent \"none\"\n")
            .unwrap();
        assert_eq!(d.get_dict("b").unwrap().get_scalar("c").unwrap(), 300.0);
        let t1 = d.entry("T1").unwrap();
        assert!(t1.file().ends_with("system/inc/fine") && t1.line() == 1);
        let e = read("#include \"loop\"").unwrap_err().to_string();
        assert!(e.contains("nested deeper than 32"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn regex_keys_exact_first_last_pattern_wins() {
        let d = expand(
            "\"(U|k|epsilon)\" { solver smoothSolver; }\n\
             \"p.*\" 1;\n\"pF.*\" 2;\np 3;\n",
        )
        .unwrap();
        assert_eq!(d.get_scalar("p").unwrap(), 3.0);
        assert_eq!(d.get_scalar("pFinal").unwrap(), 2.0);
        assert_eq!(d.get_scalar("pX").unwrap(), 1.0);
        assert!(d.get_dict("k").is_ok());
        // The whole key must match.
        assert!(d.get_dict_opt("kk").unwrap().is_none());
        assert!(!d.contains("Up"));
        assert!(err("\"(a\" 1;").starts_with("case/system/d:1: key \"(a\" is not a valid"));
    }

    #[test]
    fn repeated_keys_merge_dictionaries_and_replace_values() {
        let d = expand("a { x 1; y 2; }\nb 1;\na { y 3; }\nb 2;\n#remove \"b.*\"\n").unwrap();
        let a = d.get_dict("a").unwrap();
        assert_eq!(a.get_scalar("x").unwrap(), 1.0);
        assert_eq!(a.get_scalar("y").unwrap(), 3.0);
        assert!(!d.contains("b"));
        let d =
            expand("#inputMode protect\nb 1; b 2;\n#inputMode overwrite\na { x 1; } a { y 1; }")
                .unwrap();
        assert_eq!(d.get_scalar("b").unwrap(), 1.0);
        assert!(!d.get_dict("a").unwrap().contains("x"));
        let e = err("#inputMode error\nb 1;\nb 2;");
        assert_eq!(
            e,
            "case/system/d:3: entry 'b' is already defined in case/system/d line 2 (#inputMode error)"
        );
        let d = expand("a 1; b 2; c 3;\n#remove (a c)\n").unwrap();
        assert_eq!(d.entries().map(FoamEntry::key).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn typed_accessors_name_file_line_and_key() {
        let d = expand("s { n 3; w word; f 1.5; b on; list (1 2); }\n").unwrap();
        let s = d.get_dict("s").unwrap();
        assert_eq!(s.get::<usize>("n").unwrap(), 3);
        assert!(s.get::<bool>("b").unwrap());
        assert_eq!(s.get_or("missing", 7usize).unwrap(), 7);
        assert_eq!(s.get_opt::<f64>("missing").unwrap(), None);
        assert_eq!(
            s.get_scalar("w").unwrap_err().to_string(),
            "case/system/d:1: 'w' in s: expected one number, found word 'word'"
        );
        assert_eq!(
            s.get::<usize>("f").unwrap_err().to_string(),
            "case/system/d:1: 'f' in s: expected one non-negative integer, found number 1.5"
        );
        assert_eq!(
            s.get_word("missing").unwrap_err().to_string(),
            "case/system/d:1: missing entry 'missing' in s"
        );
        assert_eq!(
            d.get_dict("nothing").unwrap_err().to_string(),
            "case/system/d: missing entry 'nothing'"
        );
        assert_eq!(
            s.get_dict("list").unwrap_err().to_string(),
            "case/system/d:1: expected 'list' in s to be a dictionary { ... }, found a list of 2"
        );
    }

    #[test]
    fn unread_entries_are_listed() {
        let d = expand(
            "a 1;\nb { c 2; d 3; }\ne { f 1; }\nbase { x 1; }\ng { $base; }\nh $a;\n\"r.*\" 4;",
        )
        .unwrap();
        d.get_dict("b").unwrap().get_scalar("c").unwrap();
        d.get_dict("g").unwrap().get_scalar("x").unwrap();
        d.ignore("e");
        assert_eq!(
            d.unread(),
            [
                "case/system/d:2: b/d".to_string(),
                "case/system/d:6: h".into(),
                "case/system/d:7: \"r.*\"".into()
            ]
        );
    }

    #[test]
    fn malformed_and_unsupported_input_names_file_and_line() {
        assert_eq!(
            err("a 1;\nb { c 2;\n"),
            "case/system/d:3: expected '}' to close the dictionary opened on line 2, found end of file"
        );
        assert_eq!(
            err("a 1;\nb 2\n}"),
            "case/system/d:3: expected ';' to end entry 'b', found '}'"
        );
        assert_eq!(
            err("a 1;\nb { c $nothing; }"),
            "case/system/d:2: unknown variable '$nothing': no entry of that name is defined \
             before this line in this dictionary or the ones around it"
        );
        // Only entries written before count.
        assert!(err("b $a;\na 1;").starts_with("case/system/d:1: unknown variable '$a'"));
        assert_eq!(
            err("a 1;\nb #calc \"$a*2\";"),
            "case/system/d:2: #calc is not supported: it needs OpenFOAM's run-time C++ \
             compilation; write the value it computes instead"
        );
        assert!(err("v #codeStream { code #{ #}; };").starts_with("case/system/d:1: #codeStream"));
        assert!(err("\n#eval \"1+1\"").starts_with("case/system/d:2: #eval is not supported"));
        assert!(err("a 1;\nb { $a; }").contains("must name a dictionary"));
        assert!(err("a { }\nb $a;").contains("names a dictionary"));
        assert!(err("#includeEtc \"caseDicts/x\"").contains("copy the file into the case"));
        assert!(expand("#includeEtc \"caseDicts/setConstraintTypes\"\na 1;").is_ok());
        assert!(err("#include \"nowhere\"")
            .starts_with("case/system/d:1: #include \"nowhere\": cannot read"));
        assert!(err("#inputMode sideways").contains("expected merge"));
        let d = expand("a 1;\n#includeFunc residuals\n").unwrap();
        d.get_scalar("a").unwrap();
        assert_eq!(
            d.unread(),
            ["case/system/d:2: #includeFunc residuals".to_string()]
        );
        // Macros that copy each other grow exponentially: refused, not expanded.
        let mut laughs = String::from("l0 (1 2 3 4 5 6 7 8);\n");
        for i in 1..12 {
            let p = format!("$l{}", i - 1);
            laughs += &format!("l{i} ({});\n", [p.as_str(); 8].join(" "));
        }
        let e = err(&laughs);
        assert!(e.contains("macros copy more than 4194304 values"), "{e}");
    }
}

//! Generic OpenFOAM dictionaries: `key value ...;` entries, `name { ... }`
//! sub-dictionaries, lists `N( ... )` / `( ... )`, uniform lists `N{v}`,
//! dimension sets `[ ... ]`, and binary `List<T>` blocks in binary files.
//! Directives (`#include "f"`) are kept as entries for a later pass to expand.

use super::lexer::{parse_label, parse_scalar, Lexer, Token};
use super::{Arch, FoamFormat};
use crate::mesh::{MeshError, Vec3};
use std::path::Path;

/// Nesting deeper than this is refused (keeps malformed input off the stack limit).
const MAX_DEPTH: usize = 64;

/// Entries in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dict {
    pub entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    /// The key was a quoted string (OpenFOAM: a regular expression).
    pub quoted: bool,
    /// Line of the key.
    pub line: usize,
    pub value: EntryValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum EntryValue {
    Dict(Dict),
    /// The values between the key and `;`.
    Stream(Vec<Value>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Line where the value starts.
    pub line: usize,
    pub kind: ValueKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    Word(String),
    Str(String),
    /// `#{ ... #}` code.
    Verbatim(String),
    Int(i64),
    Float(f64),
    /// `N( ... )` or `( ... )`.
    List(Vec<Value>),
    /// `N{v}`.
    Uniform(usize, Box<Value>),
    /// A binary `List<T>` block: `components` numbers per item.
    Numbers {
        components: usize,
        data: Vec<f64>,
    },
    /// `[ ... ]`.
    Bracket(Vec<Value>),
    /// `{ ... }` inside a list (as in `boundary`).
    Dict(Dict),
}

impl Dict {
    /// Parses entries up to `}` (when `in_braces`, consuming it) or the end of the file.
    pub fn parse_body(
        lx: &mut Lexer,
        format: FoamFormat,
        arch: Arch,
        in_braces: bool,
    ) -> Result<Self, MeshError> {
        Parser::new(lx, format, arch).dict_body(in_braces)
    }

    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| e.key == key)
    }

    /// The sub-dictionary `key`, or an error naming `file`.
    pub fn sub_dict(&self, key: &str, file: &Path, line: usize) -> Result<&Dict, MeshError> {
        match self.get(key).map(|e| (&e.value, e.line)) {
            Some((EntryValue::Dict(d), _)) => Ok(d),
            Some((EntryValue::Stream(_), l)) => Err(MeshError::parse(
                file,
                l,
                format!("expected '{key}' to be a dictionary {{ ... }}"),
            )),
            None => Err(MeshError::parse(
                file,
                line,
                format!("missing entry '{key}'"),
            )),
        }
    }
}

impl Entry {
    /// The single word, string or number of a `key value;` entry, as text.
    pub fn single_text(&self, file: &Path) -> Result<String, MeshError> {
        let bad = |what: String| {
            MeshError::parse(
                file,
                self.line,
                format!(
                    "expected '{}' to have one word or string, found {what}",
                    self.key
                ),
            )
        };
        match &self.value {
            EntryValue::Stream(v) if v.len() == 1 => match &v[0].kind {
                ValueKind::Word(s) | ValueKind::Str(s) => Ok(s.clone()),
                ValueKind::Int(i) => Ok(i.to_string()),
                ValueKind::Float(x) => Ok(x.to_string()),
                other => Err(bad(other.describe())),
            },
            EntryValue::Stream(v) => Err(bad(format!("{} values", v.len()))),
            EntryValue::Dict(_) => Err(bad("a dictionary".into())),
        }
    }

    /// The words of a `key (a b ...);` or `key N(a b ...);` entry (a
    /// patch's `inGroups`).
    pub fn words(&self, file: &Path) -> Result<Vec<String>, MeshError> {
        let bad = || {
            MeshError::parse(
                file,
                self.line,
                format!("expected '{}' to be a list of words (a b ...)", self.key),
            )
        };
        // `inGroups List<word> 1(wall);`: the list's type before it.
        let list = match &self.value {
            EntryValue::Stream(v) => match v.as_slice() {
                [Value {
                    kind: ValueKind::Word(t),
                    ..
                }, list]
                    if t.starts_with("List<") =>
                {
                    std::slice::from_ref(list)
                }
                all => all,
            },
            EntryValue::Dict(_) => return Err(bad()),
        };
        match list {
            [value] => match &value.kind {
                ValueKind::List(items) => items
                    .iter()
                    .map(|item| match &item.kind {
                        ValueKind::Word(w) | ValueKind::Str(w) => Ok(w.clone()),
                        _ => Err(bad()),
                    })
                    .collect(),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    /// The single non-negative integer of a `key N;` entry.
    pub fn single_label(&self, file: &Path) -> Result<u64, MeshError> {
        match &self.value {
            EntryValue::Stream(v) if v.len() == 1 => {
                if let ValueKind::Int(i) = v[0].kind {
                    if let Ok(u) = u64::try_from(i) {
                        return Ok(u);
                    }
                }
            }
            _ => {}
        }
        Err(MeshError::parse(
            file,
            self.line,
            format!("expected '{}' to be one non-negative integer", self.key),
        ))
    }
}

impl ValueKind {
    pub fn describe(&self) -> String {
        match self {
            Self::Word(w) => format!("word '{}'", crate::limits::quote(w)),
            Self::Str(s) => format!("string \"{}\"", crate::limits::quote(s)),
            Self::Verbatim(_) => "a #{ ... #} code block".into(),
            Self::Int(i) => format!("number {i}"),
            Self::Float(x) => format!("number {x}"),
            Self::List(l) => format!("a list of {}", l.len()),
            Self::Uniform(n, _) => format!("a uniform list of {n}"),
            Self::Numbers { components, data } => {
                format!("a binary list of {}", data.len() / components.max(&1))
            }
            Self::Bracket(_) => "a [ ] set".into(),
            Self::Dict(_) => "a dictionary".into(),
        }
    }
}

impl Value {
    /// Parses one value at the lexer (a whole list when it starts one).
    pub fn parse(
        lx: &mut Lexer,
        format: FoamFormat,
        arch: Arch,
        type_hint: Option<&str>,
    ) -> Result<Self, MeshError> {
        Parser::new(lx, format, arch).value(type_hint, true)
    }

    /// The value as a number, when it is one.
    pub fn number(&self) -> Option<f64> {
        match self.kind {
            ValueKind::Int(i) => Some(i as f64),
            ValueKind::Float(x) => Some(x),
            _ => None,
        }
    }

    /// The value as a vector, when it is a list of three numbers `(x y z)`.
    pub fn vector(&self) -> Option<Vec3> {
        match &self.kind {
            ValueKind::List(items) if items.len() == 3 => {
                let v: Option<Vec<f64>> = items.iter().map(Value::number).collect();
                v.map(|v| Vec3::new(v[0], v[1], v[2]))
            }
            _ => None,
        }
    }

    fn error(&self, file: &Path, msg: String) -> MeshError {
        MeshError::parse(file, self.line, msg)
    }

    /// The items of a list value, whichever way it was written, as scalars.
    pub fn to_scalars(&self, file: &Path) -> Result<Vec<f64>, MeshError> {
        self.to_numbers(file, 1)
            .map(|v| v.into_iter().map(|x| x[0]).collect())
    }

    /// The items of a list of `(x y z)` values, whichever way it was written.
    pub fn to_vectors(&self, file: &Path) -> Result<Vec<Vec3>, MeshError> {
        self.to_numbers(file, 3)
            .map(|v| v.into_iter().map(|x| Vec3::new(x[0], x[1], x[2])).collect())
    }

    fn to_numbers(&self, file: &Path, k: usize) -> Result<Vec<Vec<f64>>, MeshError> {
        let item = |v: &Value| -> Result<Vec<f64>, MeshError> {
            let nums = match &v.kind {
                _ if k == 1 => v.number().map(|x| vec![x]),
                ValueKind::List(l) if l.len() == k => l.iter().map(Value::number).collect(),
                _ => None,
            };
            nums.ok_or_else(|| {
                v.error(
                    file,
                    format!(
                        "expected {}, found {}",
                        if k == 1 {
                            "a number"
                        } else {
                            "a vector (x y z)"
                        },
                        v.kind.describe()
                    ),
                )
            })
        };
        match &self.kind {
            ValueKind::List(items) => items.iter().map(item).collect(),
            ValueKind::Uniform(n, v) => Ok(vec![item(v)?; *n]),
            ValueKind::Numbers { components, data } if *components == k => {
                Ok(data.chunks_exact(k).map(<[f64]>::to_vec).collect())
            }
            other => Err(self.error(file, format!("expected a list, found {}", other.describe()))),
        }
    }
}

/// Numbers per item of a binary `List<T>`, for the types OpenFOAM writes as
/// contiguous blocks; `None` for labels (sized by `arch`) and others.
fn float_components(list_type: &str) -> Option<usize> {
    let inner = list_type.strip_prefix("List<")?.strip_suffix('>')?;
    Some(match inner {
        "scalar" | "sphericalTensor" => 1,
        "vector" => 3,
        "symmTensor" => 6,
        "tensor" => 9,
        _ => return None,
    })
}

struct Parser<'l, 'a> {
    lx: &'l mut Lexer<'a>,
    format: FoamFormat,
    arch: Arch,
    depth: usize,
}

impl<'l, 'a> Parser<'l, 'a> {
    /// A parser at the lexer's position, at the top level.
    fn new(lx: &'l mut Lexer<'a>, format: FoamFormat, arch: Arch) -> Self {
        Parser {
            lx,
            format,
            arch,
            depth: 0,
        }
    }

    fn enter(&mut self) -> Result<(), MeshError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self
                .lx
                .error(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn dict_body(&mut self, in_braces: bool) -> Result<Dict, MeshError> {
        self.enter()?;
        let open_line = self.lx.line();
        let mut dict = Dict::default();
        loop {
            let token = self.lx.next_token()?;
            let line = self.lx.line();
            let (key, quoted) = match token {
                // OpenFOAM accepts a stray ';' after an entry, e.g. `name { ... };`.
                Token::Punct(b';') => continue,
                Token::Punct(b'}') if in_braces => break,
                Token::Eof if !in_braces => break,
                Token::Eof => {
                    return Err(self.lx.error(format!(
                        "expected '}}' to close the dictionary opened on line {open_line}, \
                         found end of file"
                    )))
                }
                Token::Word(w) => (w.to_string(), false),
                Token::Str(w) => (w.to_string(), true),
                t => {
                    return Err(self.lx.error(format!(
                        "expected a keyword{}, found {}",
                        if in_braces { " or '}'" } else { "" },
                        t.describe()
                    )))
                }
            };
            let value = if key.starts_with('#') {
                // Directives take one argument and no ';'.
                EntryValue::Stream(vec![self.value(None, false)?])
            } else if key.starts_with('$') {
                // `$name` in keyword position splices a dictionary in; ';' is optional.
                self.lx.eat(b';')?;
                EntryValue::Stream(Vec::new())
            } else if self.lx.peek()? == Token::Punct(b'{') {
                self.lx.next_token()?;
                EntryValue::Dict(self.dict_body(true)?)
            } else {
                EntryValue::Stream(self.stream(&key)?)
            };
            dict.entries.push(Entry {
                key,
                quoted,
                line,
                value,
            });
        }
        self.depth -= 1;
        Ok(dict)
    }

    /// Values up to and including `;`.
    fn stream(&mut self, key: &str) -> Result<Vec<Value>, MeshError> {
        let mut values: Vec<Value> = Vec::new();
        loop {
            match self.lx.peek()? {
                Token::Punct(b';') => {
                    self.lx.next_token()?;
                    return Ok(values);
                }
                Token::Eof | Token::Punct(b'}') => {
                    let found = self.lx.next_token()?;
                    return Err(self.lx.error(format!(
                        "expected ';' to end entry '{key}', found {}",
                        found.describe()
                    )));
                }
                _ => {}
            }
            let hint = match values.last() {
                Some(Value {
                    kind: ValueKind::Word(w),
                    ..
                }) => Some(w.clone()),
                _ => None,
            };
            values.push(self.value(hint.as_deref(), false)?);
        }
    }

    /// One value. `N(` starts a counted list when `strict` (the caller expects a
    /// list there) or after a `List<T>` type word; elsewhere, as in OpenFOAM's
    /// token streams (`arc 0 5 (x y z)`), only when the item count matches `N`.
    fn value(&mut self, type_hint: Option<&str>, strict: bool) -> Result<Value, MeshError> {
        let token = self.lx.next_token()?;
        let line = self.lx.line();
        let kind = match token {
            Token::Word(w) => ValueKind::Word(w.to_string()),
            Token::Str(s) => ValueKind::Str(s.to_string()),
            Token::Verbatim(s) => ValueKind::Verbatim(s.to_string()),
            Token::Number(text) => match (parse_label(text), self.lx.peek()?) {
                (Some(n), Token::Punct(b'(')) => {
                    let strict = strict || type_hint.is_some_and(|t| t.starts_with("List<"));
                    let (pos, line) = (self.lx.pos(), self.lx.line());
                    self.lx.next_token()?;
                    match self.counted_list(n, type_hint, strict)? {
                        Some(list) => list,
                        None => {
                            // Not a counted list: the number stands alone.
                            self.lx.rewind(pos, line);
                            ValueKind::Int(n as i64)
                        }
                    }
                }
                (Some(n), Token::Punct(b'{')) => {
                    self.lx.next_token()?;
                    self.enter()?;
                    let item = self.value(None, false)?;
                    self.lx.punct(b'}', "to close the uniform list")?;
                    self.depth -= 1;
                    ValueKind::Uniform(self.size(n)?, Box::new(item))
                }
                _ => match text.parse::<i64>() {
                    Ok(i) => ValueKind::Int(i),
                    Err(_) => ValueKind::Float(parse_scalar(text).ok_or_else(|| {
                        self.lx
                            .error(format!("expected a number, found bad number {text}"))
                    })?),
                },
            },
            Token::Punct(b'(') => ValueKind::List(self.items(b')')?),
            Token::Punct(b'[') => ValueKind::Bracket(self.items(b']')?),
            Token::Punct(b'{') => ValueKind::Dict(self.dict_body(true)?),
            t => {
                return Err(self
                    .lx
                    .error(format!("expected a value, found {}", t.describe())))
            }
        };
        Ok(Value { line, kind })
    }

    fn size(&self, n: u64) -> Result<usize, MeshError> {
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= u32::MAX as usize)
            .ok_or_else(|| self.lx.error(format!("list size {n} is too large")))
    }

    /// After `N(`: a binary block for `List<T>` of floats in binary files, else
    /// items. `None` when not `strict` and the count does not match.
    fn counted_list(
        &mut self,
        n: u64,
        type_hint: Option<&str>,
        strict: bool,
    ) -> Result<Option<ValueKind>, MeshError> {
        let start_line = self.lx.line();
        let n = self.size(n)?;
        if self.format == FoamFormat::Binary {
            if let Some(k) = type_hint.and_then(float_components) {
                let count = n
                    .checked_mul(k)
                    .ok_or_else(|| self.lx.error(format!("list size {n} is too large")))?;
                let data = super::list::read_binary_scalars(self.lx, count, self.arch)?;
                self.lx.punct(b')', "after the binary list")?;
                return Ok(Some(ValueKind::Numbers {
                    components: k,
                    data,
                }));
            }
            if type_hint == Some("List<label>") {
                // E.g. `cellLabels` of binary cellZones; labels below 2^53 are exact as f64.
                let count = n
                    .checked_mul(self.arch.label_bytes)
                    .ok_or_else(|| self.lx.error(format!("list size {n} is too large")))?;
                let bytes = self.lx.raw(count, "list of labels")?;
                let data = bytes
                    .chunks_exact(self.arch.label_bytes)
                    .map(|b| super::list::binary_label(b).map(|l| l as f64))
                    .collect::<Result<Vec<f64>, String>>()
                    .map_err(|m| self.lx.error(m))?;
                self.lx.punct(b')', "after the binary list")?;
                return Ok(Some(ValueKind::Numbers {
                    components: 1,
                    data,
                }));
            }
        }
        let items = self.items(b')')?;
        // A list of `name { ... }` entries counts entries, not tokens.
        let entries = items.len() / 2;
        let is_entry_list = items.len() % 2 == 0
            && items.chunks(2).all(|p| {
                matches!(p[0].kind, ValueKind::Word(_)) && matches!(p[1].kind, ValueKind::Dict(_))
            });
        let matches = items.len() == n || (is_entry_list && entries == n);
        if !matches && !strict {
            return Ok(None);
        }
        if !matches {
            return Err(self.lx.error(format!(
                "list opened on line {start_line} declares {n} entries but has {}",
                if is_entry_list { entries } else { items.len() }
            )));
        }
        Ok(Some(ValueKind::List(items)))
    }

    fn items(&mut self, close: u8) -> Result<Vec<Value>, MeshError> {
        self.enter()?;
        let open_line = self.lx.line();
        let mut items = Vec::new();
        loop {
            match self.lx.peek()? {
                Token::Punct(c) if c == close => {
                    self.lx.next_token()?;
                    break;
                }
                Token::Eof => {
                    return Err(self.lx.error(format!(
                        "expected '{}' to close the list opened on line {open_line}, \
                         found end of file",
                        close as char
                    )))
                }
                _ => items.push(self.value(None, false)?),
            }
        }
        self.depth -= 1;
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Dict, MeshError> {
        let mut lx = Lexer::new(Path::new("d"), src.as_bytes(), 0, 1);
        Dict::parse_body(&mut lx, FoamFormat::Ascii, Arch::default(), false)
    }

    #[test]
    fn entries_lists_and_subdicts() {
        let d = parse(
            "a 1; b (1 2 3); c { type wall; inGroups 1(wall); }\n\
             dims [0 2 -2 0 0 0 0]; u 3{0.5}; #include \"x\"\n v uniform (1 2 3);",
        )
        .unwrap();
        assert_eq!(d.get("a").unwrap().single_label(Path::new("d")).unwrap(), 1);
        let c = d.sub_dict("c", Path::new("d"), 0).unwrap();
        assert_eq!(
            c.get("type").unwrap().single_text(Path::new("d")).unwrap(),
            "wall"
        );
        let EntryValue::Stream(u) = &d.get("u").unwrap().value else {
            panic!()
        };
        assert_eq!(u[0].to_scalars(Path::new("d")).unwrap(), vec![0.5; 3]);
        assert!(d.get("#include").is_some());
        assert_eq!(d.get("v").unwrap().line, 3);
        // A patch's groups, with and without the list's count and type.
        let groups = parse("a 1(wall); b (x \"y\"); c List<word> 2(p q); d 3;").unwrap();
        let words = |key: &str| groups.get(key).unwrap().words(Path::new("d"));
        assert_eq!(words("a").unwrap(), ["wall"]);
        assert_eq!(words("b").unwrap(), ["x", "y"]);
        assert_eq!(words("c").unwrap(), ["p", "q"]);
        assert!(words("d").is_err());
        // A number before a list that it does not count is just a number.
        let d = parse("edges ( arc 0 5 (0.4 0.1 0) );\nf { $p; x 1; };\n").unwrap();
        let EntryValue::Stream(e) = &d.get("edges").unwrap().value else {
            panic!()
        };
        let ValueKind::List(arc) = &e[0].kind else {
            panic!()
        };
        assert_eq!(arc[2].kind, ValueKind::Int(5));
        assert!(matches!(&arc[3].kind, ValueKind::List(v) if v.len() == 3));
        assert_eq!(d.sub_dict("f", Path::new("d"), 0).unwrap().entries.len(), 2);
    }

    #[test]
    fn errors_name_line_and_what() {
        let e = parse("a 1;\nb (1 2\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "d:3: expected ')' to close the list opened on line 2, found end of file"
        );
        let e = parse("a 1;\nb List<scalar> 3(1 2);")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "d:2: list opened on line 2 declares 3 entries but has 2");
        let e = parse("a 1\n}").unwrap_err().to_string();
        assert_eq!(e, "d:2: expected ';' to end entry 'a', found '}'");
        let e = parse("(1)").unwrap_err().to_string();
        assert_eq!(e, "d:1: expected a keyword, found '('");
        let deep = "(".repeat(100);
        let mut lx = Lexer::new(Path::new("d"), deep.as_bytes(), 0, 1);
        let e = Value::parse(&mut lx, FoamFormat::Ascii, Arch::default(), None).unwrap_err();
        assert!(e.to_string().contains("nesting deeper"), "{e}");
    }
}

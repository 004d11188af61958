//! What a preconditioner written in its own folder implements: the
//! [`Algorithm`] trait (its keys, its one parser of them, its CPU
//! implementation) over [`KeyValues`], the keys and values of any front end.
//! `solve::algorithms` lists the algorithms; `solve::registry` names them.
//!
//! A leaf of `solve`: it uses the shared operator and error types only, so
//! an algorithm's folder depends on it and nothing depends back.

use std::fmt;

use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// The keys and values given with a preconditioner's name, in the order
/// given, from any front end. Keys match without regard to case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValues {
    pairs: Vec<(String, String)>,
}

impl KeyValues {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key = value` (a later value of the same key wins).
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.pairs.push((key.into(), value.into()));
    }

    /// The last value given for `key` (any case).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` parsed as `T`; an error naming the key otherwise
    /// ([`parse_value`]).
    pub fn parsed<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<Option<T>, String> {
        self.get(key).map(|v| parse_value(key, v, what)).transpose()
    }

    /// The pairs in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// A switch's text as the settings parsers take it: `true`, `yes`, `on`,
/// `1` or `false`, `no`, `off`, `0` (as written; `None` otherwise, for the
/// caller's own error).
pub fn parse_switch(value: &str) -> Option<bool> {
    match value {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// `value`, the text given for the setting `key`, parsed as `T`; otherwise
/// the error every settings parser gives, `{key} must be {what}, got
/// '{value}'` (`key` as the caller names it, e.g. `AMG sweeps`; `what`, e.g.
/// `a whole number`).
pub fn parse_value<T: std::str::FromStr>(
    key: impl fmt::Display,
    value: &str,
    what: &str,
) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{key} must be {what}, got '{value}'"))
}

/// Sets each `key=value` part of a `name:key=value:...` specification (the
/// parts after the name) by `set`, keys and values trimmed; `what` names
/// the settings in the error of a part that is not `key=value`.
pub fn set_pairs<'s>(
    parts: impl Iterator<Item = &'s str>,
    what: &str,
    mut set: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<(), String> {
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{what} parameter '{part}' must be key=value"))?;
        set(key.trim(), value.trim())?;
    }
    Ok(())
}

/// Settings of a preconditioner that lives in its own folder: its keys, its
/// one parser and its CPU implementation; the CUDA implementation is
/// dispatched from `gpu::registered`.
pub trait Algorithm: Copy + fmt::Debug + fmt::Display + PartialEq + Send + Sync + 'static {
    /// The documented name (the first of the registration's names).
    const NAME: &'static str;
    /// The keys [`Algorithm::from_keys`] reads.
    const KEYS: &'static [&'static str];
    /// A key that may also be given at the end of a name (`neu2`: order 2)
    /// or bare after it (`neu:2`); the registry hands it to `from_keys`.
    const POSITIONAL: Option<&'static str> = None;
    fn from_keys(keys: &KeyValues) -> Result<Self, String>;
    /// Checks the parameters; the message names the bad one.
    fn validate(&self) -> Result<(), String>;
    /// Whether PCG must be flexible with it (it is not a fixed linear map).
    fn is_flexible(&self) -> bool {
        false
    }
    /// The CPU preconditioner for `a`.
    fn build_cpu<'a>(&self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError>;
}

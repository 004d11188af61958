//! Tokenizer for OpenFOAM files: words, numbers, strings and punctuation, with
//! `//` and `/* */` comments skipped and 1-based line numbers kept for errors.
//!
//! The list readers call the typed methods (`label`, `scalar`, `punct`) straight
//! on the bytes, so reading millions of numbers allocates nothing per token.

use crate::limits::quote;
use crate::mesh::MeshError;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;

/// Punctuation that ends words and numbers.
const PUNCT: &[u8] = b"(){}[];";

/// One token, borrowing its text from the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Token<'a> {
    /// Keyword or identifier, e.g. `type`, `List<scalar>`, `div(phi,U)`, `$p`, `#include`.
    Word(&'a str),
    /// Number as written; see [`parse_label`] and [`parse_scalar`].
    Number(&'a str),
    /// Quoted string, without the quotes (escapes kept as written).
    Str(&'a str),
    /// One of `( ) { } [ ] ;`.
    Punct(u8),
    /// Code between `#{` and `#}` (without the markers), kept as written.
    Verbatim(&'a str),
    Eof,
}

impl Token<'_> {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Token::Word(w) => format!("word '{}'", quote(w)),
            Token::Number(n) => format!("number {}", quote(n)),
            Token::Str(s) => format!("string \"{}\"", quote(s)),
            Token::Punct(c) => format!("'{}'", *c as char),
            Token::Verbatim(_) => "a #{ ... #} code block".into(),
            Token::Eof => "end of file".into(),
        }
    }
}

/// A cursor over a file's bytes.
pub struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: usize,
    file: &'a Path,
    progress: Option<ProgressBar>,
}

/// Files at least this large get a progress bar when stderr is a terminal.
const PROGRESS_MIN_BYTES: usize = 50 << 20;

impl<'a> Lexer<'a> {
    /// A lexer starting at byte `pos`, which is on line `line`.
    pub fn new(file: &'a Path, bytes: &'a [u8], pos: usize, line: usize) -> Self {
        Self {
            bytes,
            pos,
            line,
            file,
            progress: None,
        }
    }

    /// Shows a progress bar while reading a large file on a terminal.
    pub fn with_progress(mut self) -> Self {
        use std::io::IsTerminal;
        if self.bytes.len() >= PROGRESS_MIN_BYTES && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(self.bytes.len() as u64);
            if let Ok(style) =
                ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} {eta}")
            {
                bar.set_style(style);
            }
            bar.set_message(format!("reading {}", self.file.display()));
            self.progress = Some(bar);
        }
        self
    }

    /// Moves the progress bar, if any, to the current position.
    #[inline]
    pub fn tick(&self) {
        if let Some(bar) = &self.progress {
            bar.set_position(self.pos as u64);
        }
    }

    pub fn file(&self) -> &'a Path {
        self.file
    }

    /// The bytes the lexer reads (the whole file).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn line(&self) -> usize {
        self.line
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// An error at the current line.
    pub fn error(&self, msg: impl Into<String>) -> MeshError {
        MeshError::parse(self.file, self.line, msg)
    }

    /// An error at `line`.
    pub fn error_at(&self, line: usize, msg: impl Into<String>) -> MeshError {
        MeshError::parse(self.file, line, msg)
    }

    /// Skips whitespace and comments.
    pub fn skip_space(&mut self) -> Result<(), MeshError> {
        while let Some(&c) = self.bytes.get(self.pos) {
            match c {
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' | 0x0c => self.pos += 1,
                b'/' if self.bytes.get(self.pos + 1) == Some(&b'/') => {
                    while self.pos < self.bytes.len() && self.bytes[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                }
                b'/' if self.bytes.get(self.pos + 1) == Some(&b'*') => {
                    let start = self.line;
                    self.pos += 2;
                    loop {
                        match self.bytes.get(self.pos) {
                            None => {
                                return Err(self.error_at(
                                    start,
                                    "comment '/*' opened here is never closed with '*/'",
                                ))
                            }
                            Some(b'*') if self.bytes.get(self.pos + 1) == Some(&b'/') => {
                                self.pos += 2;
                                break;
                            }
                            Some(b'\n') => {
                                self.line += 1;
                                self.pos += 1;
                            }
                            Some(_) => self.pos += 1,
                        }
                    }
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// Moves back to a position saved from [`Lexer::pos`] and [`Lexer::line`].
    pub fn rewind(&mut self, pos: usize, line: usize) {
        self.pos = pos;
        self.line = line;
    }

    /// Skips whitespace and comments and returns the next byte, not consuming it
    /// (`None` at the end of the file). Cheaper than [`Lexer::peek`] in hot loops.
    #[inline]
    pub fn peek_byte(&mut self) -> Result<Option<u8>, MeshError> {
        self.skip_space()?;
        Ok(self.bytes.get(self.pos).copied())
    }

    /// Consumes punctuation `c` if it comes next; says whether it did.
    #[inline]
    pub fn eat(&mut self, c: u8) -> Result<bool, MeshError> {
        let found = self.peek_byte()? == Some(c);
        self.pos += usize::from(found);
        Ok(found)
    }

    /// The next token, without consuming it.
    pub fn peek(&mut self) -> Result<Token<'a>, MeshError> {
        let (pos, line) = (self.pos, self.line);
        let t = self.next_token();
        self.pos = pos;
        self.line = line;
        // Comments before the token may span lines: keep them skipped.
        self.skip_space()?;
        t
    }

    /// Reads the next token.
    pub fn next_token(&mut self) -> Result<Token<'a>, MeshError> {
        self.skip_space()?;
        let Some(&c) = self.bytes.get(self.pos) else {
            return Ok(Token::Eof);
        };
        if PUNCT.contains(&c) {
            self.pos += 1;
            return Ok(Token::Punct(c));
        }
        if c == b'"' {
            return self.string();
        }
        if self.bytes[self.pos..].starts_with(b"#{") {
            return self.verbatim();
        }
        if starts_number(&self.bytes[self.pos..]) {
            return self.number().map(Token::Number);
        }
        self.word()
    }

    fn string(&mut self) -> Result<Token<'a>, MeshError> {
        let start_line = self.line;
        self.pos += 1;
        let start = self.pos;
        loop {
            match self.bytes.get(self.pos) {
                None => {
                    return Err(
                        self.error_at(start_line, "string opened here with '\"' is never closed")
                    )
                }
                Some(b'"') => break,
                Some(b'\\') => {
                    self.line += usize::from(self.bytes.get(self.pos + 1) == Some(&b'\n'));
                    self.pos += 2;
                }
                Some(b'\n') => {
                    self.line += 1;
                    self.pos += 1;
                }
                Some(_) => self.pos += 1,
            }
        }
        let text = self.utf8(start, self.pos.min(self.bytes.len()))?;
        self.pos += 1;
        Ok(Token::Str(text))
    }

    fn verbatim(&mut self) -> Result<Token<'a>, MeshError> {
        let start_line = self.line;
        let start = self.pos + 2;
        let Some(len) = self.bytes[start..].windows(2).position(|w| w == b"#}") else {
            return Err(self.error_at(
                start_line,
                "code block '#{' opened here is never closed with '#}'",
            ));
        };
        let text = self.utf8(start, start + len)?;
        self.line += text.matches('\n').count();
        self.pos = start + len + 2;
        Ok(Token::Verbatim(text))
    }

    /// A word: any run of characters up to whitespace or punctuation, where
    /// parentheses inside the word are kept when balanced (`div(phi,U)`), and
    /// a `${...}` variable reference is kept whole.
    fn word(&mut self) -> Result<Token<'a>, MeshError> {
        let start = self.pos;
        if self.bytes[self.pos..].starts_with(b"${") {
            // `${name}`, possibly nested (`${_${FOAM_EXECUTABLE}}`), on one line.
            self.pos += 1;
            let mut braces = 0usize;
            loop {
                match self.bytes.get(self.pos) {
                    Some(b'{') => braces += 1,
                    Some(b'}') => braces -= 1,
                    Some(b'\n') | None => {
                        return Err(self.error("'${' is not closed by '}' on the same line"))
                    }
                    Some(_) => {}
                }
                self.pos += 1;
                if braces == 0 {
                    break;
                }
            }
        }
        let mut depth = 0usize;
        while let Some(&c) = self.bytes.get(self.pos) {
            match c {
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b' ' | b'\t' | b'\r' | b'\n' | 0x0c | b'{' | b'}' | b'[' | b']' | b';' | b'"' => {
                    break
                }
                _ => {}
            }
            self.pos += 1;
        }
        if depth != 0 {
            return Err(self.error(format!(
                "unbalanced '(' in word '{}'",
                quote(&String::from_utf8_lossy(&self.bytes[start..self.pos]))
            )));
        }
        Ok(Token::Word(self.utf8(start, self.pos)?))
    }

    /// The text of a number: a run of digits, signs, '.', 'e' and 'E' that must
    /// end at whitespace, punctuation, a comment or the end of the file.
    fn number(&mut self) -> Result<&'a str, MeshError> {
        let start = self.pos;
        while let Some(&c) = self.bytes.get(self.pos) {
            if c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-') {
                self.pos += 1;
            } else {
                break;
            }
        }
        match self.bytes.get(self.pos) {
            None => {}
            Some(c) if c.is_ascii_whitespace() || PUNCT.contains(c) || *c == b'/' => {}
            Some(_) => {
                let mut end = self.pos;
                while end < self.bytes.len()
                    && !self.bytes[end].is_ascii_whitespace()
                    && !PUNCT.contains(&self.bytes[end])
                {
                    end += 1;
                }
                return Err(self.error(format!(
                    "expected a number, found '{}'",
                    quote(&String::from_utf8_lossy(&self.bytes[start..end]))
                )));
            }
        }
        // Only ASCII bytes were accepted above.
        self.utf8(start, self.pos)
    }

    fn utf8(&self, start: usize, end: usize) -> Result<&'a str, MeshError> {
        std::str::from_utf8(&self.bytes[start..end]).map_err(|_| {
            self.error(
                "invalid UTF-8 text (is this a binary file without a 'format binary' header?)",
            )
        })
    }

    /// Reads punctuation `c`, or fails naming `what` was expected.
    pub fn punct(&mut self, c: u8, what: &str) -> Result<(), MeshError> {
        self.skip_space()?;
        if self.bytes.get(self.pos) == Some(&c) {
            self.pos += 1;
            return Ok(());
        }
        let found = self.next_token()?;
        Err(self.error(format!(
            "expected '{}' {what}, found {}",
            c as char,
            found.describe()
        )))
    }

    /// The length of the plain number (`[0-9.eE+-]*`, ending at a delimiter) at
    /// the current position, or `None` to leave the case to the general path.
    #[inline]
    fn plain_number_len(&self, digits_only: bool) -> Option<usize> {
        let b = &self.bytes[self.pos..];
        let n = b
            .iter()
            .take_while(|&&c| {
                c.is_ascii_digit()
                    || (!digits_only && matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
            })
            .count();
        let ends = b
            .get(n)
            .is_none_or(|c| c.is_ascii_whitespace() || PUNCT.contains(c) || *c == b'/');
        (n > 0 && ends && starts_number(b)).then_some(n)
    }

    /// Reads a non-negative integer (list size or label).
    #[inline]
    pub fn label(&mut self, what: &str) -> Result<u64, MeshError> {
        self.skip_space()?;
        // Fast path for the millions of labels in mesh files.
        if let Some(n) = self.plain_number_len(true).filter(|&n| n <= 18) {
            let digits = &self.bytes[self.pos..self.pos + n];
            self.pos += n;
            return Ok(digits
                .iter()
                .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0')));
        }
        match self.next_token()? {
            Token::Number(text) => parse_label(text).ok_or_else(|| {
                self.error(format!(
                    "expected {what} (a non-negative integer), found {text}"
                ))
            }),
            t => Err(self.error(format!("expected {what}, found {}", t.describe()))),
        }
    }

    /// Reads a finite floating-point number.
    #[inline]
    pub fn scalar(&mut self, what: &str) -> Result<f64, MeshError> {
        self.skip_space()?;
        if let Some(n) = self.plain_number_len(false) {
            let text = std::str::from_utf8(&self.bytes[self.pos..self.pos + n]).ok();
            if let Some(v) = text.and_then(parse_scalar) {
                self.pos += n;
                return Ok(v);
            }
        }
        match self.next_token()? {
            Token::Number(text) => parse_scalar(text)
                .ok_or_else(|| self.error(format!("expected {what}, found bad number {text}"))),
            t => Err(self.error(format!("expected {what}, found {}", t.describe()))),
        }
    }

    /// Takes `n` raw bytes starting right here (binary list contents).
    pub fn raw(&mut self, n: usize, what: &str) -> Result<&'a [u8], MeshError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.error(format!(
                "binary {what} needs {n} bytes but the file ends after {}",
                self.bytes.len() - self.pos
            )));
        };
        let block = &self.bytes[self.pos..end];
        self.line += block.iter().filter(|&&b| b == b'\n').count();
        self.pos = end;
        Ok(block)
    }

    /// Bytes left after the current position.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Fails unless only whitespace and comments are left.
    pub fn expect_eof(&mut self, after: &str) -> Result<(), MeshError> {
        match self.next_token()? {
            Token::Eof => Ok(()),
            t => Err(self.error(format!(
                "expected end of file after {after}, found {}",
                t.describe()
            ))),
        }
    }
}

impl Drop for Lexer<'_> {
    fn drop(&mut self) {
        if let Some(bar) = &self.progress {
            bar.finish_and_clear();
        }
    }
}

fn starts_number(b: &[u8]) -> bool {
    let digitish = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_digit() || *c == b'.');
    match b.first() {
        Some(c) if c.is_ascii_digit() => true,
        Some(b'.') => b.get(1).is_some_and(u8::is_ascii_digit),
        Some(b'-' | b'+') => digitish(b.get(1)),
        _ => false,
    }
}

/// A non-negative integer written in decimal, or `None`.
pub fn parse_label(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0')))
}

/// A finite number, or `None` (the lexer only passes digits, signs, '.', 'e').
pub fn parse_scalar(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(src: &str) -> Result<Vec<(Token<'_>, usize)>, MeshError> {
        let mut lx = Lexer::new(Path::new("t"), src.as_bytes(), 0, 1);
        let mut out = Vec::new();
        loop {
            let t = lx.next_token()?;
            if t == Token::Eof {
                return Ok(out);
            }
            out.push((t, lx.line()));
        }
    }

    #[test]
    fn tokens_and_lines() {
        let src = "a 1.5e-3; // c\n/* x\n y */ div(phi,U) \"s t\" -2 4(wall)";
        let t = tokens(src).unwrap();
        use Token::*;
        assert_eq!(
            t,
            vec![
                (Word("a"), 1),
                (Number("1.5e-3"), 1),
                (Punct(b';'), 1),
                (Word("div(phi,U)"), 3),
                (Str("s t"), 3),
                (Number("-2"), 3),
                (Number("4"), 3),
                (Punct(b'('), 3),
                (Word("wall"), 3),
                (Punct(b')'), 3),
            ]
        );
    }

    #[test]
    fn variables_and_code_blocks() {
        use Token::*;
        let t = tokens("${a.b}; $c #{ x\n y #} d ${_${E}}").unwrap();
        assert_eq!(
            t,
            vec![
                (Word("${a.b}"), 1),
                (Punct(b';'), 1),
                (Word("$c"), 1),
                (Verbatim(" x\n y "), 2),
                (Word("d"), 2),
                (Word("${_${E}}"), 2)
            ]
        );
    }

    #[test]
    fn bad_input_names_the_line() {
        let e = tokens("a\n12x3").unwrap_err().to_string();
        assert_eq!(e, "t:2: expected a number, found '12x3'");
        let e = tokens("a\n/* open").unwrap_err().to_string();
        assert!(e.starts_with("t:2: comment"), "{e}");
        let e = tokens("\"abc").unwrap_err().to_string();
        assert!(e.contains("never closed"), "{e}");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_label("42"), Some(42));
        assert_eq!(parse_label("-1"), None);
        assert_eq!(parse_label("1.0"), None);
        assert_eq!(parse_scalar("-1.25e2"), Some(-125.0));
        assert_eq!(parse_scalar("1e999"), None);
        assert_eq!(parse_scalar("1-2"), None);
    }
}

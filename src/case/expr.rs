//! Scalar expressions of position and time in case files, e.g.
//! `3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)`, compiled once by `exmex` and
//! evaluated per cell or face.
//!
//! Variables: `x`, `y`, `z` (position) and `t` (time). Constants: `pi`
//! (also `PI`, `π`), `E`. Operators and functions: exmex's float set
//! (`+ - * / ^`, `sin cos tan exp ln log10 sqrt abs floor min max atan2`, ...)
//! plus `step(a)` = 1 for a ≥ 0, else 0, for piecewise data such as layered
//! materials: `1 + (1e-3 - 1)*step(z - 0.5)`.

use super::setup::SpaceTimeFn;
use crate::mesh::Vec3;
use exmex::{Express, FlatEx, FloatOpsFactory, MakeOperators, MatchLiteral, Operator};

/// exmex's float operators with the constant `pi` and the function `step`.
#[derive(Clone, Debug)]
struct CaseOps;

impl MakeOperators<f64> for CaseOps {
    fn make<'a>() -> Vec<Operator<'a, f64>> {
        let mut ops = FloatOpsFactory::<f64>::make();
        ops.push(Operator::make_constant("pi", std::f64::consts::PI));
        ops.push(Operator::make_unary("step", |a| {
            if a >= 0.0 {
                1.0
            } else {
                0.0
            }
        }));
        ops
    }
}

/// Number literals with optional exponent (`1e-3`, `2.5E+4`, `.5`), which
/// exmex's default matcher lacks.
#[derive(Clone, Debug)]
struct NumberWithExponent;

impl MatchLiteral for NumberWithExponent {
    fn is_literal(text: &str) -> Option<&str> {
        let bytes = text.as_bytes();
        let digits_from = |i: usize| bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let mut end = digits_from(0);
        let mut n_digits = end;
        if bytes.get(end) == Some(&b'.') {
            let fraction = digits_from(end + 1);
            n_digits += fraction;
            end += 1 + fraction;
        }
        if n_digits == 0 {
            return None;
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
            let exponent = digits_from(end + 1 + sign);
            if exponent > 0 {
                end += 1 + sign + exponent;
            }
        }
        Some(&text[..end])
    }
}

type CaseExpr = FlatEx<f64, CaseOps, NumberWithExponent>;

/// The variables an expression may use, in the order `eval` takes them.
const VARIABLES: [&str; 4] = ["x", "y", "z", "t"];

/// Longest expression compiled, in bytes: exmex's parse time grows faster
/// than the length (100 000 terms took 54 s), so the length is bounded; a
/// field that needs more is data, to be given per cell.
pub const MAX_EXPRESSION_BYTES: usize = 10_000;

/// Deepest nesting of parentheses: exmex parses them recursively, so the
/// depth bounds its stack.
pub const MAX_EXPRESSION_DEPTH: usize = 64;

/// Compiles `text`; the error message names the expression and what is wrong
/// (the caller adds the file, line and key).
pub fn compile(text: &str) -> Result<SpaceTimeFn, String> {
    let quoted = crate::limits::quote(text);
    if text.len() > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "expression '{quoted}' is longer than the {MAX_EXPRESSION_BYTES} bytes allowed; \
             give long data per cell instead"
        ));
    }
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_EXPRESSION_DEPTH {
            return Err(format!(
                "expression '{quoted}' nests parentheses deeper than {MAX_EXPRESSION_DEPTH} levels"
            ));
        }
    }
    // Long expressions may span lines (TOML multi-line strings); exmex wants one.
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let expr = CaseExpr::parse(&one_line)
        .map_err(|e| format!("cannot parse expression '{quoted}': {}", e.msg()))?;
    // exmex takes variable values in the alphabetical order of the names used.
    let mut slots = Vec::new();
    for name in expr.var_names() {
        match VARIABLES.iter().position(|v| v == name) {
            Some(slot) => slots.push(slot),
            None => {
                return Err(format!(
                    "expression '{quoted}' uses unknown variable '{}' \
                     (known: x, y, z, t and the constants pi, E)",
                    crate::limits::quote(name)
                ))
            }
        }
    }
    let text_owned = text.to_string();
    // Check once that it evaluates (e.g. arity errors exmex finds only then).
    let probe = [0.0; 4];
    let values: Vec<f64> = slots.iter().map(|&s| probe[s]).collect();
    expr.eval(&values)
        .map_err(|e| format!("cannot evaluate expression '{quoted}': {}", e.msg()))?;
    Ok(SpaceTimeFn::new(text_owned, move |p: Vec3, t: f64| {
        let all = [p.x, p.y, p.z, t];
        let mut values = [0.0; VARIABLES.len()];
        for (value, &slot) in values.iter_mut().zip(&slots) {
            *value = all[slot];
        }
        // Checked above: a failure now can only be arithmetic, reported as NaN
        // and refused by the finite-value checks of the discretisation.
        expr.eval(&values[..slots.len()]).unwrap_or(f64::NAN)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_constants_and_step() {
        let f = compile("3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z) + t").unwrap();
        let p = Vec3::new(0.5, 0.5, 0.5);
        let want = 3.0 * std::f64::consts::PI.powi(2) + 2.0;
        assert!((f.eval(p, 2.0) - want).abs() < 1e-12);
        // Variables in any order and subset: z alone, then y before x.
        let f = compile("z - 2*y + 10*x").unwrap();
        assert_eq!(f.eval(Vec3::new(1.0, 2.0, 3.0), 0.0), 9.0);
        let step = compile("1 + (1e-3 - 1)*step(z - 0.5)").unwrap();
        assert_eq!(step.eval(Vec3::new(0.0, 0.0, 0.25), 0.0), 1.0);
        assert!((step.eval(Vec3::new(0.0, 0.0, 0.75), 0.0) - 1e-3).abs() < 1e-15);
        for (text, want) in [
            ("2", 2.0),
            ("1e-3", 1e-3),
            ("2.5E+2*x", 125.0),
            (".5", 0.5),
            ("3.", 3.0),
        ] {
            assert_eq!(compile(text).unwrap().eval(p, 0.0), want, "{text}");
        }
        // `E` alone is Euler's number, after a number it is an exponent only with digits.
        assert!((compile("2*E").unwrap().eval(p, 0.0) - 2.0 * std::f64::consts::E).abs() < 1e-15);
    }

    #[test]
    fn errors_name_the_expression() {
        let err = compile("sin(pi*x").unwrap_err();
        assert!(err.contains("'sin(pi*x'"), "{err}");
        let err = compile("x + w").unwrap_err();
        assert!(err.contains("unknown variable 'w'"), "{err}");
        assert!(compile("x +* y").is_err());
        assert!(compile("").is_err());
    }

    #[test]
    fn long_and_deep_expressions_are_refused_quickly() {
        // 100 000 terms took 54 s to parse; refused before parsing now.
        let long = vec!["x"; 100_000].join("+");
        let clock = std::time::Instant::now();
        let err = compile(&long).unwrap_err();
        assert!(clock.elapsed().as_secs_f64() < 1.0);
        assert!(err.contains("longer than the 10000 bytes"), "{err}");
        assert!(
            err.len() < 300,
            "the expression is not echoed whole: {}",
            err.len()
        );
        let deep = format!("{}x{}", "(".repeat(100), ")".repeat(100));
        let err = compile(&deep).unwrap_err();
        assert!(err.contains("deeper than 64"), "{err}");
        // The largest allowed expression parses in well under a second.
        let most = vec!["x"; MAX_EXPRESSION_BYTES / 2].join("+");
        let clock = std::time::Instant::now();
        assert!(compile(&most).is_ok());
        assert!(clock.elapsed().as_secs_f64() < 2.0, "{:?}", clock.elapsed());
    }
}

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

/// Compiles `text`; the error message names the expression and what is wrong
/// (the caller adds the file, line and key).
pub fn compile(text: &str) -> Result<SpaceTimeFn, String> {
    // Long expressions may span lines (TOML multi-line strings); exmex wants one.
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let expr = CaseExpr::parse(&one_line)
        .map_err(|e| format!("cannot parse expression '{text}': {}", e.msg()))?;
    // exmex takes variable values in the alphabetical order of the names used.
    let mut slots = Vec::new();
    for name in expr.var_names() {
        match VARIABLES.iter().position(|v| v == name) {
            Some(slot) => slots.push(slot),
            None => {
                return Err(format!(
                    "expression '{text}' uses unknown variable '{name}' \
                     (known: x, y, z, t and the constants pi, E)"
                ))
            }
        }
    }
    let text_owned = text.to_string();
    // Check once that it evaluates (e.g. arity errors exmex finds only then).
    let probe = [0.0; 4];
    let values: Vec<f64> = slots.iter().map(|&s| probe[s]).collect();
    expr.eval(&values)
        .map_err(|e| format!("cannot evaluate expression '{text}': {}", e.msg()))?;
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
}

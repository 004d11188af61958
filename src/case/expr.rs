//! Scalar expressions of position and time in case files, e.g.
//! `3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)`, compiled once into postfix
//! operations and evaluated per cell or face. Operations on numbers alone
//! are folded while compiling (`3*pi^2` is one number: the value evaluation
//! would compute, bit for bit), and the evaluation keeps its value stack in
//! a local array, so that a cell costs its variables' operations only.
//!
//! Variables: `x`, `y`, `z` (position) and `t` (time). Constants: `pi`
//! (also `PI`, `π`), `E` (also `e`), `TAU` (`τ`). Operators `+ - * / ^` with
//! the usual precedence: `^` binds tightest and groups to the right (`2^3^2`
//! is 2⁹), then the signs (`-x^2` is −(x²), `2^-x` is 2^(−x)), then `* /`,
//! then `+ -`, both grouping to the left. Functions of one argument: `abs
//! signum sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh floor
//! round ceil trunc fract exp sqrt cbrt ln log (= ln) log2 log10` and `step(a)`
//! = 1 for a ≥ 0, else 0, for piecewise data such as layered materials:
//! `1 + (1e-3 - 1)*step(z - 0.5)`; of two: `min(a, b)`, `max(a, b)`,
//! `atan2(y, x)`.
//!
//! The parser is Dijkstra's shunting-yard algorithm: one pass over the text
//! with an explicit operator stack, each token pushed and popped at most
//! once, so parse time is linear in the length (and no recursion: nesting
//! cannot overflow the thread's stack). Expressions are bounded all the same
//! ([`MAX_EXPRESSION_BYTES`], [`MAX_EXPRESSION_DEPTH`]): a field that needs
//! more is data, to be given per cell.

use std::cell::RefCell;

use super::setup::SpaceTimeFn;
use crate::mesh::Vec3;

/// Longest expression compiled, in bytes (1 MB: about 200 000 terms, which
/// compile in well under a second).
pub const MAX_EXPRESSION_BYTES: usize = 1_000_000;

/// Deepest nesting of parentheses (function calls included).
pub const MAX_EXPRESSION_DEPTH: usize = 64;

/// The variables an expression may use, in the order of [`Program::eval`]'s
/// values.
const VARIABLES: [&str; 4] = ["x", "y", "z", "t"];

const CONSTANTS: [(&str, f64); 7] = [
    ("pi", std::f64::consts::PI),
    ("PI", std::f64::consts::PI),
    ("π", std::f64::consts::PI),
    ("E", std::f64::consts::E),
    ("e", std::f64::consts::E),
    ("TAU", std::f64::consts::TAU),
    ("τ", std::f64::consts::TAU),
];

fn step(a: f64) -> f64 {
    if a >= 0.0 {
        1.0
    } else {
        0.0
    }
}

/// A function of one argument.
type UnaryFn = fn(f64) -> f64;
/// A function of two arguments.
type BinaryFn = fn(f64, f64) -> f64;

const UNARY_FUNCTIONS: [(&str, UnaryFn); 27] = [
    ("abs", f64::abs),
    ("signum", f64::signum),
    ("sin", f64::sin),
    ("cos", f64::cos),
    ("tan", f64::tan),
    ("asin", f64::asin),
    ("acos", f64::acos),
    ("atan", f64::atan),
    ("sinh", f64::sinh),
    ("cosh", f64::cosh),
    ("tanh", f64::tanh),
    ("asinh", f64::asinh),
    ("acosh", f64::acosh),
    ("atanh", f64::atanh),
    ("floor", f64::floor),
    ("round", f64::round),
    ("ceil", f64::ceil),
    ("trunc", f64::trunc),
    ("fract", f64::fract),
    ("exp", f64::exp),
    ("sqrt", f64::sqrt),
    ("cbrt", f64::cbrt),
    ("ln", f64::ln),
    ("log", f64::ln),
    ("log2", f64::log2),
    ("log10", f64::log10),
    ("step", step),
];

const BINARY_FUNCTIONS: [(&str, BinaryFn); 3] =
    [("min", f64::min), ("max", f64::max), ("atan2", f64::atan2)];

/// One postfix operation: values push, operators pop their operands and
/// push the result.
#[derive(Clone, Copy)]
enum Op {
    Number(f64),
    Variable(usize),
    Negate,
    Add,
    Subtract,
    Multiply,
    Divide,
    Power,
    Unary(fn(f64) -> f64),
    Binary(fn(f64, f64) -> f64),
}

impl Op {
    /// Change of the value stack's depth.
    fn stack_change(self) -> isize {
        match self {
            Op::Number(_) | Op::Variable(_) => 1,
            Op::Negate | Op::Unary(_) => 0,
            _ => -1,
        }
    }
}

/// An operator waiting on the parser's stack for its right operand.
#[derive(Clone, Copy)]
enum Pending {
    /// A binary operator with its precedence.
    Binary(Op, u8),
    /// Unary minus (`Some(Negate)`) or plus (`None`).
    Sign(Option<Op>),
    /// `(`: of a call of `function` with `args` arguments so far, or a group.
    Open {
        function: Option<(&'static str, Function)>,
        args: usize,
        at: usize,
    },
}

#[derive(Clone, Copy)]
enum Function {
    Unary(fn(f64) -> f64),
    Binary(fn(f64, f64) -> f64),
}

/// Precedence of the signs: below `^`, above `*` and `/`.
const SIGN_PRECEDENCE: u8 = 3;
const POWER_PRECEDENCE: u8 = 4;

impl Pending {
    /// Precedence of an operator (`None` for `(`, which nothing pops past).
    fn precedence(self) -> Option<u8> {
        match self {
            Pending::Binary(_, p) => Some(p),
            Pending::Sign(_) => Some(SIGN_PRECEDENCE),
            Pending::Open { .. } => None,
        }
    }
}

/// The compiled expression: postfix operations and the deepest value stack
/// they need.
struct Program {
    ops: Vec<Op>,
    max_depth: usize,
}

/// Deepest value stack [`Program::eval`] keeps in an array on the thread's
/// stack; deeper programs use [`STACK`].
const INLINE_STACK: usize = 32;

thread_local! {
    /// The value stack of [`Program::eval`] for programs deeper than
    /// [`INLINE_STACK`], kept between evaluations.
    static STACK: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl Program {
    /// The value at `values` (x, y, z, t). Called once per cell or face, so
    /// the common program keeps its stack in a local array: no thread-local
    /// look-up, borrow or capacity check per evaluation.
    fn eval(&self, values: &[f64; VARIABLES.len()]) -> f64 {
        if self.max_depth <= INLINE_STACK {
            self.run(&mut [0.0; INLINE_STACK], values)
        } else {
            STACK.with(|stack| {
                let mut stack = stack.borrow_mut();
                stack.resize(self.max_depth, 0.0);
                self.run(&mut stack, values)
            })
        }
    }

    /// Runs the operations on `stack` (at least `max_depth` long).
    fn run(&self, stack: &mut [f64], values: &[f64; VARIABLES.len()]) -> f64 {
        // The parser checked every operator's operands and counted the
        // deepest stack: `top` stays within 1..=max_depth after each value.
        let mut top = 0;
        for &op in &self.ops {
            match op {
                Op::Number(v) => {
                    stack[top] = v;
                    top += 1;
                }
                Op::Variable(i) => {
                    stack[top] = values[i];
                    top += 1;
                }
                Op::Negate => stack[top - 1] = -stack[top - 1],
                Op::Unary(f) => stack[top - 1] = f(stack[top - 1]),
                Op::Add | Op::Subtract | Op::Multiply | Op::Divide | Op::Power | Op::Binary(_) => {
                    top -= 1;
                    let b = stack[top];
                    let a = &mut stack[top - 1];
                    *a = binary(op, *a, b);
                }
            }
        }
        stack[0]
    }
}

/// `a op b` for a binary operation.
fn binary(op: Op, a: f64, b: f64) -> f64 {
    match op {
        Op::Add => a + b,
        Op::Subtract => a - b,
        Op::Multiply => a * b,
        Op::Divide => a / b,
        Op::Power => a.powf(b),
        Op::Binary(f) => f(a, b),
        Op::Number(_) | Op::Variable(_) | Op::Negate | Op::Unary(_) => {
            unreachable!("values and unary operators take no two operands")
        }
    }
}

/// A token of an expression, with its byte offset.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Token<'a> {
    Number(f64),
    Name(&'a str),
    Symbol(char),
}

/// Splits `text` into tokens without copying it.
struct Tokens<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Tokens<'a> {
    /// The next token and its byte offset; `Err(offset)` at a character that
    /// starts no token.
    fn next_token(&mut self) -> Option<Result<(Token<'a>, usize), usize>> {
        let rest = &self.text[self.at..];
        let skipped = rest.len() - rest.trim_start().len();
        self.at += skipped;
        let start = self.at;
        let rest = &self.text[start..];
        let c = rest.chars().next()?;
        let (token, len) = if c.is_ascii_digit() || c == '.' {
            match number_length(rest.as_bytes()) {
                0 => return Some(Err(start)),
                len => match rest[..len].parse() {
                    Ok(v) => (Token::Number(v), len),
                    Err(_) => return Some(Err(start)),
                },
            }
        } else if c.is_alphabetic() || c == '_' {
            let len = rest
                .char_indices()
                .find(|&(_, c)| !(c.is_alphanumeric() || c == '_'))
                .map_or(rest.len(), |(i, _)| i);
            (Token::Name(&rest[..len]), len)
        } else if "+-*/^(),".contains(c) {
            (Token::Symbol(c), 1)
        } else {
            return Some(Err(start));
        };
        self.at += len;
        Some(Ok((token, start)))
    }
}

/// Length of the number literal at the start of `bytes`: digits with an
/// optional fraction (`1`, `2.5`, `.5`, `3.`) and exponent (`1e-3`,
/// `2.5E+4`; an `e` without digits after it is not part of the number);
/// 0 where there are no digits.
fn number_length(bytes: &[u8]) -> usize {
    let digits_from = |i: usize| {
        bytes
            .get(i..)
            .map_or(0, |b| b.iter().take_while(|b| b.is_ascii_digit()).count())
    };
    let mut end = digits_from(0);
    let mut n_digits = end;
    if bytes.get(end) == Some(&b'.') {
        let fraction = digits_from(end + 1);
        n_digits += fraction;
        end += 1 + fraction;
    }
    if n_digits == 0 {
        return 0;
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
        let exponent = digits_from(end + 1 + sign);
        if exponent > 0 {
            end += 1 + sign + exponent;
        }
    }
    end
}

/// The parser's output and stacks.
struct Parser<'a> {
    text: &'a str,
    ops: Vec<Op>,
    pending: Vec<Pending>,
    depth: isize,
    max_depth: usize,
    open: usize,
}

impl<'a> Parser<'a> {
    /// Appends `op`, folding it into one number where its operands are
    /// numbers (`3*pi^2` is one value, computed once here instead of per
    /// cell). The folded value is the one evaluation would compute, bit for
    /// bit: the same operation on the same operands.
    fn emit(&mut self, op: Op) {
        self.depth += op.stack_change();
        self.max_depth = self.max_depth.max(self.depth.max(0) as usize);
        let n = self.ops.len();
        let folded = match (op, &self.ops[n.saturating_sub(2)..]) {
            (Op::Negate, [.., Op::Number(a)]) => Some((1, -a)),
            (Op::Unary(f), [.., Op::Number(a)]) => Some((1, f(*a))),
            (
                Op::Add | Op::Subtract | Op::Multiply | Op::Divide | Op::Power | Op::Binary(_),
                [Op::Number(a), Op::Number(b)],
            ) => Some((2, binary(op, *a, *b))),
            _ => None,
        };
        match folded {
            Some((operands, value)) => {
                self.ops.truncate(n - operands);
                self.ops.push(Op::Number(value));
            }
            None => self.ops.push(op),
        }
    }

    /// Emits the pending operator `p` (not an `(`).
    fn emit_pending(&mut self, p: Pending) {
        match p {
            Pending::Binary(op, _) | Pending::Sign(Some(op)) => self.emit(op),
            Pending::Sign(None) | Pending::Open { .. } => {}
        }
    }

    /// Emits the operators above the innermost `(` that bind at least as
    /// tightly as an operator of precedence `precedence` (more tightly, for
    /// the right-grouping `^`).
    fn pop_while_tighter(&mut self, precedence: u8, right_grouping: bool) {
        while let Some(&top) = self.pending.last() {
            match top.precedence() {
                Some(p) if p > precedence || (p == precedence && !right_grouping) => {
                    self.pending.pop();
                    self.emit_pending(top);
                }
                _ => break,
            }
        }
    }

    /// Opens a `(` at byte `at`: a call of `function`, or a group.
    fn open_parenthesis(
        &mut self,
        function: Option<(&'static str, Function)>,
        at: usize,
    ) -> Result<(), String> {
        self.open += 1;
        if self.open > MAX_EXPRESSION_DEPTH {
            return Err(format!(
                "parentheses nest deeper than {MAX_EXPRESSION_DEPTH} levels"
            ));
        }
        self.pending.push(Pending::Open {
            function,
            args: 1,
            at,
        });
        Ok(())
    }

    /// Emits the operators above the innermost `(`, and pops it.
    fn close(&mut self) -> Option<Pending> {
        while let Some(top) = self.pending.pop() {
            if let Pending::Open { .. } = top {
                self.open -= 1;
                return Some(top);
            }
            self.emit_pending(top);
        }
        None
    }

    /// An error at byte `at`, naming the character position.
    fn error(&self, at: usize, what: &str) -> String {
        let position = self.text[..at.min(self.text.len())].chars().count() + 1;
        format!("{what} at character {position}")
    }
}

/// Parses `text` into postfix operations; the error says what is wrong where.
fn parse(text: &str) -> Result<Program, String> {
    let mut parser = Parser {
        text,
        ops: Vec::new(),
        pending: Vec::new(),
        depth: 0,
        max_depth: 0,
        open: 0,
    };
    let mut tokens = Tokens { text, at: 0 };
    // Whether a value (number, name, call, group or sign) comes next.
    let mut want_value = true;
    while let Some(token) = tokens.next_token() {
        let (token, at) = token.map_err(|at| {
            let c = text[at..].chars().next().unwrap_or(' ');
            parser.error(at, &format!("unexpected '{}'", c.escape_default()))
        })?;
        match (want_value, token) {
            (true, Token::Number(v)) => {
                parser.emit(Op::Number(v));
                want_value = false;
            }
            (true, Token::Name(name)) => {
                let rest = text[tokens.at..].trim_start();
                if rest.starts_with('(') {
                    let function = UNARY_FUNCTIONS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|&(n, f)| (n, Function::Unary(f)))
                        .or_else(|| {
                            BINARY_FUNCTIONS
                                .iter()
                                .find(|(n, _)| *n == name)
                                .map(|&(n, f)| (n, Function::Binary(f)))
                        })
                        .ok_or_else(|| {
                            parser.error(
                                at,
                                &format!("unknown function '{}'", crate::limits::quote(name)),
                            )
                        })?;
                    // The '(' itself: the call opens here.
                    let open = tokens.next_token();
                    debug_assert!(matches!(open, Some(Ok((Token::Symbol('('), _)))));
                    parser.open_parenthesis(Some(function), at)?;
                } else if let Some(i) = VARIABLES.iter().position(|v| *v == name) {
                    parser.emit(Op::Variable(i));
                    want_value = false;
                } else if let Some(&(_, v)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
                    parser.emit(Op::Number(v));
                    want_value = false;
                } else {
                    return Err(format!(
                        "unknown variable '{}' (known: x, y, z, t and the constants pi, E)",
                        crate::limits::quote(name)
                    ));
                }
            }
            (true, Token::Symbol('(')) => {
                parser.open_parenthesis(None, at)?;
            }
            (true, Token::Symbol('-')) => parser.pending.push(Pending::Sign(Some(Op::Negate))),
            (true, Token::Symbol('+')) => parser.pending.push(Pending::Sign(None)),
            (true, Token::Symbol(c)) => {
                return Err(parser.error(at, &format!("expected a value, found '{c}'")))
            }
            (false, Token::Symbol(c @ ('+' | '-' | '*' | '/' | '^'))) => {
                let (op, precedence) = match c {
                    '+' => (Op::Add, 1),
                    '-' => (Op::Subtract, 1),
                    '*' => (Op::Multiply, 2),
                    '/' => (Op::Divide, 2),
                    _ => (Op::Power, POWER_PRECEDENCE),
                };
                parser.pop_while_tighter(precedence, c == '^');
                parser.pending.push(Pending::Binary(op, precedence));
                want_value = true;
            }
            (false, Token::Symbol(',')) => match parser.close() {
                Some(Pending::Open {
                    function: Some(function),
                    args,
                    at,
                }) => {
                    parser.open += 1;
                    parser.pending.push(Pending::Open {
                        function: Some(function),
                        args: args + 1,
                        at,
                    });
                    want_value = true;
                }
                _ => return Err(parser.error(at, "',' outside a function's arguments")),
            },
            (false, Token::Symbol(')')) => match parser.close() {
                Some(Pending::Open {
                    function: Some((name, function)),
                    args,
                    at,
                }) => {
                    let (op, arity) = match function {
                        Function::Unary(f) => (Op::Unary(f), 1),
                        Function::Binary(f) => (Op::Binary(f), 2),
                    };
                    if args != arity {
                        return Err(parser
                            .error(at, &format!("{name} takes {arity} argument(s), not {args}")));
                    }
                    parser.emit(op);
                }
                Some(_) => {}
                None => return Err(parser.error(at, "')' without its '('")),
            },
            (false, token) => {
                let found = match token {
                    Token::Number(_) => "a number".to_string(),
                    Token::Name(name) => format!("'{}'", crate::limits::quote(name)),
                    Token::Symbol(c) => format!("'{c}'"),
                };
                return Err(parser.error(at, &format!("expected an operator, found {found}")));
            }
        }
    }
    if want_value {
        return Err(parser.error(text.len(), "expected a value"));
    }
    while let Some(top) = parser.pending.pop() {
        if let Pending::Open { at, .. } = top {
            return Err(parser.error(at, "'(' without its ')'"));
        }
        parser.emit_pending(top);
    }
    Ok(Program {
        ops: parser.ops,
        max_depth: parser.max_depth,
    })
}

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
    let program = parse(text).map_err(|e| format!("cannot parse expression '{quoted}': {e}"))?;
    Ok(SpaceTimeFn::new(text, move |p: Vec3, t: f64| {
        program.eval(&[p.x, p.y, p.z, t])
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

    /// Operations on numbers alone are folded into one number at compile
    /// time, and the values are those of the same operations in the same
    /// order, bit for bit (the MMS source of `cases/mms_cube`).
    #[test]
    fn constants_are_folded_to_the_same_bits() {
        use std::f64::consts::PI;
        let text = "3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)";
        // 3*pi^2 is one number; pi*x, sin and the products stay per point.
        assert_eq!(parse(text).unwrap().ops.len(), 1 + 3 * 5);
        assert_eq!(parse("-(2^3) + cos(0)*min(4, 2)").unwrap().ops.len(), 1);
        // x*2*3 is (x*2)*3: not folded across the variable.
        assert_eq!(parse("x*2*3").unwrap().ops.len(), 5);
        let f = compile(text).unwrap();
        let mut rng = crate::sparse::testing::SplitMix(9);
        for _ in 0..1000 {
            let p = Vec3::new(rng.next_f64(), rng.next_f64(), rng.next_f64());
            let want = 3.0 * PI.powf(2.0) * (PI * p.x).sin() * (PI * p.y).sin() * (PI * p.z).sin();
            assert_eq!(f.eval(p, 0.0).to_bits(), want.to_bits(), "{p:?}");
        }
        assert_eq!(
            compile("-(2^3) + cos(0)*min(4, 2)")
                .unwrap()
                .eval(Vec3::zeros(), 0.0),
            -6.0
        );
        // Deeper than the inline stack: the thread's stack of values.
        let deep = format!("{}x{}", "(1 + ".repeat(40), ")".repeat(40));
        assert!(parse(&deep).unwrap().max_depth > INLINE_STACK);
        assert_eq!(
            compile(&deep).unwrap().eval(Vec3::new(2.0, 0.0, 0.0), 0.0),
            42.0
        );
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
    fn precedence_grouping_and_functions() {
        let at = |text: &str| compile(text).unwrap().eval(Vec3::new(1.0, 2.0, 3.0), 4.0);
        for (text, want) in [
            ("-2^2", -4.0),
            ("2^3^2", 512.0),
            ("2^-1", 0.5),
            ("-x*y", -2.0),
            ("x*-y", -2.0),
            ("--x", 1.0),
            ("+x - -y", 3.0),
            ("1-2-3", -4.0),
            ("8/4/2", 1.0),
            ("2*3+4*5", 26.0),
            ("(1 + 2) * (3 + t)", 21.0),
            ("min(max(z, 0), 0.25) + max(x, y)", 2.25),
            ("atan2(1, 1)*4", std::f64::consts::PI),
            ("log10(100) + log2(8) + ln(e) + log(1)", 6.0),
            ("step(x - 1) + step(-1e-300) + sqrt(abs(-16))", 5.0),
            ("TAU - 2*π + τ - 2*PI", 0.0),
            ("\n  x\n+\ty  ", 3.0),
        ] {
            assert!((at(text) - want).abs() < 1e-12, "{text}: {}", at(text));
        }
        for (text, want) in [
            ("sin(1, 2)", "sin takes 1 argument(s), not 2 at character 1"),
            ("min(1)", "min takes 2 argument(s), not 1"),
            ("1, 2", "',' outside a function's arguments at character 2"),
            ("(x))", "')' without its '(' at character 4"),
            ("((x)", "'(' without its ')' at character 1"),
            ("foo(x)", "unknown function 'foo'"),
            ("2x", "expected an operator, found 'x' at character 2"),
            ("x $ y", "unexpected '$' at character 3"),
            ("sin()", "expected a value, found ')'"),
            ("x +", "expected a value at character 4"),
            (".", "unexpected '.'"),
        ] {
            let err = compile(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.starts_with("cannot parse expression '"), "{err}");
        }
    }

    /// Parsing is linear in the length (was: 100 000 terms in 54 s): 100 000
    /// terms parse in well under a second, also in a debug build on a
    /// loaded machine, and evaluate to the sum of their terms.
    #[test]
    fn long_expressions_parse_in_linear_time() {
        let terms = ["x", "2*y", "-z/4", "t^2", "sin(pi*x/2)", "(x - y)"];
        let long: Vec<&str> = (0..100_000).map(|i| terms[i % terms.len()]).collect();
        let text = long.join(" + ");
        assert!(text.len() < MAX_EXPRESSION_BYTES, "{}", text.len());
        let clock = std::time::Instant::now();
        let f = compile(&text).unwrap();
        let took = clock.elapsed();
        assert!(took.as_secs_f64() < 2.0, "{took:?}");
        let (x, y, z, t) = (1.0, 2.0, 4.0, 3.0);
        let one_of_each = x + 2.0 * y - z / 4.0 + t * t + 1.0 + (x - y);
        let want = one_of_each * (100_000 / terms.len()) as f64 + x + 2.0 * y - z / 4.0 + t * t;
        let got = f.eval(Vec3::new(x, y, z), t);
        assert!((got - want).abs() < 1e-9 * want.abs(), "{got} vs {want}");
        // A million signs (an odd count): no recursion, no stack overflow.
        let signs = format!("{}x", "-".repeat(MAX_EXPRESSION_BYTES - 1));
        assert_eq!(
            compile(&signs).unwrap().eval(Vec3::new(5.0, 0.0, 0.0), 0.0),
            -5.0
        );
    }

    #[test]
    fn long_and_deep_expressions_are_refused_quickly() {
        let long = vec!["x"; MAX_EXPRESSION_BYTES / 2 + 1].join("+");
        let clock = std::time::Instant::now();
        let err = compile(&long).unwrap_err();
        assert!(clock.elapsed().as_secs_f64() < 1.0);
        assert!(err.contains("longer than the 1000000 bytes"), "{err}");
        assert!(
            err.len() < 300,
            "the expression is not echoed whole: {}",
            err.len()
        );
        let deep = format!("{}x{}", "(".repeat(100), ")".repeat(100));
        let err = compile(&deep).unwrap_err();
        assert!(err.contains("deeper than 64"), "{err}");
        let err = compile(&format!("{}x", "sin(".repeat(65))).unwrap_err();
        assert!(err.contains("deeper than 64"), "{err}");
        // A megabyte of '(' is refused at the 65th, without a stack overflow.
        let err = compile(&"(".repeat(MAX_EXPRESSION_BYTES)).unwrap_err();
        assert!(err.contains("deeper than 64") && err.len() < 300, "{err}");
        let most = format!("{}x{}", "(".repeat(64), ")".repeat(64));
        assert_eq!(
            compile(&most).unwrap().eval(Vec3::new(7.0, 0.0, 0.0), 0.0),
            7.0
        );
    }
}

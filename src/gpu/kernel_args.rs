//! Kernel arguments checked against the kernel's declaration.
//!
//! A kernel's signature is written once, in its `.cu` source
//! (`extern "C" __global__ void NAME(params)`, or a kernel template's
//! `__global__ void NAME(params)` whose instances read `T` as their type,
//! [`instantiate`]); the loader reads each parameter's C type from it
//! ([`parse_parameters`]). Every launch pushes its
//! arguments through [`KernelArgs`], which records the C type each Rust
//! argument stands for ([`KernelArg`]); [`check_arguments`] then compares the
//! two lists before the launch, so a missing, extra or swapped argument is an
//! error naming the kernel and the argument, not a device fault
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`) somewhere later in the stream.
//!
//! What is compared: the number of arguments, and per argument whether it is
//! a pointer and its element type up to the signedness of integers (`int`
//! for `unsigned`, as the two share size and layout). Constness is not (a
//! `&CudaSlice` may feed a non-const pointer), and a `u64` value is accepted
//! for any pointer (a device address, or [`super::NULL`] for an optional
//! buffer).

use std::fmt;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchArgs, PushKernelArg};

/// A C scalar type of the kernel sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CType {
    Double,
    Float,
    Int,
    Unsigned,
    /// `u64` (`unsigned long long`).
    U64,
    LongLong,
    UChar,
}

impl CType {
    fn from_words(words: &[&str]) -> Option<Self> {
        Some(match words {
            ["double"] => Self::Double,
            ["float"] => Self::Float,
            ["int"] => Self::Int,
            ["unsigned"] | ["unsigned", "int"] => Self::Unsigned,
            ["u64"] | ["unsigned", "long", "long"] => Self::U64,
            ["long", "long"] => Self::LongLong,
            ["unsigned", "char"] => Self::UChar,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Double => "double",
            Self::Float => "float",
            Self::Int => "int",
            Self::Unsigned => "unsigned",
            Self::U64 => "u64",
            Self::LongLong => "long long",
            Self::UChar => "unsigned char",
        }
    }
}

/// A kernel parameter's type: a value or a pointer to elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Value(CType),
    Pointer(CType),
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Value(t) => write!(f, "{}", t.name()),
            Self::Pointer(t) => write!(f, "{}*", t.name()),
        }
    }
}

/// The parameter types of a kernel declaration's parameter list (the text
/// between its parentheses, comments allowed), or the parameter that is not
/// of a known type.
pub fn parse_parameters(list: &str) -> Result<Vec<ParamType>, String> {
    let list = strip_comments(list);
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|param| {
            let spaced = param.replace('*', " * ");
            let mut words: Vec<&str> = spaced
                .split_whitespace()
                .filter(|w| !matches!(*w, "const" | "__restrict__" | "volatile"))
                .collect();
            // The last word is the parameter's name.
            words.pop();
            let pointers = words.iter().filter(|w| **w == "*").count();
            words.retain(|w| *w != "*");
            let ty = CType::from_words(&words);
            match (ty, pointers) {
                (Some(t), 0) => Ok(ParamType::Value(t)),
                (Some(t), 1) => Ok(ParamType::Pointer(t)),
                _ => Err(format!(
                    "parameter '{}' is not of a known type",
                    param.trim()
                )),
            }
        })
        .collect()
}

/// A kernel template's parameter list (`list`) for one instance: each
/// whole word `param` (the template's type parameter, `T`) read as `ty`
/// (`double`), so [`parse_parameters`] reads the instance's types.
pub fn instantiate(list: &str, param: &str, ty: &str) -> String {
    let mut out = String::with_capacity(list.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if word == param { ty } else { word });
        word.clear();
    };
    for c in list.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `text` without its `//` and `/* */` comments.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |end| &after[end..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |end| &after[end + 2..]);
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// A Rust value a kernel takes as an argument, with the C type it stands for.
pub trait KernelArg {
    /// The parameter type this argument fills.
    const PARAM: ParamType;
}

/// A Rust element type and its C name.
pub trait KernelElement {
    const C: CType;
}

macro_rules! elements {
    ($($rust:ty => $c:ident),* $(,)?) => {
        $(
            impl KernelElement for $rust {
                const C: CType = CType::$c;
            }
        )*
    };
}

elements!(f64 => Double, f32 => Float, i32 => Int, u32 => Unsigned, u64 => U64, i64 => LongLong, u8 => UChar);

impl<T: KernelElement> KernelArg for &T {
    const PARAM: ParamType = ParamType::Value(T::C);
}
impl<T: KernelElement> KernelArg for &CudaSlice<T> {
    const PARAM: ParamType = ParamType::Pointer(T::C);
}
impl<T: KernelElement> KernelArg for &mut CudaSlice<T> {
    const PARAM: ParamType = ParamType::Pointer(T::C);
}
impl<T: KernelElement> KernelArg for &CudaView<'_, T> {
    const PARAM: ParamType = ParamType::Pointer(T::C);
}
impl<T: KernelElement> KernelArg for &mut CudaViewMut<'_, T> {
    const PARAM: ParamType = ParamType::Pointer(T::C);
}

/// The most arguments a kernel of the sources takes, with room to spare.
const MAX_ARGUMENTS: usize = 48;

/// A launch's arguments: cudarc's builder, with the parameter type of every
/// argument pushed so far.
pub struct KernelArgs<'a> {
    launch: LaunchArgs<'a>,
    given: [Option<ParamType>; MAX_ARGUMENTS],
    count: usize,
}

impl<'a> KernelArgs<'a> {
    pub(super) fn new(launch: LaunchArgs<'a>) -> Self {
        Self {
            launch,
            given: [None; MAX_ARGUMENTS],
            count: 0,
        }
    }

    /// Pushes the next argument.
    pub fn arg<T: KernelArg>(&mut self, value: T) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<T>,
    {
        if let Some(slot) = self.given.get_mut(self.count) {
            *slot = Some(T::PARAM);
        }
        self.count += 1;
        self.launch.arg(value);
        self
    }

    /// The parameter types of the arguments pushed (`None` past
    /// [`MAX_ARGUMENTS`], which [`check_arguments`] reports as too many).
    pub(super) fn given(&self) -> (&[Option<ParamType>], usize) {
        (&self.given[..self.count.min(MAX_ARGUMENTS)], self.count)
    }

    pub(super) fn into_launch(self) -> LaunchArgs<'a> {
        self.launch
    }
}

/// `push` as it stands, for arguments that several launches begin with:
/// bound to one launch lifetime `'a`, so that it may borrow the caller's
/// locals (a closure with its argument written `&mut KernelArgs<'_>` would
/// have to push arguments that live for any lifetime).
pub fn shared_args<'a, F: Fn(&mut KernelArgs<'a>)>(push: F) -> F {
    push
}

impl CType {
    /// The type with the signedness of integers dropped: `int` and
    /// `unsigned`, `long long` and `u64` have one size and one layout.
    fn layout(self) -> Self {
        match self {
            Self::Unsigned => Self::Int,
            Self::LongLong => Self::U64,
            t => t,
        }
    }
}

/// Whether an argument of type `given` may fill a parameter of type `declared`.
fn fits(declared: ParamType, given: ParamType) -> bool {
    use ParamType::{Pointer, Value};
    match (declared, given) {
        (Value(d), Value(g)) | (Pointer(d), Pointer(g)) => d.layout() == g.layout(),
        (Pointer(_), Value(CType::U64)) => true,
        _ => false,
    }
}

/// Compares the arguments of a launch with the kernel's declared parameters;
/// the error says which argument is wrong and how.
pub fn check_arguments(
    declared: &[ParamType],
    given: &[Option<ParamType>],
    count: usize,
) -> Result<(), String> {
    if count != declared.len() {
        return Err(format!(
            "{count} arguments given, the kernel declares {} ({})",
            declared.len(),
            declared
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (i, (&d, g)) in declared.iter().zip(given).enumerate() {
        let g = g.expect("counted within the recorded arguments");
        if !fits(d, g) {
            return Err(format!(
                "argument {} is {g} where the kernel declares {d}",
                i + 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use CType::*;
    use ParamType::*;

    #[test]
    fn declarations_parse_into_parameter_types() {
        let list = "int n, const double* __restrict__ x, // the input\n \
                    double* __restrict__ y, const u64* __restrict__ codes, /* scale */ double alpha,\n \
                    const unsigned char* __restrict__ colour, long long k, unsigned* w";
        assert_eq!(
            parse_parameters(list).unwrap(),
            [
                Value(Int),
                Pointer(Double),
                Pointer(Double),
                Pointer(U64),
                Value(Double),
                Pointer(UChar),
                Value(LongLong),
                Pointer(Unsigned)
            ]
        );
        assert_eq!(parse_parameters(" ").unwrap(), []);
        let err = parse_parameters("int n, Foo* x").unwrap_err();
        assert!(err.contains("Foo* x"), "{err}");
        assert!(parse_parameters("double** x").is_err());
    }

    #[test]
    fn template_parameters_read_as_the_instance_type() {
        let list = "int n, const T* __restrict__ x, // T values\n T* Ty, double T_scale, T alpha";
        let double = instantiate(list, "T", "double");
        assert_eq!(
            double,
            "int n, const double* __restrict__ x, // double values\n double* Ty, double T_scale, double alpha"
        );
        assert_eq!(
            parse_parameters(&instantiate(list, "T", "float")).unwrap(),
            [
                Value(Int),
                Pointer(Float),
                Pointer(Float),
                Value(Double),
                Value(Float)
            ]
        );
        // A template's list read as is names an unknown type.
        assert!(parse_parameters(list).is_err());
    }

    #[test]
    fn arguments_are_checked_by_count_and_type() {
        let declared = [Value(Int), Pointer(Double), Pointer(Float)];
        let given = |v: &[ParamType]| v.iter().map(|&p| Some(p)).collect::<Vec<_>>();
        let ok = given(&[Value(Int), Pointer(Double), Pointer(Float)]);
        assert!(check_arguments(&declared, &ok, 3).is_ok());
        // A null or an address for a pointer.
        let null = given(&[Value(Int), Pointer(Double), Value(U64)]);
        assert!(check_arguments(&declared, &null, 3).is_ok());
        let short = given(&[Value(Int), Pointer(Double)]);
        let err = check_arguments(&declared, &short, 2).unwrap_err();
        assert!(
            err.contains("2 arguments given, the kernel declares 3 (int, double*, float*)"),
            "{err}"
        );
        let swapped = given(&[Value(Int), Pointer(Float), Pointer(Double)]);
        let err = check_arguments(&declared, &swapped, 3).unwrap_err();
        assert_eq!(
            err,
            "argument 2 is float* where the kernel declares double*"
        );
        let scalar = given(&[Value(Double), Pointer(Double), Pointer(Float)]);
        assert!(check_arguments(&declared, &scalar, 3).is_err());
        let pointer = given(&[Pointer(Int), Pointer(Double), Pointer(Float)]);
        assert!(check_arguments(&declared, &pointer, 3).is_err());
        // Integers of one size, either signedness.
        let unsigned = given(&[Value(Unsigned), Pointer(Double), Pointer(Float)]);
        assert!(check_arguments(&declared, &unsigned, 3).is_ok());
    }

    #[test]
    fn rust_arguments_stand_for_their_c_types() {
        assert_eq!(<&CudaSlice<f64>>::PARAM, Pointer(Double));
        assert_eq!(<&mut CudaSlice<f32>>::PARAM, Pointer(Float));
        assert_eq!(<&CudaView<'_, u64>>::PARAM, Pointer(U64));
        assert_eq!(<&i32>::PARAM, Value(Int));
        assert_eq!(<&u8>::PARAM, Value(UChar));
    }
}

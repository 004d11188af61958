//! Scalar types shared by the algorithms of `solve`: the working precision
//! of a preconditioner ([`Precision`]) and the arithmetic it is written over
//! ([`Real`], f64 or f32).
//!
//! A leaf module: it uses nothing of the crate but `solve`'s name parser, so
//! that any algorithm can name these types without depending on another
//! algorithm's file.

/// The precision an approximate inverse (polynomial, FSAI factor, AMG
/// smoother) is applied in; Krylov vectors stay f64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Everything in f64.
    Double,
    /// The polynomial on an f32 copy of the matrix with f32 vectors; PCG in f64.
    Mixed,
}

impl Precision {
    pub const ALL: [Self; 2] = [Self::Double, Self::Mixed];
    pub fn name(self) -> &'static str {
        match self {
            Self::Double => "double",
            Self::Mixed => "mixed",
        }
    }
}

super::from_str_by_name!(Precision, "precision");

/// The arithmetic of a set-up or an apply: f64, or f32 for [`Precision::Mixed`]. Every
/// operation is one IEEE operation rounded to nearest (Rust does not contract
/// a * b - c into an FMA), as the device's `__dmul_rn`/`__fsub_rn` family.
pub trait Real:
    Copy
    + PartialOrd
    + Send
    + Sync
    + std::fmt::Debug
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn is_finite(self) -> bool;
}

/// `Real` for f64 and f32, which differ only in the type: the conversions
/// are `as` casts (f64 → f32 rounds to nearest; the others are exact).
macro_rules! impl_real {
    ($($t:ident),*) => {$(
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            fn abs(self) -> Self {
                $t::abs(self)
            }
            fn is_finite(self) -> bool {
                $t::is_finite(self)
            }
        }
    )*};
}

impl_real!(f64, f32);

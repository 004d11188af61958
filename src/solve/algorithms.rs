//! The preconditioners written as an [`Algorithm`] in their own folder, one
//! line each in the `registered!` invocation below, which declares
//! [`Registered`] (their settings, held by `precond::Preconditioner`) and
//! its dispatch. Their names are registered in `solve::registry`.

use std::fmt;

use super::algorithm::Algorithm;
use super::neumann::NeumannSettings;
use super::ssor::SsorSettings;
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// Declares [`Registered`], the settings of the [`Algorithm`]s, and its
/// dispatch: one line per algorithm.
macro_rules! registered {
    ($($variant:ident($settings:ty)),* $(,)?) => {
        /// The settings of a preconditioner written as an [`Algorithm`].
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum Registered {
            $($variant($settings)),*
        }

        $(impl From<$settings> for Registered {
            fn from(s: $settings) -> Self {
                Self::$variant(s)
            }
        })*

        impl Registered {
            pub fn name(&self) -> &'static str {
                match *self {
                    $(Self::$variant(_) => <$settings as Algorithm>::NAME),*
                }
            }

            pub fn validate(&self) -> Result<(), String> {
                match *self {
                    $(Self::$variant(s) => s.validate()),*
                }
            }

            pub fn is_flexible(&self) -> bool {
                match *self {
                    $(Self::$variant(s) => s.is_flexible()),*
                }
            }

            pub fn build_cpu<'a>(
                &self,
                a: &'a Csr,
            ) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
                match *self {
                    $(Self::$variant(s) => s.build_cpu(a)),*
                }
            }
        }

        impl fmt::Display for Registered {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match *self {
                    $(Self::$variant(s) => s.fmt(f)),*
                }
            }
        }
    };
}

registered! {
    Ssor(SsorSettings),
    Neumann(NeumannSettings),
}

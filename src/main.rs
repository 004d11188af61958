//! The `fvpoisson` binary: the library's command line ([`fvpoisson::cli`])
//! with the measurements and studies of [`bench`], which live here rather
//! than in the library.

mod bench;

fn main() {
    std::process::exit(fvpoisson::cli::main::<bench::Commands>());
}

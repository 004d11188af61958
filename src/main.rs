//! The `fvpoisson` binary: the library's command line ([`fvpoisson::cli`])
//! with the measurements and studies of [`bench`], which live here rather
//! than in the library.

mod bench;

fn main() {
    // NVLink multicast stays off unless the environment asks for it. NCCL
    // reads this only from the environment, and a write to the environment
    // races with reads on other threads: it is written here, before any
    // thread starts, and nowhere in the library.
    for (name, value) in fvpoisson::gpu::multi::nccl_environment_defaults(|n| std::env::var_os(n)) {
        std::env::set_var(name, value);
    }
    std::process::exit(fvpoisson::cli::main::<bench::Commands>());
}

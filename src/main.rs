//! The `fvpoisson` binary: the library's command line ([`fvpoisson::cli`])
//! with the measurements and studies of [`bench`], which live here rather
//! than in the library.

mod bench;

fn main() {
    keep_freed_memory();
    // NVLink multicast stays off unless the environment asks for it. NCCL
    // reads this only from the environment, and a write to the environment
    // races with reads on other threads: it is written here, before any
    // thread starts, and nowhere in the library.
    for (name, value) in fvpoisson::gpu::multi::nccl_environment_defaults(|n| std::env::var_os(n)) {
        std::env::set_var(name, value);
    }
    std::process::exit(fvpoisson::cli::main::<bench::Commands>());
}

/// Makes the C allocator keep the memory the process frees for its later
/// allocations instead of returning it to the kernel. By default glibc
/// serves each allocation above a threshold (128 KiB to 32 MiB) by a fresh
/// mapping and unmaps it when freed: every array of a solve (the mesh's
/// temporaries, GAMG's face weights and coarse levels, the work vectors)
/// then pays a page fault and the kernel's clearing per 4 KiB on first
/// touch, a quarter of the CPU time of a 1 M-cell GAMG run on a virtual
/// machine (`perf record`). Served from the heap and kept there, a freed
/// array's pages are reused as they are. The peak memory is the same; the
/// process only gives back what it freed when it exits.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it runs before
    // any other thread exists. A refused setting leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

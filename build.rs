//! Decides whether the GPU tests run or show as ignored.
//!
//! The GPU tests (`tests/gpu*.rs` and a few others) carry
//! `#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]`: on a machine
//! without an NVIDIA device they are reported as ignored, not as passed. They
//! are compiled in when the build machine has a device (the NVIDIA driver's
//! `/proc/driver/nvidia/gpus` lists one) or when `FVPOISSON_REQUIRE_GPU=1` is
//! set, which also makes a missing device fail them. Test binaries built
//! elsewhere run them with `--include-ignored`.
//!
//! The test that opens the VTK output with VTK's own Python reader carries
//! `#[cfg_attr(not(vtk_reader_tests), ignore = ...)]` the same way: it runs
//! where `python3 -c 'import vtk'` succeeds at build time or
//! `FVPOISSON_REQUIRE_VTK=1` is set (which also makes a missing module fail
//! it). Installing the module later takes a `cargo clean -p fvpoisson`, or
//! the variable, for the build to see it.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gpu_tests)");
    println!("cargo::rustc-check-cfg=cfg(vtk_reader_tests)");
    println!("cargo::rerun-if-env-changed=FVPOISSON_REQUIRE_VTK");
    let vtk_required = std::env::var("FVPOISSON_REQUIRE_VTK").is_ok_and(|v| v == "1");
    let vtk_module = std::process::Command::new("python3")
        .args(["-c", "import vtk"])
        .output()
        .is_ok_and(|o| o.status.success());
    if vtk_required || vtk_module {
        println!("cargo::rustc-cfg=vtk_reader_tests");
    }
    println!("cargo::rerun-if-env-changed=FVPOISSON_REQUIRE_GPU");
    let required = std::env::var("FVPOISSON_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let device = Path::new("/proc/driver/nvidia/gpus")
        .read_dir()
        .is_ok_and(|mut gpus| gpus.next().is_some());
    if required || device {
        println!("cargo::rustc-cfg=gpu_tests");
    }
}

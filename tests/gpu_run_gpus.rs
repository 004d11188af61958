//! `fvpoisson run CASE --device gpu --gpus LIST` with two or more GPUs: one
//! process, the case assembled on the host and its PCG (Jacobi) split over
//! the GPUs by `gpu::multi` (the device loop), against the CPU run of the same
//! case. With one device the list names it twice (two ranks sharing it, host
//! staging). `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use std::path::{Path, PathBuf};

mod common;
use common::{fvpoisson, internal_field, max_diff_over_max};
use fvpoisson::gpu::Gpu;

const CASE: &str = "cases/laplacian_foam_steady";
const RESULT: &str = "10/T";

/// A fresh copy of the shipped case with Jacobi-PCG for T.
fn jacobi_case(name: &str) -> PathBuf {
    let dir = common::case_inputs_copy(CASE, name);
    let path = dir.join("system/fvSolution");
    let s = std::fs::read_to_string(&path).unwrap();
    let old = "preconditioner  FDIC;";
    assert!(s.contains(old), "the shipped fvSolution changed");
    std::fs::write(&path, s.replace(old, "preconditioner  diagonal;")).unwrap();
    dir
}

fn run(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["run", dir.to_str().unwrap()];
    args.extend(extra);
    let o = fvpoisson(&args);
    let t = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{t}");
    t
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn one_process_on_several_gpus_gives_the_cpu_answer() {
    let Some(_gpu) = fvpoisson::gpu::test_device() else {
        return;
    };
    let list = match Gpu::device_count().unwrap() {
        1 => "0,0",
        _ => "0,1",
    };
    let cpu = jacobi_case("gpus_cpu");
    run(&cpu, &["--device", "cpu"]);
    let gpus = jacobi_case("gpus_multi");
    let log = run(&gpus, &["--device", "gpu", "--gpus", list]);
    assert!(log.contains("Linear solves on 2 GPUs"), "{log}");
    assert!(
        log.contains("PCG:  Solving for T, Initial residual"),
        "{log}"
    );
    let (x, expected) = (
        internal_field(&gpus.join(RESULT)),
        internal_field(&cpu.join(RESULT)),
    );
    let rel = max_diff_over_max(&x, &expected);
    println!("--gpus {list}: max |T - T_cpu| / max |T| = {rel:.1e}");
    assert!(rel <= 1e-9, "{rel}");
}

/// `--gpus` with several devices needs `--device gpu`.
#[test]
fn several_gpus_need_device_gpu() {
    let dir = jacobi_case("gpus_no_device");
    let o = fvpoisson(&["run", dir.to_str().unwrap(), "--gpus", "0,1"]);
    assert!(!o.status.success());
    let t = String::from_utf8_lossy(&o.stderr);
    assert!(t.contains("add --device gpu"), "{t}");
    std::fs::remove_dir_all(&dir).unwrap();
}

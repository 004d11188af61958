//! potentialFoam with `-writep` on the GPU: the cylinder and pitzDaily
//! tutorials of `tests/data/potential_foam` run with the Φ and p solves on
//! the device give the U and approximate pressure p of the CPU run to 1e-8
//! relative (max|Δ| / max|CPU|): both solve to 1e-12 (the cases' PCG/DIC;
//! the device applies its preconditioner and sums in its own order), so the
//! fields agree to about that times the matrices' condition. Skips without a
//! CUDA device (`FVPOISSON_REQUIRE_GPU=1` makes that a failure).

mod common;

use fvpoisson::case::potential_foam::{run_potential_foam, PotentialOptions};
use fvpoisson::case::Device;
use fvpoisson::gpu::test_device;
use fvpoisson::mesh::{MeshSource, Vec3};

use common::max_diff_over_max;

const BOUND: f64 = 1e-8;

fn components(u: &[Vec3]) -> Vec<f64> {
    u.iter().flat_map(|v| [v.x, v.y, v.z]).collect()
}

/// U and p of a `-writep` run of the tutorial `name` on `device`, and the
/// number of p solves.
fn run_writep(name: &str, device: Device, tag: &str) -> (Vec<Vec3>, Vec<f64>, usize) {
    let dir = common::case_inputs_copy(&format!("tests/data/potential_foam/{name}"), tag);
    let options = PotentialOptions {
        write_pressure: true,
        ..PotentialOptions::default()
    };
    let summary = run_potential_foam(&dir, options, device).unwrap();
    let n = MeshSource::PolyMesh(dir.clone()).load().unwrap().n_cells();
    let (u, p) = common::flow_fields(&dir.join("0"), n);
    std::fs::remove_dir_all(&dir).unwrap();
    (u, p, summary.pressure_solves.len())
}

#[test]
fn writep_on_the_gpu_matches_the_cpu_run() {
    let Some(gpu) = test_device() else {
        return;
    };
    for name in ["cylinder", "pitzDaily"] {
        let (u_cpu, p_cpu, solves_cpu) = run_writep(name, Device::Cpu, "cpu");
        let (u_gpu, p_gpu, solves_gpu) = run_writep(name, Device::Gpu(&gpu), "gpu");
        assert_eq!(solves_gpu, solves_cpu, "{name}");
        let d_u = max_diff_over_max(&components(&u_gpu), &components(&u_cpu));
        let d_p = max_diff_over_max(&p_gpu, &p_cpu);
        println!("{name}: max relative difference U {d_u:.2e}, p {d_p:.2e}");
        assert!(p_gpu.iter().all(|x| x.is_finite()), "{name}");
        assert!(
            d_u <= BOUND && d_p <= BOUND,
            "{name}: U {d_u:.2e}, p {d_p:.2e}"
        );
    }
}

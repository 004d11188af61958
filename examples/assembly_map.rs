//! Host cost of the device assembly's set-up: the parts of
//! `gpu::assembly::AssemblyMap::new` on a mesh built the way a GPU run builds
//! it (the Laplacian's CSR pattern, reverse Cuthill–McKee rows), each timed
//! on rayon pools of the thread counts given.
//!
//! `cargo run --release --example assembly_map -- [--threads 1,2] [--repeat 3] SPEC...`
//! where SPEC is any mesh source `mesh::load` takes (e.g.
//! `box:60x60x60:tet:perturb=0.2:renumber`, `box:120x120x120`). The best of
//! `--repeat` runs of each part is printed, in milliseconds.

use fvpoisson::fvm::Schemes;
use fvpoisson::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, PatchValues,
};
use fvpoisson::gpu::assembly::AssemblyMap;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::ModSell;
use std::time::Instant;

/// The rows of a device solve (`GpuSolveOptions::default().slice_height`).
const SLICE_HEIGHT: usize = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut threads = vec![1, 2];
    let mut repeat = 3;
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => {
                let list = args.next().ok_or("--threads needs a list such as 1,2")?;
                threads = list.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--repeat" => repeat = args.next().ok_or("--repeat needs a count")?.parse()?,
            "--bench" => {}
            spec => specs.push(spec.to_string()),
        }
    }
    if specs.is_empty() {
        specs.push("box:60x60x60:tet:perturb=0.2:renumber".into());
    }
    for spec in &specs {
        let mesh = fvpoisson::mesh::load(spec)?;
        let geometry = mesh.geometry()?;
        let problem = LaplacianProblem::steady(
            CellField::Uniform(1.0),
            CellField::Uniform(0.0),
            BoundaryCondition::on_every_patch(
                &mesh,
                BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
            ),
        );
        let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem)?;
        let matrix = &system.matrix.clone();
        drop(system);
        drop(geometry);
        println!(
            "{spec}: {} cells, {} internal faces, {} matrix entries",
            mesh.n_cells(),
            mesh.n_internal_faces(),
            matrix.nnz()
        );
        let ordering = reverse_cuthill_mckee(matrix);
        for &t in &threads {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let best = |f: &mut (dyn FnMut() + Send)| {
                (0..repeat)
                    .map(|_| {
                        let start = Instant::now();
                        pool.install(&mut *f);
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let permuted = ordering.apply_symmetric(matrix);
            let parts = [
                (
                    "apply_symmetric",
                    best(&mut || drop(ordering.apply_symmetric(matrix))),
                ),
                (
                    "ModSell::from_csr",
                    best(&mut || drop(ModSell::from_csr(&permuted, SLICE_HEIGHT).unwrap())),
                ),
                (
                    "ModSell::from_csr_permuted",
                    best(&mut || {
                        drop(ModSell::from_csr_permuted(matrix, &ordering, SLICE_HEIGHT).unwrap())
                    }),
                ),
                ("Mesh::cell_faces", best(&mut || drop(mesh.cell_faces()))),
                (
                    "AssemblyMap::new",
                    best(&mut || {
                        drop(AssemblyMap::new(&mesh, matrix, &ordering, SLICE_HEIGHT).unwrap())
                    }),
                ),
            ];
            for (name, ms) in parts {
                println!("  {t} thread(s): {name:<26} {ms:>9.1} ms");
            }
        }
    }
    Ok(())
}

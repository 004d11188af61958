//! Host cost of a GPU run's set-up: the parts of
//! `gpu::assembly::AssemblyMap::new` and of the host structure a GPU run
//! builds (the deferred `LaplacianSystem`: face geometry, matrix pattern,
//! regions; reverse Cuthill–McKee rows), each timed on rayon pools of the
//! thread counts given, and the process's memory after each stage of a GPU
//! run's host side (mesh, geometry, deferred system, ordering, map).
//!
//! `cargo run --release --example assembly_map -- [--threads 1,2] [--repeat 3] SPEC...`
//! where SPEC is any mesh source `mesh::load` takes (e.g.
//! `box:60x60x60:tet:perturb=0.2:renumber`, `box:120x120x120`). The best of
//! `--repeat` runs of each part is printed, in milliseconds (wall and CPU).
//! `--stages` prints only the stages and their memory, once, on the global
//! pool (what a run does); `RUST_LOG=debug` adds the debug spans inside them.

mod common;

use common::{stage, SLICE_HEIGHT};
use fvpoisson::fvm::{LaplacianSystem, Schemes};
use fvpoisson::gpu::assembly::AssemblyMap;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::ModSell;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=debug` prints the spans inside the stages.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let options = common::Options::parse(&["--stages"])?;
    let stages_only = options.has("--stages");
    for spec in &options.specs_or("box:60x60x60:tet:perturb=0.2:renumber") {
        println!("{spec}: a GPU run's host stages");
        let (mesh, _) = stage("mesh", || common::load_mesh(spec))?;
        let geometry = stage("geometry", || mesh.geometry())?;
        let problem = common::problem_of(&mesh);
        let system = stage("deferred system (no slot map)", || {
            LaplacianSystem::deferred(&mesh, &geometry, Schemes::default(), &problem)
        })?;
        let ordering = stage("reverse Cuthill-McKee", || {
            reverse_cuthill_mckee(&system.matrix)
        });
        let map = stage("AssemblyMap::new", || {
            AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT)
        })?;
        let slots = stage("slot map (host assembly only)", || {
            system.slots().diagonal.len()
        });
        println!(
            "  {} cells, {} internal faces, {} matrix entries, {} map slots, {slots} diagonal \
             slots",
            mesh.n_cells(),
            mesh.n_internal_faces(),
            system.matrix.nnz(),
            map.face_slots.len()
        );
        drop(map);
        if stages_only {
            continue;
        }
        let matrix = &system.matrix;
        for &t in &options.threads {
            let pool = common::pool(t)?;
            let best = |f: &mut (dyn FnMut() + Send)| common::best_of(&pool, options.repeat, f);
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
                    best(&mut || drop(AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT).unwrap())),
                ),
                (
                    "deferred system",
                    best(&mut || drop(common::deferred_system(&mesh, &geometry, &problem))),
                ),
            ];
            for (name, elapsed) in parts {
                common::print_part(t, name, elapsed);
            }
        }
    }
    Ok(())
}

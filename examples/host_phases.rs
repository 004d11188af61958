//! Host cost of the phases of a whole GPU run that run on the CPU, each
//! timed alone on rayon pools of the thread counts given: the mesh
//! (`mesh::load`), its geometry (`Mesh::geometry`), the cell → face lists
//! (`Mesh::cell_faces`, read by the map and the VTK cells), the deferred
//! host system as a device run makes it (checked, no matrix pattern), the
//! row ordering (reverse Cuthill–McKee unless the faces' band says the mesh
//! order is banded; the pattern built only for RCM), the device assembly's
//! index map as the host builds it (`AssemblyMap::new`, the reference: a
//! GPU run builds it on the device, so neither its time nor its memory is
//! the run's) and the VTK output's first and second
//! write of a series (the first also derives the cells' VTK shapes, so the
//! difference is their cost).
//!
//! `cargo run --release --example host_phases -- [--threads 1,2] [--repeat 3] [--vtk DIR] [--memory] SPEC...`
//! where SPEC is any mesh source `mesh::load` takes (default
//! `box:100x100x100`). The best of `--repeat` runs of each part is printed,
//! wall and process CPU milliseconds; the stages of one run on the global
//! pool come first, with the resident memory after each, then the memory
//! account of what the host holds once the stages are done (heap bytes of
//! each structure, and per cell), and last what a host use of the system
//! (a fallback or a host assembly) adds: the face geometry's arrays, which
//! the device run never builds. `--vtk DIR` adds the VTK writes (files
//! under DIR, removed after each repeat); `--memory` stops after the
//! account (no timings).

mod common;

use common::{stage, SLICE_HEIGHT};
use fvpoisson::fvm::{LaplacianSystem, Schemes};
use fvpoisson::gpu::assembly::AssemblyMap;
use fvpoisson::io::vtk::{Field, VtkSeries};
use fvpoisson::mesh::Mesh;
use fvpoisson::sparse::RowOrdering;
use std::mem::size_of_val;

/// Heap bytes of the device assembly's index map.
fn map_bytes(map: &AssemblyMap) -> usize {
    let pattern = &map.pattern;
    size_of_val(pattern.diag())
        + size_of_val(pattern.slice_ptr())
        + size_of_val(pattern.codes())
        + size_of_val(pattern.values())
        + size_of_val(map.face_codes.as_slice())
        + size_of_val(map.face_slots.as_slice())
        + size_of_val(map.device_faces.as_slice())
        + size_of_val(map.boundary_ptr.as_slice())
        + size_of_val(map.device_boundary.as_slice())
}

/// Writes `steps` steps of one cell field to a new series in `dir`.
fn write_vtk(mesh: &Mesh, dir: &std::path::Path, steps: usize) {
    let values: Vec<f64> = (0..mesh.n_cells()).map(|c| c as f64).collect();
    let mut series = VtkSeries::new(mesh, dir, "phases").expect("a VTK series");
    for step in 0..steps {
        series
            .write_step(step as f64, &[Field::scalar("p", &values)], &[])
            .expect("a VTK step");
    }
    drop(series);
    std::fs::remove_dir_all(dir).expect("the VTK files removed");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut options = common::Options::parse(&["--vtk", "--memory"])?;
    // `--vtk DIR`: the directory is the positional argument after the flag.
    let vtk_dir = if options.has("--vtk") {
        Some(std::path::PathBuf::from(options.positional.remove(0)))
    } else {
        None
    };
    for spec in &options.specs_or("box:100x100x100") {
        println!("{spec}: a GPU run's host stages");
        let (mesh, _) = stage("mesh", || common::load_mesh(spec))?;
        let geometry = stage("geometry", || mesh.geometry())?;
        let problem = common::problem_of(&mesh);
        let mut system = stage("deferred system", || {
            LaplacianSystem::deferred_without_pattern(
                &mesh,
                &geometry,
                Schemes::default(),
                &problem,
            )
        })?;
        let ordering = stage("ordering", || {
            system.row_permutation(RowOrdering::Rcm, SLICE_HEIGHT)
        })?
        .unwrap_or_else(|| fvpoisson::sparse::ordering::Permutation::identity(mesh.n_cells()));
        let map = stage("AssemblyMap::new", || {
            AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT)
        })?;
        println!(
            "  {} cells, {} internal faces, {} points, {} map slots",
            mesh.n_cells(),
            mesh.n_internal_faces(),
            mesh.n_points(),
            map.face_slots.len()
        );
        let mut account = mesh.memory_account();
        account.extend(geometry.memory_account());
        account.extend(system.memory_account());
        account.push((
            "row ordering",
            size_of_val(ordering.new_to_old()) + size_of_val(ordering.old_to_new()),
        ));
        account.push((
            "assembly map (host-built; on the device in a run)",
            map_bytes(&map),
        ));
        common::print_account(&account, mesh.n_cells());
        drop(map);
        let faces = stage("face geometry (a host use)", || {
            system.face_geometry().bytes()
        });
        println!(
            "  face geometry of a host use: {:.1} MB, {:.1} B/cell",
            faces as f64 / 1e6,
            faces as f64 / mesh.n_cells() as f64
        );
        if options.has("--memory") {
            continue;
        }
        for &t in &options.threads {
            let pool = common::pool(t)?;
            let best = |f: &mut (dyn FnMut() + Send)| common::best_of(&pool, options.repeat, f);
            let mut parts = vec![
                (
                    "mesh::load",
                    best(&mut || drop(fvpoisson::mesh::load(spec).unwrap())),
                ),
                (
                    "Mesh::geometry",
                    best(&mut || drop(mesh.geometry().unwrap())),
                ),
                ("Mesh::cell_faces", best(&mut || drop(mesh.cell_faces()))),
                (
                    "deferred system",
                    best(&mut || drop(common::deferred_system(&mesh, &geometry, &problem))),
                ),
                (
                    "ordering",
                    // The pattern an RCM ordering reads was built by the
                    // stage above: this times the ordering alone.
                    best(&mut || {
                        drop(
                            system
                                .row_permutation(RowOrdering::Rcm, SLICE_HEIGHT)
                                .unwrap(),
                        )
                    }),
                ),
                (
                    "AssemblyMap::new",
                    best(&mut || drop(AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT).unwrap())),
                ),
            ];
            if let Some(dir) = &vtk_dir {
                parts.push(("VTK series, 1 step", best(&mut || write_vtk(&mesh, dir, 1))));
                parts.push((
                    "VTK series, 2 steps",
                    best(&mut || write_vtk(&mesh, dir, 2)),
                ));
            }
            for (name, elapsed) in parts {
                common::print_part(t, name, elapsed);
            }
        }
    }
    Ok(())
}

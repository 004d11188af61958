//! Times the VTK writer on a mesh (any source `mesh::load` takes) with synthetic fields, as a run
//! writes them (`VtkSeries::write_step`: the cells, every patch, the `.vtm`
//! and the `.pvd`):
//! `cargo run --release --example vtk_write -- SPEC DIR [STEPS] [ENCODING]`,
//! e.g. `box:200x200x200 /tmp/vtk 3 binary`.
//!
//! Step 0 also derives the cells' VTK shapes (kept for the later steps), so
//! step 0 less step 1 is their cost. Per step it prints the wall and the
//! process's CPU seconds and the bytes written; the files of the last step
//! stay in DIR for comparing writers byte for byte.

mod common;

use fvpoisson::io::vtk::{Field, VtkEncoding, VtkSeries};
use fvpoisson::mesh::Vec3;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let options = common::Options::parse(&[]).map_err(anyhow::Error::msg)?;
    let args = &options.positional;
    let (Some(spec), Some(dir)) = (args.first(), args.get(1)) else {
        anyhow::bail!("usage: vtk_write SPEC DIR [STEPS] [ENCODING]");
    };
    let steps: usize = args.get(2).map_or(Ok(2), |s| s.parse())?;
    let encoding: VtkEncoding = args
        .get(3)
        .map_or(Ok(VtkEncoding::Binary), |s| s.parse())
        .map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    let (mesh, _) = common::load_mesh(spec).map_err(|e| anyhow::anyhow!("{spec}: {e}"))?;
    let geometry = mesh.geometry()?;
    println!(
        "{spec}: {} cells, {} points; mesh and geometry {:.2} s; {} threads",
        mesh.n_cells(),
        mesh.n_points(),
        t.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    // Smooth synthetic fields of the cell and boundary face centres.
    let value = |x: &Vec3| (3.0 * x[0]).sin() * (2.0 * x[1]).cos() + x[2] * x[2];
    let gradient = |x: &Vec3| Vec3::new(x[1] * x[2], x[0] - x[2], (5.0 * x[0]).cos());
    let centres = &geometry.cell_centres;
    let p: Vec<f64> = centres.iter().map(value).collect();
    let grad: Vec<Vec3> = centres.iter().map(gradient).collect();
    let error: Vec<f64> = p.iter().map(|v| 1e-6 * v).collect();
    let faces = &geometry.boundary_face_centres;
    let p_faces: Vec<f64> = faces.iter().map(value).collect();
    let mut series = VtkSeries::new(&mesh, dir, "timing")?.with_encoding(encoding);
    for step in 0..steps {
        let (t, cpu) = (Instant::now(), common::cpu_seconds());
        let before = series.bytes_written();
        series.write_step(
            step as f64,
            &[
                Field::scalar("p", &p),
                Field::vector("grad(p)", &grad),
                Field::scalar("error", &error),
                Field::index("cell", mesh.n_cells()),
            ],
            &[Field::scalar("p", &p_faces)],
        )?;
        println!(
            "step {step}: {:.3} s wall, {:.3} s cpu, {:.1} MB",
            t.elapsed().as_secs_f64(),
            common::cpu_seconds() - cpu,
            (series.bytes_written() - before) as f64 / 1e6
        );
    }
    Ok(())
}

//! Times polyMesh reading and writing on a large mesh (reference data stays small):
//! `cargo run --release --example polymesh_io -- CASE_DIR [SCRATCH_DIR]`.
//! With a scratch dir, the mesh is also written ascii, binary and binary+gzip,
//! read back and compared.

use fvpoisson::mesh::polymesh::{read_polymesh, write_polymesh, FoamFormat};
use std::path::PathBuf;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some(case) = args.first() else {
        anyhow::bail!("usage: polymesh_io CASE_DIR [SCRATCH_DIR]");
    };
    let t = Instant::now();
    let mesh = read_polymesh(case)?;
    println!(
        "read {} cells, {} faces: {:.2} s",
        mesh.n_cells(),
        mesh.n_faces(),
        t.elapsed().as_secs_f64()
    );
    let Some(scratch) = args.get(1) else {
        return Ok(());
    };
    for (format, compress) in [
        (FoamFormat::Ascii, false),
        (FoamFormat::Binary, false),
        (FoamFormat::Binary, true),
    ] {
        let dir = scratch.join(format!("{format:?}{}", if compress { "-gz" } else { "" }));
        let t = Instant::now();
        write_polymesh(&mesh, &dir, format, compress)?;
        let write_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let back = read_polymesh(&dir)?;
        println!(
            "{format:?} compress={compress}: write {write_s:.2} s, read {:.2} s, identical: {}",
            t.elapsed().as_secs_f64(),
            back == mesh
        );
    }
    Ok(())
}

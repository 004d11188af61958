use fvpoisson::fvm::testing::all_neumann_problem;
use fvpoisson::fvm::{LaplacianSystem, Reference, Schemes};
#[test]
#[ignore]
fn scratch() {
    let mesh = fvpoisson::mesh::source::load("box:4x4x4").unwrap();
    let g = mesh.geometry().unwrap();
    let problem = all_neumann_problem(&mesh, Reference::ZeroMean);
    let sys = LaplacianSystem::new(&mesh, &g, Schemes::default(), &problem).unwrap();
    let a = &sys.matrix;
    for r in 0..3 {
        println!("{:?}", a.row(r));
    }
    let m = fvpoisson::solve::amg::pairwise_matching(a, 6);
    println!("{:?}", m);
}

use fvpoisson::gpu::bench::poisson_system;
use fvpoisson::solve::amg::*;
#[test]
#[ignore]
fn scratch() {
    let (a, _) = poisson_system("box:64x64x64").unwrap();
    let mut m = a.clone();
    while m.n_rows() > 300 {
        let mt = pairwise_matching(&m, 6);
        let n = m.n_rows();
        let mut sizes = vec![0usize; mt.n_coarse];
        for &c in &mt.aggregate {
            sizes[c as usize] += 1;
        }
        let single: Vec<usize> = (0..n)
            .filter(|&i| sizes[mt.aggregate[i] as usize] == 1)
            .collect();
        // singletons with an unmatched (singleton) negative neighbour
        let mut bad = 0;
        let mut pos = 0;
        let mut nneg = 0;
        for &i in &single {
            let (cols, vals) = m.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                if j as usize == i {
                    continue;
                }
                if v >= 0.0 {
                    pos += 1;
                } else {
                    nneg += 1;
                    if sizes[mt.aggregate[j as usize] as usize] == 1 {
                        bad += 1;
                    }
                }
            }
        }
        println!("n {n} singles {} neg-couplings-of-singles {nneg} to-singles {bad} nonneg {pos} rounds {}", single.len(), mt.rounds);
        if single.len() > 0 {
            let i = single[single.len() / 2];
            println!("  row {i}: {:?}", m.row(i));
        }
        m = galerkin(&m, &mt.aggregate, mt.n_coarse);
    }
}

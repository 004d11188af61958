use super::*;
use crate::sparse::testing::{random_symmetric, random_vector, SplitMix};

/// `dic` applied the long way: r gathered into the factor's order,
/// swept, and w scattered back to the places of `place`.
fn gathered(dic: &Dic<'_>, place: &Permutation, r: &[f64]) -> Vec<f64> {
    let r_in_order = place.to_new(r);
    let mut w_in_order = vec![0.0; r.len()];
    dic.apply(&r_in_order, &mut w_in_order);
    place.to_old(&w_in_order)
}

#[test]
fn placed_sweeps_have_the_bits_of_gathering_sweeping_and_scattering() {
    let a = random_symmetric(500, 6, 21);
    let n = a.n_rows();
    let dic = Dic::new(&a).unwrap();
    let r = random_vector(n, 5);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Two ascending runs merged (a rank's interior and boundary rows,
    // visited in global order), a shuffle (a run per row), the
    // identity (one run), and the reverse.
    let mut rng = SplitMix(9);
    let boundary: Vec<bool> = (0..n).map(|_| rng.below(5) == 0).collect();
    let mut next = [0u32, boundary.iter().filter(|&&b| !b).count() as u32];
    let merged: Vec<u32> = boundary
        .iter()
        .map(|&b| {
            let l = next[b as usize];
            next[b as usize] += 1;
            l
        })
        .collect();
    let mut shuffled: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        shuffled.swap(i, rng.below(i + 1));
    }
    for new_to_old in [
        merged,
        shuffled,
        (0..n as u32).collect(),
        (0..n as u32).rev().collect(),
    ] {
        let place = Permutation::from_new_to_old(new_to_old).unwrap();
        let placed = dic.in_vector_order(&place);
        assert_eq!(placed.n(), n);
        let mut w = vec![f64::NAN; n];
        placed.apply(&r, &mut w);
        assert_eq!(bits(&w), bits(&gathered(&dic, &place, &r)));
    }
}

//! Pairwise matching of strongly coupled rows (one aggregation "pass",
//! `AMG_SPEC.md`): deterministic, Jacobi-style parallel rounds that the GPU
//! (`kernels/amg.cu`) runs too, so that both give the same pairs.
//!
//! Coupling strength s_ij = −a_ij (only s_ij > 0 couple); s_i = max_j s_ij.
//! A coupling is strong when s_ij ≥ β s_i and s_ij ≥ β s_j (β =
//! [`STRONG_FRACTION`]: strong for both rows). In each round every unmatched
//! row i proposes to the unmatched neighbour j with the largest key
//! (strong_ij, pair_hash(i, j)) (equal keys: the smaller j), reading only the
//! previous round's state; i and j are matched when they propose to each
//! other. This is the parallel handshake matching of AmgX's size-2
//! aggregation with Notay's strong-coupling test (ETNA 37 (2010) §3) and a
//! random priority (the hash) among the strong couplings. Rows left single
//! join the pair of their strongest matched neighbour. Proposing to the
//! strongest coupling instead stalls on smoothly varying coefficients, where
//! the strongest couplings form chains that match one pair per round at
//! their ends. No arithmetic but one product per test enters the choice, so
//! CPU and GPU agree exactly.

use rayon::prelude::*;

use crate::sparse::Csr;

/// `partner` value of a row that is not (yet) matched.
pub const UNMATCHED: u32 = u32::MAX;
/// `cand` value of a row with no neighbour to propose to.
const NONE: u32 = u32::MAX;

/// β: a coupling is strong when it is at least this fraction of the
/// strongest coupling of both its rows.
pub const STRONG_FRACTION: f64 = 0.5;

/// The tie break of two couplings of equal strength: a fixed 32-bit mix of
/// the pair (smaller index first), in wrapping u32 arithmetic. The GPU's
/// `amg_pair_hash` is the same function.
pub fn pair_hash(i: u32, j: u32) -> u32 {
    let (lo, hi) = if i < j { (i, j) } else { (j, i) };
    let mut h = lo.wrapping_mul(0x9E37_79B1) ^ hi;
    h ^= h >> 15;
    h = h.wrapping_mul(0x2C1B_3C6D);
    h ^= h >> 12;
    h = h.wrapping_mul(0x297A_2D39);
    h ^= h >> 15;
    h
}

/// The aggregates of one pass: pairs and singletons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matching {
    /// Row → aggregate (coarse row), numbered by ascending leader (smallest row).
    pub aggregate: Vec<u32>,
    pub n_coarse: usize,
    /// Rounds run (the last one may have matched nothing).
    pub rounds: usize,
}

/// s_i = max_{j≠i} −a_ij over the row (0 when no coupling is negative).
fn strongest_couplings(a: &Csr) -> Vec<f64> {
    (0..a.n_rows())
        .into_par_iter()
        .with_min_len(1024)
        .map(|i| {
            let (cols, vals) = a.row(i);
            cols.iter()
                .zip(vals)
                .filter(|(&j, _)| j as usize != i)
                .fold(0.0, |m, (_, &v)| if -v > m { -v } else { m })
        })
        .collect()
}

/// Row i's proposal: the unmatched neighbour j ≠ i with s_ij > 0 and the
/// largest (strong_ij, pair_hash(i, j)), the smaller j on equal keys.
fn candidate(a: &Csr, i: usize, partner: &[u32], strongest: &[f64]) -> u32 {
    let (cols, vals) = a.row(i);
    let mut best = (false, 0u32, NONE);
    for (&j, &v) in cols.iter().zip(vals) {
        let s = -v;
        if j as usize == i || s <= 0.0 || partner[j as usize] != UNMATCHED {
            continue;
        }
        let strong =
            s >= STRONG_FRACTION * strongest[i] && s >= STRONG_FRACTION * strongest[j as usize];
        let h = pair_hash(i as u32, j);
        // Columns ascend, so on an equal key the earlier (smaller) j stays.
        if best.2 == NONE || (strong, h) > (best.0, best.1) {
            best = (strong, h, j);
        }
    }
    best.2
}

/// Pairs rows of `a` (square, columns sorted) in at most `rounds` rounds;
/// rows left unmatched are singletons.
pub fn pairwise_matching(a: &Csr, rounds: usize) -> Matching {
    let n = a.n_rows();
    let mut partner = vec![UNMATCHED; n];
    let mut cand = vec![NONE; n];
    let strongest = strongest_couplings(a);
    let mut rounds_run = 0;
    while rounds_run < rounds {
        rounds_run += 1;
        cand.par_iter_mut()
            .enumerate()
            .with_min_len(1024)
            .for_each(|(i, c)| {
                *c = if partner[i] == UNMATCHED {
                    candidate(a, i, &partner, &strongest)
                } else {
                    NONE
                };
            });
        let matched: usize = partner
            .par_iter_mut()
            .enumerate()
            .with_min_len(1024)
            .map(|(i, p)| {
                let j = cand[i];
                if j != NONE && cand[j as usize] == i as u32 {
                    *p = j;
                    1
                } else {
                    0
                }
            })
            .sum();
        if matched == 0 {
            break;
        }
    }
    let host = join_singletons(a, &partner);
    let (aggregate, n_coarse) = number_by_leader(&partner, &host);
    Matching {
        aggregate,
        n_coarse,
        rounds: rounds_run,
    }
}

/// The pair each row left unmatched joins: its strongest matched neighbour's
/// (largest (s_ij, pair_hash(i, j)), the smaller j on equal keys), or
/// `UNMATCHED` (a true singleton: no negative coupling to a matched row).
/// Without this, single rows (often near boundaries) stay single pass after
/// pass while their neighbours pair up, and the coarse levels end up made
/// of them (a 128³ box stalled near 4000 rows).
fn join_singletons(a: &Csr, partner: &[u32]) -> Vec<u32> {
    (0..partner.len())
        .into_par_iter()
        .with_min_len(1024)
        .map(|i| {
            if partner[i] != UNMATCHED {
                return UNMATCHED;
            }
            let (cols, vals) = a.row(i);
            let mut best = (0.0, 0u32, NONE);
            for (&j, &v) in cols.iter().zip(vals) {
                let s = -v;
                if j as usize == i || s <= 0.0 || partner[j as usize] == UNMATCHED {
                    continue;
                }
                let h = pair_hash(i as u32, j);
                if best.2 == NONE || s > best.0 || (s == best.0 && h > best.1) {
                    best = (s, h, j);
                }
            }
            best.2
        })
        .collect()
}

/// Aggregate numbers: a pair's leader is its smaller row, a true singleton
/// leads itself; aggregates are numbered by ascending leader (the exclusive
/// prefix sum of the leader flags). A joining row takes the number of the
/// pair of the row it joined (`host`).
fn number_by_leader(partner: &[u32], host: &[u32]) -> (Vec<u32>, usize) {
    let is_leader = |i: usize| match partner[i] {
        UNMATCHED => host[i] == UNMATCHED,
        p => (i as u32) < p,
    };
    let mut number = vec![0u32; partner.len()];
    let mut next = 0u32;
    for (i, num) in number.iter_mut().enumerate() {
        if is_leader(i) {
            *num = next;
            next += 1;
        }
    }
    let leader = |i: usize| {
        if partner[i] != UNMATCHED {
            i.min(partner[i] as usize)
        } else if host[i] != UNMATCHED {
            let h = host[i] as usize;
            h.min(partner[h] as usize)
        } else {
            i
        }
    };
    let aggregate = (0..partner.len())
        .into_par_iter()
        .with_min_len(4096)
        .map(|i| number[leader(i)])
        .collect();
    (aggregate, next as usize)
}

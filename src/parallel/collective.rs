//! Collectives built on [`Communicator::sum`] that keep the ranks of a
//! distributed run in step when one of them fails: bytes from one rank to
//! all ([`broadcast_bytes`], e.g. an NCCL unique id), the agreement of every
//! rank on the outcome of a local phase ([`agree`], with the failing rank's
//! message), and the collectives a failed rank still owes the others in the
//! middle of a step ([`join_failed`]). A rank that returns early while the
//! others wait in a collective hangs the run (thread ranks, MPI and NCCL have
//! no time-out); these make every rank take the same path instead.

use std::cell::RefCell;
use std::fmt;

use super::{Communicator, HaloExchange};
use crate::sparse::distribute::Neighbour;

/// Bytes per value of a [`broadcast_bytes`] (a 32-bit word is exact in an
/// f64, and x + 0 is x, so the sum carries the root's bytes unchanged).
const BYTES_PER_VALUE: usize = 4;

/// The most bytes of a failure message [`agree`] passes to the other ranks.
pub const MESSAGE_BYTES: usize = 1024;

/// Rank `root`'s `bytes` on every rank: all ranks call it with the same
/// `root` and `capacity` (the most bytes sent; `bytes` longer than it are
/// cut, and the other ranks' `bytes` are ignored). One `comm.sum`.
pub fn broadcast_bytes(
    comm: &dyn Communicator,
    root: usize,
    bytes: &[u8],
    capacity: usize,
) -> Vec<u8> {
    let words = capacity.div_ceil(BYTES_PER_VALUE);
    // values[0] is the length, then the bytes packed 4 to a value.
    let mut values = vec![0.0; 1 + words];
    if comm.rank() == root {
        let bytes = &bytes[..bytes.len().min(capacity)];
        values[0] = bytes.len() as f64;
        for (v, chunk) in values[1..].iter_mut().zip(bytes.chunks(BYTES_PER_VALUE)) {
            let mut word = [0u8; BYTES_PER_VALUE];
            word[..chunk.len()].copy_from_slice(chunk);
            *v = f64::from(u32::from_le_bytes(word));
        }
    }
    comm.sum(&mut values);
    let len = (values[0] as usize).min(capacity);
    let mut out: Vec<u8> = values[1..]
        .iter()
        .flat_map(|&v| (v as u32).to_le_bytes())
        .collect();
    out.truncate(len);
    out
}

/// A local phase failed on some rank: the one reported to every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankFailure {
    /// The failing rank reported (the highest severity, then the lowest rank).
    pub rank: usize,
    /// Its severity (see [`agree_ranked`]).
    pub severity: u32,
    /// Its message (cut to [`MESSAGE_BYTES`]).
    pub message: String,
    /// How many ranks failed.
    pub failed: usize,
}

impl fmt::Display for RankFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} failed: {}", self.rank, self.message)?;
        if self.failed > 1 {
            write!(f, " ({} ranks failed)", self.failed)?;
        }
        Ok(())
    }
}

/// Every rank's outcome of a local phase, agreed before the next collective:
/// `Ok` on every rank when every rank succeeded, else `Err` on every rank
/// naming the lowest failing rank with its message. Every rank must call it;
/// one `comm.sum`, two when a rank failed.
pub fn agree<T>(comm: &dyn Communicator, outcome: Result<T, String>) -> Result<T, RankFailure> {
    agree_ranked(comm, outcome.map_err(|message| (1, message)))
}

/// [`agree`] with a severity (≥ 1) per failure: the rank reported is the
/// one of the highest severity (e.g. the rank whose device failed rather
/// than the ranks that saw its NaN sums), the lowest such rank.
pub fn agree_ranked<T>(
    comm: &dyn Communicator,
    outcome: Result<T, (u32, String)>,
) -> Result<T, RankFailure> {
    let mut flags = vec![0.0; comm.size()];
    if let Err((severity, _)) = &outcome {
        flags[comm.rank()] = f64::from((*severity).max(1));
    }
    comm.sum(&mut flags);
    let failed = flags.iter().filter(|&&f| f > 0.0).count();
    let outcome = match outcome {
        Ok(value) if failed == 0 => return Ok(value),
        other => other,
    };
    let severity = flags.iter().fold(0.0f64, |m, &f| m.max(f));
    let rank = flags
        .iter()
        .position(|&f| f == severity)
        .unwrap_or_default();
    let mine = match &outcome {
        Err((_, message)) => message.as_bytes(),
        Ok(_) => &[],
    };
    let bytes = broadcast_bytes(comm, rank, mine, MESSAGE_BYTES);
    let failure = RankFailure {
        rank,
        severity: severity as u32,
        message: String::from_utf8_lossy(&bytes).into_owned(),
        failed,
    };
    AGREED_FAILURE.with(|f| *f.borrow_mut() = Some(failure.clone()));
    Err(failure)
}

thread_local! {
    /// The failure this thread's rank last agreed on with the others.
    static AGREED_FAILURE: RefCell<Option<RankFailure>> = const { RefCell::new(None) };
}

/// The failure that the ranks last agreed on ([`agree_ranked`]) on this
/// thread (a rank's thread, or an MPI process's main thread), taken. A rank
/// whose run ended in an error tells by it whether every rank knows of the
/// failure (all leave together) and whose it is: `None` after an error, and
/// the other ranks may be waiting in a collective for this one.
pub fn take_agreed_failure() -> Option<RankFailure> {
    AGREED_FAILURE.with(|f| f.borrow_mut().take())
}

/// Rank `rank`'s report of the error its run ended with, given the failure
/// the ranks agreed on: its own error names the rank (`rank 1: FILE: ...`);
/// an error that only echoes another rank's failure (`rank 1 failed: ...`)
/// already names that rank.
pub fn rank_report(rank: usize, agreed: Option<&RankFailure>, error: String) -> String {
    match agreed {
        Some(failure) if failure.rank != rank => error,
        _ => format!("rank {rank}: {error}"),
    }
}

/// `outcome` agreed by every rank ([`agree_ranked`], `severity` ≥ 1 of an
/// error): this rank's own error where it failed at the severity reported,
/// else `other(failure)` (the reported rank's failure), on every rank.
pub fn agreed<T, E: fmt::Display>(
    comm: &dyn Communicator,
    outcome: Result<T, E>,
    severity: impl Fn(&E) -> u32,
    other: impl FnOnce(RankFailure) -> E,
) -> Result<T, E> {
    let flag = outcome
        .as_ref()
        .map(|_| ())
        .map_err(|e| (severity(e).max(1), e.to_string()));
    let mine = flag.as_ref().err().map(|(s, _)| *s);
    match (outcome, agree_ranked(comm, flag)) {
        (Ok(value), Ok(())) => Ok(value),
        (Err(e), Err(failure)) if mine >= Some(failure.severity) => Err(e),
        (_, Err(failure)) => Err(other(failure)),
        (Err(e), Ok(())) => Err(e),
    }
}

/// One collective call of a distributed step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// `comm.sum` of this many values.
    Sum(usize),
    /// `comm.exchange` of a halo.
    Exchange,
}

/// The calls `calls` joined by a rank whose step failed, with NaN
/// contributions (the others' sums and halo values become NaN, so that PCG
/// stops every rank at the same iteration): `neighbours` as the rank's
/// exchanges use them, `n_sent` the length of the values it sends (the
/// "owned" values of [`Communicator::exchange`]) and `n_halo` of its halo.
pub fn join_failed(
    comm: &dyn Communicator,
    neighbours: &[Neighbour],
    n_sent: usize,
    n_halo: usize,
    calls: &[Collective],
) {
    for call in calls {
        match *call {
            Collective::Sum(n) => comm.sum(&mut vec![f64::NAN; n]),
            Collective::Exchange => {
                let sent = vec![f64::NAN; n_sent];
                let mut halo = vec![0.0; n_halo];
                comm.exchange(HaloExchange::new(neighbours, &sent, &mut halo), &mut || {});
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::threads::run_threads_within;
    use crate::sparse::distribute::Decomposition;
    use crate::sparse::testing::grid_laplacian;

    /// `body` on `n` thread ranks; a hang fails the test after 20 s.
    fn within_seconds<T: Send + 'static>(
        n: usize,
        body: impl Fn(&crate::parallel::threads::ThreadRank) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        run_threads_within(n, std::time::Duration::from_secs(20), body).unwrap()
    }

    #[test]
    fn bytes_reach_every_rank_unchanged() {
        let data: Vec<u8> = (0..=255u8).chain([0, 7, 255]).collect();
        for (root, capacity) in [(0, 259), (2, 259), (1, 100), (3, 0)] {
            let expected = data[..capacity].to_vec();
            let sent = data.clone();
            let results = within_seconds(4, move |c| {
                // Only the root's bytes count.
                let mine = if c.rank() == root {
                    sent.clone()
                } else {
                    vec![9; 3]
                };
                broadcast_bytes(c, root, &mine, capacity)
            });
            for r in results {
                assert_eq!(r, expected);
            }
        }
    }

    #[test]
    fn every_rank_learns_the_failure_of_the_highest_severity() {
        let results = within_seconds(4, |c| {
            let outcome = match c.rank() {
                1 => Err((1, "NaN sums".to_string())),
                2 | 3 => Err((2, format!("device of rank {} lost", c.rank()))),
                _ => Ok(c.rank()),
            };
            agree_ranked(c, outcome)
        });
        for r in results {
            let e = r.unwrap_err();
            assert_eq!((e.rank, e.severity, e.failed), (2, 2, 3));
            assert_eq!(
                e.to_string(),
                "rank 2 failed: device of rank 2 lost (3 ranks failed)"
            );
        }
        let results = within_seconds(3, |c| agree(c, Ok::<_, String>(c.rank() * 10)));
        assert_eq!(
            results.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [0, 10, 20]
        );
        let long = "é".repeat(MESSAGE_BYTES);
        let results = within_seconds(2, move |c| {
            let outcome = if c.rank() == 1 {
                Err(long.clone())
            } else {
                Ok(())
            };
            agree(c, outcome)
        });
        for r in results {
            let e = r.unwrap_err();
            assert_eq!(e.rank, 1);
            assert!(e.message.starts_with("éé") && e.message.len() <= MESSAGE_BYTES + 3);
        }
    }

    /// Each rank keeps the failure it agreed on (once): the failing rank
    /// reports its own error naming itself, the others the echo that names it.
    #[test]
    fn each_rank_keeps_the_agreed_failure_for_its_report() {
        let results = within_seconds(3, |c| {
            let outcome = match c.rank() {
                2 => Err("disk full".to_string()),
                _ => Ok(()),
            };
            let error = match agree(c, outcome) {
                Err(e) if c.rank() == 2 => e.message,
                Err(e) => e.to_string(),
                Ok(()) => String::new(),
            };
            let agreed = take_agreed_failure();
            (
                take_agreed_failure(),
                rank_report(c.rank(), agreed.as_ref(), error),
            )
        });
        let reports: Vec<String> = results
            .into_iter()
            .map(|(again, report)| {
                assert_eq!(again, None);
                report
            })
            .collect();
        assert_eq!(
            reports,
            [
                "rank 2 failed: disk full",
                "rank 2 failed: disk full",
                "rank 2: disk full"
            ]
        );
        // Without an agreed failure an error is the rank's own.
        assert_eq!(rank_report(1, None, "x".into()), "rank 1: x");
    }

    /// A rank that fails after the first collective of a step and joins the
    /// rest with NaN contributions: the others finish the step with NaN sums
    /// and halo values, no rank waits forever.
    #[test]
    fn a_failed_rank_joins_the_remaining_collectives_with_nan() {
        // Slabs of z-layers: rank 1 between ranks 0 and 2.
        let a = grid_laplacian(6, 5, 6);
        let owners = (0..a.n_rows()).map(|i| (i / 60) as u32).collect();
        let d = std::sync::Arc::new(Decomposition::from_owners(owners, 3).unwrap());
        let a = std::sync::Arc::new(a);
        let calls = [Collective::Sum(1), Collective::Exchange, Collective::Sum(2)];
        let results = within_seconds(3, move |c| {
            let local = d.local(&a, c.rank()).unwrap();
            let owned = vec![1.0; local.n_owned];
            let mut first = [1.0];
            c.sum(&mut first);
            if c.rank() == 1 {
                join_failed(
                    c,
                    &local.neighbours,
                    local.n_owned,
                    local.n_halo(),
                    &calls[1..],
                );
                return (first[0], Vec::new(), [f64::NAN; 2]);
            }
            let mut halo = vec![0.0; local.n_halo()];
            c.exchange(
                HaloExchange::new(&local.neighbours, &owned, &mut halo),
                &mut || {},
            );
            let mut second = [1.0, 2.0];
            c.sum(&mut second);
            let from_1: Vec<f64> = local
                .neighbours
                .iter()
                .filter(|nb| nb.rank == 1)
                .flat_map(|nb| {
                    halo[nb.recv.start - local.n_owned..nb.recv.end - local.n_owned].to_vec()
                })
                .collect();
            (first[0], from_1, second)
        });
        for (rank, (first, from_1, second)) in results.into_iter().enumerate() {
            assert_eq!(first, 3.0);
            assert!(second.iter().all(|v| v.is_nan()), "rank {rank}: {second:?}");
            assert!(from_1.iter().all(|v| v.is_nan()), "rank {rank}");
            if rank != 1 {
                assert!(!from_1.is_empty(), "rank {rank} has rank 1 as a neighbour");
            }
        }
    }
}

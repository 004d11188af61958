//! N ranks as threads of one process, exchanging messages over channels:
//! the transport of `--ranks N` without MPI and of the tests. Channels are
//! unbounded, so a send never blocks, and messages between two ranks arrive
//! in the order they were sent, which matches the collectives up as long as
//! every rank calls them in the same order.

use std::sync::mpsc::{channel, Receiver, Sender};

use super::{halo_range, send_buffer, Communicator};
use crate::sparse::distribute::Neighbour;

/// One rank of a group of threads.
pub struct ThreadRank {
    rank: usize,
    /// To each rank (own slot unused).
    to: Vec<Sender<Vec<f64>>>,
    /// From each rank (own slot unused).
    from: Vec<Receiver<Vec<f64>>>,
}

/// Memory of one channel between two thread ranks as measured (8 GB for
/// the 10⁶ channels of 1000 ranks): an estimate to refuse a rank count whose
/// n² channels would not fit.
const CHANNEL_BYTES: u128 = 8192;

/// Memory [`ThreadRank::group`] takes for `n` ranks.
pub fn group_bytes(n: usize) -> u128 {
    (n as u128).pow(2) * CHANNEL_BYTES
}

impl ThreadRank {
    /// The `n` ranks of one group, to be moved into one thread each.
    pub fn group(n: usize) -> Vec<ThreadRank> {
        let mut receivers: Vec<Vec<Option<Receiver<Vec<f64>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        // senders[i][j] sends from rank i to rank j, received by receivers[j][i].
        let senders: Vec<Vec<Sender<Vec<f64>>>> = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        let (s, r) = channel();
                        receivers[j][i] = Some(r);
                        s
                    })
                    .collect()
            })
            .collect();
        senders
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(rank, (to, from))| ThreadRank {
                rank,
                to,
                from: from.into_iter().map(|r| r.expect("every pair")).collect(),
            })
            .collect()
    }

    fn send(&self, to: usize, data: Vec<f64>) {
        // The receiver lives as long as its thread; a rank that panicked
        // shows up as a failed receive on the other side.
        let _ = self.to[to].send(data);
    }

    fn recv(&self, from: usize) -> Vec<f64> {
        self.from[from].recv().unwrap_or_else(|_| {
            // Not a failure of this rank: the peer's own result says why it
            // stopped. Unwound without the panic hook, so nothing is printed.
            std::panic::resume_unwind(Box::new(PeerStopped {
                rank: self.rank,
                peer: from,
            }))
        })
    }
}

/// Why a rank gave up: `peer` stopped (returned, typically with an error,
/// or panicked) before `rank` heard from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStopped {
    pub rank: usize,
    pub peer: usize,
}

impl std::fmt::Display for PeerStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} stopped before rank {} heard from it",
            self.peer, self.rank
        )
    }
}

/// Runs `body` on `n` ranks, one thread each, and returns their results in
/// rank order. Ranks other than 0 log quietly ([`super::set_quiet`]). A rank
/// whose peer stopped early panics with [`PeerStopped`]'s message; use
/// [`run_ranks`] to get each rank's own outcome instead.
pub fn run_threads<T: Send>(n: usize, body: impl Fn(&ThreadRank) -> T + Sync) -> Vec<T> {
    run_ranks(n, body)
        .into_iter()
        .map(|r| r.unwrap_or_else(|stopped| panic!("{stopped}")))
        .collect()
}

/// [`run_threads`], a rank that stopped because a peer stopped before it
/// (an error returned, say) given as `Err`: the caller reports the peer's
/// own error. A rank's panic is passed on (re-raised here).
pub fn run_ranks<T: Send>(
    n: usize,
    body: impl Fn(&ThreadRank) -> T + Sync,
) -> Vec<Result<T, PeerStopped>> {
    let ranks = ThreadRank::group(n);
    let outcomes: Vec<std::thread::Result<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|rank| {
                let body = &body;
                std::thread::Builder::new()
                    .name(format!("rank {}", rank.rank))
                    .spawn_scoped(scope, move || {
                        super::set_quiet(rank.rank != 0);
                        body(&rank)
                    })
                    .expect("spawning a rank thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    // A rank's own panic (not a peer's having stopped) is the one to pass on.
    let own_panic = outcomes
        .iter()
        .position(|r| r.as_ref().is_err_and(|e| !e.is::<PeerStopped>()));
    if let Some(i) = own_panic {
        let Some(Err(payload)) = outcomes.into_iter().nth(i) else {
            unreachable!("position found an Err")
        };
        std::panic::resume_unwind(payload);
    }
    outcomes
        .into_iter()
        .map(|r| {
            r.map_err(|payload| match payload.downcast::<PeerStopped>() {
                Ok(stopped) => *stopped,
                Err(_) => unreachable!("own panics were passed on above"),
            })
        })
        .collect()
}

/// [`run_threads`] on a thread of its own, waited for at most `limit`: a
/// hang (a rank waiting forever for another) or a panic becomes an error
/// instead of blocking the caller (the tests of failing ranks); ranks left
/// hanging are abandoned.
pub fn run_threads_within<T: Send + 'static>(
    n: usize,
    limit: std::time::Duration,
    body: impl Fn(&ThreadRank) -> T + Send + Sync + 'static,
) -> Result<Vec<T>, String> {
    use std::sync::mpsc::RecvTimeoutError;
    let (done, wait) = channel();
    std::thread::spawn(move || {
        let _ = done.send(run_threads(n, body));
    });
    wait.recv_timeout(limit).map_err(|e| match e {
        RecvTimeoutError::Timeout => format!("{n} ranks hung: no result within {limit:?}"),
        RecvTimeoutError::Disconnected => "a rank panicked (its message is above)".into(),
    })
}

impl Communicator for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn sum(&self, values: &mut [f64]) {
        let n = self.size();
        if n == 1 {
            return;
        }
        for other in (0..n).filter(|&r| r != self.rank) {
            self.send(other, values.to_vec());
        }
        let mine = values.to_vec();
        values.fill(0.0);
        for r in 0..n {
            let part = if r == self.rank {
                mine.clone()
            } else {
                self.recv(r)
            };
            assert_eq!(
                part.len(),
                values.len(),
                "sum: ranks disagree on the length"
            );
            if r == 0 {
                values.copy_from_slice(&part);
            } else {
                for (v, p) in values.iter_mut().zip(&part) {
                    *v += p;
                }
            }
        }
    }

    fn exchange(
        &self,
        neighbours: &[Neighbour],
        owned: &[f64],
        halo: &mut [f64],
        overlap: &mut dyn FnMut(),
    ) {
        for nb in neighbours {
            self.send(nb.rank, send_buffer(nb, owned));
        }
        overlap();
        let n_owned = owned.len();
        for nb in neighbours {
            let data = self.recv(nb.rank);
            let slots = halo_range(nb, n_owned);
            assert_eq!(data.len(), slots.len(), "halo of rank {}: size", nb.rank);
            halo[slots].copy_from_slice(&data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_identical_on_every_rank_and_added_in_rank_order() {
        // 1 + 1e-16 + ... depends on the order: every rank must agree.
        let results = run_threads(4, |c| {
            let mut v = [[1.0, 1e-16, -1.0, 3.0][c.rank()], c.rank() as f64];
            c.sum(&mut v);
            v
        });
        let expected: f64 = ((1.0 + 1e-16) + -1.0) + 3.0;
        for v in &results {
            assert_eq!(v[0].to_bits(), expected.to_bits());
            assert_eq!(v[1], 6.0);
        }
        assert_eq!(run_threads(1, |c| c.size()), vec![1]);
    }

    #[test]
    fn hung_or_panicking_ranks_become_errors_in_time() {
        use std::time::Duration;
        let slow = run_threads_within(2, Duration::from_millis(50), |_| {
            std::thread::sleep(Duration::from_secs(2))
        });
        assert!(slow.unwrap_err().contains("2 ranks hung"));
        // Rank 1 returns without joining rank 0's sum: rank 0's receive fails.
        let gone = run_threads_within(2, Duration::from_secs(20), |c| {
            if c.rank() == 0 {
                c.sum(&mut [1.0]);
            }
        });
        assert!(gone.unwrap_err().contains("panicked"));
    }
}

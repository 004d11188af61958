//! Communication between the ranks of a distributed solve: who am
//! I, how many are we, a deterministic all-reduce and the halo exchange of a
//! [`LocalMatrix`]. Three transports implement [`Communicator`]:
//! - [`SingleProcess`]: one rank, nothing to exchange;
//! - [`threads::ThreadRank`]: N ranks as threads of one process, sums and
//!   halos through shared memory (`--ranks N`, and the tests);
//! - `mpi::MpiRank` (cargo feature `mpi`): one rank per MPI process, through
//!   the `mpi` crate (rsmpi), for `mpirun -np N fvpoisson run CASE`.
//!
//! [`collective`] builds on them what keeps the ranks in step when one
//! fails (the agreement on a phase's outcome, bytes from one rank to all).
//!
//! Reductions add the ranks' contributions in rank order on every rank, so
//! every rank gets the same bits and a run is reproducible for a given rank
//! count.

pub mod threads;

#[cfg(feature = "mpi")]
pub mod mpi;

pub mod collective;

use std::cell::Cell;

/// The rank count an MPI launcher gave this process, with the environment
/// variable that says so: Open MPI's `mpirun` (`OMPI_COMM_WORLD_SIZE`),
/// MPICH's Hydra (`PMI_SIZE`, `MPI_LOCALNRANKS`) and PMI launchers such as
/// Slurm's `srun --mpi=pmi2` (`PMI_SIZE`). `None` unless two or more ranks
/// were started.
pub fn launcher_ranks() -> Option<(usize, &'static str)> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"]
        .into_iter()
        .filter_map(|k| Some((std::env::var(k).ok()?.parse::<usize>().ok()?, k)))
        .find(|&(n, _)| n > 1)
}

use crate::sparse::distribute::{LocalMatrix, Neighbour};

/// The operations a distributed solve needs from its transport. All ranks
/// must call the collective methods (`sum`, `merge`, `exchange`) in the same
/// order.
pub trait Communicator {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;

    /// Element-wise Σ over ranks of `values` (the same length on every rank),
    /// added in rank order: every rank gets the same bits.
    fn sum(&self, values: &mut [f64]);

    /// Combines a vector of which each entry is nonzero on at most one rank
    /// (a distributed vector scattered into a zeroed global one): every rank
    /// gets the whole vector. The result does not depend on the order of the
    /// additions, so a transport may use its native reduction.
    fn merge(&self, values: &mut [f64]) {
        self.sum(values)
    }

    /// The halo exchange of one vector ([`HaloExchange`]); `overlap` runs
    /// between the start of the sends and the receives (the interior rows'
    /// work).
    fn exchange(&self, exchange: HaloExchange<'_>, overlap: &mut dyn FnMut());
}

/// One vector's halo exchange, what every transport's
/// [`Communicator::exchange`] takes: `owned[nb.send]` goes to each of the
/// `neighbours` and `halo[nb.recv − n_owned]` is filled from it (n_owned =
/// `owned.len()`).
pub struct HaloExchange<'a> {
    pub neighbours: &'a [Neighbour],
    pub owned: &'a [f64],
    pub halo: &'a mut [f64],
}

impl<'a> HaloExchange<'a> {
    pub fn new(neighbours: &'a [Neighbour], owned: &'a [f64], halo: &'a mut [f64]) -> Self {
        Self {
            neighbours,
            owned,
            halo,
        }
    }
}

/// The values a neighbour reads of `owned`, in the order of its halo.
pub(crate) fn send_values<'a>(
    nb: &'a Neighbour,
    owned: &'a [f64],
) -> impl Iterator<Item = f64> + 'a {
    nb.send.iter().map(|&i| owned[i as usize])
}

/// Where neighbour `nb`'s values land in the halo part (`recv` counts from
/// the first local row; the halo starts after `n_owned`).
pub(crate) fn halo_range(nb: &Neighbour, n_owned: usize) -> std::ops::Range<usize> {
    nb.recv.start - n_owned..nb.recv.end - n_owned
}

/// One rank: the serial run through the distributed code.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn sum(&self, _: &mut [f64]) {}
    fn exchange(&self, exchange: HaloExchange<'_>, overlap: &mut dyn FnMut()) {
        assert!(exchange.neighbours.is_empty(), "one rank has no neighbour");
        overlap();
    }
}

/// The global vector of which each rank holds its owned rows `local` (in
/// local order): every rank gets all of it.
pub fn gather_global(comm: &dyn Communicator, matrix: &LocalMatrix, local: &[f64]) -> Vec<f64> {
    let mut global = vec![0.0; matrix.n_global];
    matrix.gather_into(local, &mut global);
    comm.merge(&mut global);
    global
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as a rank other than 0: the command line's
/// logger drops its info and debug lines, so that the log shows one rank's
/// residual lines, as a serial run does.
pub fn set_quiet(quiet: bool) {
    QUIET.with(|q| q.set(quiet));
}

/// Whether this thread's info lines are dropped (see [`set_quiet`]).
pub fn is_quiet() -> bool {
    QUIET.with(Cell::get)
}

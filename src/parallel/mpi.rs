//! One rank per MPI process, through the `mpi` crate (rsmpi; cargo feature
//! `mpi`, which needs an MPI library with its headers and libclang at build
//! time, e.g. Debian's `mpich libmpich-dev libclang-dev`).

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives as _, Destination as _, Source as _};

use super::{halo_range, send_values, Communicator, HaloExchange};

/// This process's rank in `MPI_COMM_WORLD`.
pub struct MpiRank {
    world: SimpleCommunicator,
    /// Finalizes MPI when dropped.
    _universe: Universe,
}

impl MpiRank {
    /// Initializes MPI (once per process); `None` when it was initialized
    /// before.
    pub fn initialize() -> Option<Self> {
        let universe = mpi::initialize()?;
        let world = universe.world();
        Some(Self {
            world,
            _universe: universe,
        })
    }

    /// Whether this process was started by an MPI launcher (`mpirun`,
    /// `mpiexec`) with more than one rank, judged by the environment the
    /// launchers set (MPICH/Hydra's PMI_SIZE, Open MPI's OMPI_COMM_WORLD_SIZE).
    pub fn launched() -> bool {
        super::launcher_ranks().is_some()
    }

    /// Ends every rank of the run with exit code `code` (`MPI_Abort` on
    /// `MPI_COMM_WORLD`): the last resort of a rank that failed where the
    /// others cannot learn of it, e.g. while they wait in a collective.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}

impl Communicator for MpiRank {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// All-gather of every rank's values, added in rank order here (MPI's own
    /// reduction order is unspecified).
    fn sum(&self, values: &mut [f64]) {
        let n = self.size();
        if n == 1 {
            return;
        }
        let mut all = vec![0.0; values.len() * n];
        self.world.all_gather_into(&values[..], &mut all[..]);
        let len = values.len();
        for (i, v) in values.iter_mut().enumerate() {
            *v = all[i];
            for r in 1..n {
                *v += all[r * len + i];
            }
        }
    }

    fn merge(&self, values: &mut [f64]) {
        let mut out = vec![0.0; values.len()];
        self.world
            .all_reduce_into(&values[..], &mut out[..], SystemOperation::sum());
        values.copy_from_slice(&out);
    }

    fn exchange(&self, exchange: HaloExchange<'_>, overlap: &mut dyn FnMut()) {
        let (neighbours, owned, halo) = (exchange.neighbours, exchange.owned, exchange.halo);
        let buffers: Vec<Vec<f64>> = neighbours
            .iter()
            .map(|nb| send_values(nb, owned).collect())
            .collect();
        let n_owned = owned.len();
        mpi::request::scope(|scope| {
            let sends: Vec<_> = neighbours
                .iter()
                .zip(&buffers)
                .map(|(nb, buf)| {
                    self.world
                        .process_at_rank(nb.rank as i32)
                        .immediate_send(scope, &buf[..])
                })
                .collect();
            overlap();
            for nb in neighbours {
                let slots = halo_range(nb, n_owned);
                self.world
                    .process_at_rank(nb.rank as i32)
                    .receive_into(&mut halo[slots]);
            }
            for send in sends {
                send.wait();
            }
        });
    }
}

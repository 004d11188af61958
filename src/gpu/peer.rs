//! Peer-to-peer links between the GPUs of one process, the multi-GPU PCG's
//! fastest transport ([`super::multi::Transport::Peer`]): each
//! rank stores its halo values and its reduction sums straight into its
//! peers' memory (NVLink or PCIe peer access) and raises a flag there; the
//! reader waits on the flag in its own memory (`kernels/peer.cu` states the
//! protocol). No library call, event or host round trip: a reduction is one
//! small store per peer and a flag, where an NCCL all-reduce is a kernel
//! launch and tens of microseconds of latency.
//!
//! A wait that lasts [`PEER_TIMEOUT`] (a rank failed or stalled) gives up:
//! the rank's chunk ends and [`PeerLinks::failure`] names the rank that
//! never came, where a collective would hang.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream};

use super::amg::DeviceCsr;
use super::multi::{ExchangePlan, HaloAdd};
use super::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK, VECTOR_CHUNKS};

/// How long a rank waits for a peer's halo or sums before it gives up.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// Threads per block of the kernels whose last block publishes a reduction:
/// it adds every block's partial, so fewer, wider blocks keep that short.
const PUBLISH_BLOCK: u32 = 1024;

/// kernels/peer.cu: PEER_HEAD, PEER_MAX_SUMS and the area's layout.
const HEAD: usize = 4;
const MAX_SUMS: usize = 4;
const FAIL: usize = 2;

fn area_words(ranks: usize) -> usize {
    HEAD + 4 * ranks + 2 * ranks * MAX_SUMS
}

/// Whether every ordered pair of `gpus` (distinct devices) has peer access.
pub fn all_peers(gpus: &[&Gpu]) -> Result<bool, GpuError> {
    for (a, ga) in gpus.iter().enumerate() {
        for gb in &gpus[a + 1..] {
            if ga.ordinal() == gb.ordinal()
                || !ga.can_access_peer(gb)?
                || !gb.can_access_peer(ga)?
            {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Sums of a vector kernel's block partials to publish: `count` groups of
/// `m` partials each (`[a per block][b per block]`).
#[derive(Clone, Copy)]
pub struct VectorSums<'a> {
    pub partials: &'a CudaSlice<f64>,
    pub m: usize,
    pub count: usize,
}

/// One rank's end of the links: its flag area, every rank's area address,
/// and where its halo values go.
pub struct PeerLinks {
    me: i32,
    ranks: i32,
    /// kernels/peer.cu's area (counters, flags, sums).
    area: CudaSlice<u64>,
    /// Every rank's area address.
    peers: CudaSlice<u64>,
    /// `last_block` tickets of peer_pack, peer_halo_add and peer_update.
    tickets: CudaSlice<u32>,
    /// The peer address of each packed value (`ExchangePlan::idx` order).
    dst: CudaSlice<u64>,
    n_send: usize,
    /// The ranks this one sends to and receives from.
    to: CudaSlice<i32>,
    from: CudaSlice<i32>,
    n_to: i32,
    n_from: i32,
    timeout_ns: u64,
}

/// Links rank r (on `gpus[r]`, exchanging by `plans[r]` into its halo buffer
/// at device address `halos[r]`) with every other rank. Needs
/// [`all_peers`].
pub fn link(
    gpus: &[&Gpu],
    plans: &[ExchangePlan],
    halos: &[u64],
) -> Result<Vec<PeerLinks>, GpuError> {
    let ranks = gpus.len();
    for (a, ga) in gpus.iter().enumerate() {
        for (b, gb) in gpus.iter().enumerate() {
            if a != b {
                ga.share_memory_with(gb)?;
            }
        }
    }
    let areas: Vec<CudaSlice<u64>> = gpus
        .iter()
        .map(|g| g.zeros(area_words(ranks)))
        .collect::<Result<_, _>>()?;
    let addresses: Vec<u64> = gpus.iter().zip(&areas).map(|(g, a)| g.address(a)).collect();
    let mut links = Vec::with_capacity(ranks);
    for (me, (gpu, area)) in gpus.iter().zip(areas).enumerate() {
        let plan = &plans[me];
        let mut dst = Vec::with_capacity(plan.idx.len());
        for (peer, sent) in &plan.sends {
            let slots = receiving_slots(plans, me, *peer, sent)?;
            dst.extend(slots.map(|s| halos[*peer] + 8 * s as u64));
        }
        let ranks_of = |list: &[(usize, Range<usize>)]| -> Vec<i32> {
            list.iter().map(|(peer, _)| *peer as i32).collect()
        };
        let (to, from) = (ranks_of(&plan.sends), ranks_of(&plan.recvs));
        let upload_or_one = |v: &[i32]| match v.is_empty() {
            true => gpu.zeros(1),
            false => gpu.upload(v),
        };
        links.push(PeerLinks {
            me: me as i32,
            ranks: ranks as i32,
            area,
            peers: gpu.upload(&addresses)?,
            tickets: gpu.zeros(3)?,
            n_send: dst.len(),
            dst: match dst.is_empty() {
                true => gpu.zeros(1)?,
                false => gpu.upload(&dst)?,
            },
            n_to: to.len() as i32,
            n_from: from.len() as i32,
            to: upload_or_one(&to)?,
            from: upload_or_one(&from)?,
            timeout_ns: PEER_TIMEOUT.as_nanos() as u64,
        });
    }
    // The areas and halo buffers are zeroed on each device's own stream,
    // which nothing orders against a peer's stream: a peer whose first pack
    // ran before such a zeroing (a busy device runs its stream late) would
    // see its halo values or flag overwritten. Wait for every device once.
    for gpu in gpus {
        gpu.synchronize()?;
    }
    Ok(links)
}

/// The halo slots of rank `peer` that rank `me`'s packed values `sent`
/// fill (the pairing of `ExchangePlan::receive`).
fn receiving_slots(
    plans: &[ExchangePlan],
    me: usize,
    peer: usize,
    sent: &Range<usize>,
) -> Result<Range<usize>, GpuError> {
    let (_, slots) = plans[peer]
        .recvs
        .iter()
        .find(|(from, _)| *from == me)
        .ok_or_else(|| {
            GpuError::Invalid(format!(
                "internal: rank {peer} receives nothing from rank {me}"
            ))
        })?;
    if slots.len() != sent.len() {
        return Err(GpuError::Invalid(format!(
            "internal: rank {me} sends {} values, rank {peer} expects {}",
            sent.len(),
            slots.len()
        )));
    }
    Ok(slots.clone())
}

impl PeerLinks {
    /// The next exchange on `stream`: x's packed values (`send_idx`) into
    /// the receivers' halos, once each has read the last one. A no-op once
    /// `st` says done.
    pub fn pack<'a>(
        &'a self,
        gpu: &'a Gpu,
        stream: &'a Arc<CudaStream>,
        send_idx: &'a CudaSlice<u32>,
        x: &'a CudaSlice<f64>,
        st: Option<&'a CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let n = self.n_send as i32;
        let grid = vector_grid(self.n_send);
        gpu.launch_on(stream, "peer_pack", grid, VECTOR_BLOCK, 0, |a| {
            a.arg(&n).arg(send_idx).arg(&self.dst).arg(x);
            a.arg(&self.area)
                .arg(&self.peers)
                .arg(&self.me)
                .arg(&self.ranks);
            a.arg(&self.n_to).arg(&self.to).arg(&self.tickets);
            arg_or_null(a, st);
            a.arg(&self.timeout_ns);
        })
    }

    /// `step` (`multi::HaloAdd`: y[boundary rows] += A_oh halo, with the
    /// partials of p · Ap) once the exchange has arrived; with `publish` =
    /// (all, first), `step`'s partials at `all[first..]`, the sums of
    /// `vector` and of all of `all`'s partials up to this kernel's last are
    /// then published as the next reduction.
    pub fn halo_add<'a>(
        &'a self,
        gpu: &'a Gpu,
        step: &HaloAdd<'a>,
        publish: Option<(&'a CudaSlice<f64>, usize)>,
        vector: Option<VectorSums<'a>>,
    ) -> Result<(), GpuError> {
        let (n, row0) = (step.a_oh.n as i32, step.n_interior as i32);
        let first = publish.map_or(-1, |(_, first)| first as i32);
        let (vec_m, vec_count) = vector.map_or((0, 0), |v| (v.m as i32, v.count as i32));
        let tickets = self.tickets.slice(1..);
        let grid = self.halo_blocks(step.a_oh) as u32;
        gpu.launch("peer_halo_add", grid, PUBLISH_BLOCK, 0, |a| {
            step.push_args(a, &n, &row0);
            a.arg(&self.area)
                .arg(&self.peers)
                .arg(&self.me)
                .arg(&self.ranks);
            a.arg(&self.n_from).arg(&self.from).arg(&tickets);
            a.arg(&self.timeout_ns);
            arg_or_null(a, publish.map(|p| p.0));
            a.arg(&first);
            arg_or_null(a, vector.map(|v| v.partials));
            a.arg(&vec_m).arg(&vec_count);
        })
    }

    /// Blocks (and partials) of [`PeerLinks::halo_add`] over `a_oh`.
    pub fn halo_blocks(&self, a_oh: &DeviceCsr) -> usize {
        a_oh.n.div_ceil(PUBLISH_BLOCK as usize)
    }

    /// The device loop's update x += α p, r −= α q, z = D⁻¹ r (Jacobi; none
    /// without `inv_diag`: z = r, not stored), publishing Σ|r| and r · z
    /// from `partials` as the next reduction.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        gpu: &Gpu,
        st: &CudaSlice<f64>,
        [p, q, x, r]: [&CudaSlice<f64>; 4],
        inv_diag: Option<&CudaSlice<f64>>,
        z: Option<&CudaSlice<f64>>,
        partials: &CudaSlice<f64>,
        n: usize,
    ) -> Result<(), GpuError> {
        let (n32, ticket) = (n as i32, self.tickets.slice(2..));
        // A chunked kernel: VECTOR_CHUNKS chunks of PUBLISH_BLOCK rows a block.
        let grid = n.div_ceil((PUBLISH_BLOCK * VECTOR_CHUNKS) as usize) as u32;
        gpu.launch("peer_update", grid, PUBLISH_BLOCK, 0, |a| {
            a.arg(&n32).arg(st).arg(p).arg(q).arg(x).arg(r);
            arg_or_null(a, inv_diag);
            arg_or_null(a, z);
            a.arg(partials);
            a.arg(&self.area)
                .arg(&self.peers)
                .arg(&self.me)
                .arg(&self.ranks);
            a.arg(&ticket);
        })
    }

    /// Publishes the rank's sums as the next reduction: `vector`'s, then
    /// the sum of the first `m_b` partials of `b` where given.
    pub fn publish(
        &self,
        gpu: &Gpu,
        vector: Option<VectorSums<'_>>,
        operator: Option<(&CudaSlice<f64>, usize)>,
        st: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let (m, c) = vector.map_or((0, 0), |v| (v.m as i32, v.count as i32));
        let m_b = operator.map_or(-1, |(_, m)| m as i32);
        let block = super::multi::REDUCE_BLOCK;
        gpu.launch("peer_publish_partials", 1, block, 0, |a| {
            a.arg(&m).arg(&c);
            arg_or_null(a, vector.map(|v| v.partials));
            a.arg(&m_b);
            arg_or_null(a, operator.map(|o| o.0));
            a.arg(st);
            a.arg(&self.area)
                .arg(&self.peers)
                .arg(&self.me)
                .arg(&self.ranks);
        })
    }

    /// `peer_finish_{precondition,operator,update,single}` (`step`): the
    /// reduction summed over the ranks into `sums`, then kernels/pcg.cu's
    /// finish of iteration `j` (`peer_finish_single`: with `prologue`).
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        &self,
        gpu: &Gpu,
        step: &'static str,
        sums: &CudaSlice<f64>,
        st: &CudaSlice<f64>,
        records: &CudaSlice<f64>,
        j: i32,
        prologue: Option<bool>,
    ) -> Result<(), GpuError> {
        let prologue = prologue.map(i32::from);
        gpu.launch(step, 1, 32, 0, |a| {
            a.arg(&self.area).arg(&self.ranks).arg(sums).arg(st);
            a.arg(records).arg(&j).arg(&self.timeout_ns);
            if let Some(p) = &prologue {
                a.arg(p);
            }
        })
    }

    /// How long this rank's waits last before they give up (default
    /// [`PEER_TIMEOUT`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout_ns = timeout.as_nanos() as u64;
    }

    /// The rank a wait of this rank gave up on, if any.
    pub fn failure(&self, gpu: &Gpu) -> Result<Option<usize>, GpuError> {
        let area = gpu.download(&self.area)?;
        Ok(area[FAIL].checked_sub(1).map(|r| r as usize))
    }
}

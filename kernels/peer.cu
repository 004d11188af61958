// Peer-to-peer transport of the multi-GPU PCG (src/gpu/peer.rs, one process,
// one GPU per rank, peer access over NVLink or PCIe): a rank stores its halo
// values and its reduction sums straight into its peers' memory and raises a
// flag there; the reader waits on the flag in its own memory. No NCCL, no
// host: the flags replace the collectives' synchronisation. Compiled with
// spmv.cu and pcg.cu (ST_DONE, reduce_fixed,
// last_block, block_sum, finish_*).
//
// Each rank's `area` (u64 words, `peers` holds every rank's area address):
//   PEER_XC       halo exchanges this rank has completed
//   PEER_RC       reductions this rank has completed
//   PEER_FAIL     0, or 1 + the rank a wait timed out on
//   HALO(s)       k: rank s's values of exchange k are in this rank's halo
//   ACK(s)        k: rank s has read this rank's values of exchange k
//   FLAG(slot, s) k: rank s's sums of reduction k are in SUMS(slot, s)
//   SUMS(slot, s) PEER_MAX_SUMS doubles; slot = k & 1
// Every rank runs the same sequence of exchanges and reductions (the same
// all-reduced bits drive every rank's StopRule), so the counters agree.
// Two slots suffice: a rank cannot publish reduction k + 2 before every rank
// has published k + 1, which each does after reading k. Likewise a halo is
// rewritten only after its reader's ACK of the previous exchange.

#define PEER_XC 0
#define PEER_RC 1
#define PEER_FAIL 2
#define PEER_HEAD 4
#define PEER_MAX_SUMS 4
#define PEER_HALO(R, s) (PEER_HEAD + (s))
#define PEER_ACK(R, s) (PEER_HEAD + (R) + (s))
#define PEER_FLAG(R, slot, s) (PEER_HEAD + 2 * (R) + (slot) * (R) + (s))
#define PEER_SUMS(R, slot, s) (PEER_HEAD + 4 * (R) + ((slot) * (R) + (s)) * PEER_MAX_SUMS)

__device__ __forceinline__ u64 peer_load(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void peer_store(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ u64 peer_now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Waits until area[word] >= k (rank `who` raises it). After `timeout_ns`,
// or at once when an earlier wait of this rank timed out, it gives up:
// PEER_FAIL = 1 + who and, with st set (one-block kernels only: a block of a
// wide grid must not stop its siblings mid-launch), st says done, so the rest
// of the chunk does nothing and the host reports which rank never came.
__device__ bool peer_wait(u64* area, int word, u64 k, int who, u64 timeout_ns, double* st) {
    if (peer_load(area + word) >= k) return true;
    const u64 start = peer_now_ns();
    while (peer_load(area + word) < k) {
        if (area[PEER_FAIL] != 0 || peer_now_ns() - start > timeout_ns) {
            if (area[PEER_FAIL] == 0) area[PEER_FAIL] = 1 + (u64)who;
            if (st != nullptr) st[ST_DONE] = 1.0;
            return false;
        }
        __nanosleep(64);
    }
    return true;
}

__device__ __forceinline__ u64* peer_area(const u64* peers, int rank) {
    return reinterpret_cast<u64*>(peers[rank]);
}

// The rank's sums of `count` groups of m partials (reduce_fixed's order),
// then with m_b >= 0 one more of the m_b partials b, stored into every rank's
// SUMS slot of reduction k = RC + 1, then flagged. Every thread of the block
// must call it.
__device__ void peer_publish(int m, int count, const double* partials, int m_b,
                             const double* b, const u64* area, const u64* peers, int me,
                             int ranks) {
    __shared__ double sums[PEER_MAX_SUMS];
    for (int c = 0; c < count; ++c) {
        const double s = reduce_fixed(m, partials + (size_t)c * m);
        if (threadIdx.x == 0) sums[c] = s;
    }
    if (m_b >= 0) {
        const double s = reduce_fixed(m_b, b);
        if (threadIdx.x == 0) sums[count] = s;
        ++count;
    }
    if (threadIdx.x != 0) return;
    const u64 k = area[PEER_RC] + 1;
    const int slot = (int)(k & 1);
    for (int q = 0; q < ranks; ++q) {
        double* box = reinterpret_cast<double*>(peer_area(peers, q) + PEER_SUMS(ranks, slot, me));
        for (int c = 0; c < count; ++c) box[c] = sums[c];
    }
    __threadfence_system();
    for (int q = 0; q < ranks; ++q) peer_store(peer_area(peers, q) + PEER_FLAG(ranks, slot, me), k);
}

// out[c] = the sum over ranks, in rank order, of reduction k's sums (the same
// bits on every rank); RC = k. False (st done) if a rank never published.
// Every thread of the block must call it.
__device__ bool peer_gather(int count, u64* area, int ranks, double* out, double* st,
                            u64 timeout_ns) {
    __shared__ bool ok;
    if (threadIdx.x == 0) {
        const u64 k = area[PEER_RC] + 1;
        const int slot = (int)(k & 1);
        ok = true;
        for (int s = 0; s < ranks && ok; ++s)
            ok = peer_wait(area, PEER_FLAG(ranks, slot, s), k, s, timeout_ns, st);
        for (int c = 0; c < count; ++c) {
            double t = 0.0;
            for (int s = 0; s < ranks; ++s) {
                const volatile double* box =
                    reinterpret_cast<const volatile double*>(area + PEER_SUMS(ranks, slot, s));
                t += box[c];
            }
            out[c] = t;
        }
        area[PEER_RC] = k;
    }
    __syncthreads();
    return ok;
}

// Exchange k = XC + 1: x[idx[i]] stored at the peer address dst[i] (a slot of
// a neighbour's halo), once each receiver in `to` has read exchange k - 1;
// the last block raises HALO(me) = k at each receiver.
extern "C" __global__ void peer_pack(int n, const unsigned* __restrict__ idx,
                                     const u64* __restrict__ dst, const double* __restrict__ x,
                                     u64* area, const u64* __restrict__ peers, int me, int ranks,
                                     int n_to, const int* __restrict__ to, unsigned* ticket,
                                     double* st, u64 timeout_ns) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const u64 k = area[PEER_XC] + 1;
    if (threadIdx.x == 0)
        for (int t = 0; t < n_to; ++t)
            if (!peer_wait(area, PEER_ACK(ranks, to[t]), k - 1, to[t], timeout_ns, nullptr)) break;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) *reinterpret_cast<double*>(dst[i]) = x[idx[i]];
    // Each thread's store is ordered before the block's ticket, which the
    // last block acquires before it raises the flags.
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    __syncthreads();
    if (last_block(ticket) && threadIdx.x < n_to)
        peer_store(peer_area(peers, to[threadIdx.x]) + PEER_HALO(ranks, me), k);
}

// halo_add once exchange k = XC + 1 has arrived from every rank in `from`
// (halo read through L2: peers wrote it during this kernel's wait). The last
// block sets XC = k, acknowledges exchange k to each sender and, with
// `publish_first` >= 0, publishes as the next reduction the `vec_count` sums
// of vec_m partials each of `vec_partials` (the single-reduction form's
// sum|r| and r.u), then the sum of all_partials[0..publish_first + gridDim.x)
// (p . Ap, or w . u: the slice partials, then this kernel's at all_partials +
// publish_first = `partials`).
extern "C" __global__ void peer_halo_add(int n, int row0, const u64* __restrict__ row_ptr,
                                         const unsigned* __restrict__ cols,
                                         const double* __restrict__ vals, const double* x_halo,
                                         double* __restrict__ y, const double* __restrict__ p,
                                         double* partials, double* st, u64* area,
                                         const u64* __restrict__ peers, int me, int ranks,
                                         int n_from, const int* __restrict__ from,
                                         unsigned* ticket, u64 timeout_ns,
                                         const double* all_partials, int publish_first,
                                         const double* vec_partials, int vec_m, int vec_count) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const u64 k = area[PEER_XC] + 1;
    if (threadIdx.x == 0)
        for (int t = 0; t < n_from; ++t)
            if (!peer_wait(area, PEER_HALO(ranks, from[t]), k, from[t], timeout_ns, nullptr)) break;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double dot = 0.0;
    if (i < n) {
        double acc = 0.0;
        for (u64 e = row_ptr[i]; e < row_ptr[i + 1]; ++e)
            acc = __dadd_rn(acc, __dmul_rn(vals[e], __ldcg(x_halo + cols[e])));
        y[row0 + i] = __dadd_rn(y[row0 + i], acc);
        if (partials != nullptr) dot = __dmul_rn(p[row0 + i], acc);
    }
    if (partials != nullptr) {
        const double s = block_sum(dot);
        if (threadIdx.x == 0) partials[blockIdx.x] = s;
    }
    __syncthreads();
    if (!last_block(ticket)) return;
    if (threadIdx.x < n_from)
        peer_store(peer_area(peers, from[threadIdx.x]) + PEER_ACK(ranks, me), k);
    if (threadIdx.x == 0) area[PEER_XC] = k;
    if (publish_first >= 0)
        peer_publish(vec_m, vec_count, vec_partials, publish_first + gridDim.x, all_partials, area,
                     peers, me, ranks);
}

// The device loop's update (kernels/pcg.cu update_rows, Jacobi or none, with
// r . z; a chunked kernel, spmv.cu); its last block publishes the rank's Σ|r|
// and r . z as the next reduction.
extern "C" __global__ void peer_update(int n, const double* st, const double* __restrict__ p,
                                       const double* __restrict__ q, double* __restrict__ x,
                                       double* __restrict__ r,
                                       const double* __restrict__ inv_diag,
                                       double* __restrict__ z, double* partials,
                                       const u64* area, const u64* __restrict__ peers, int me,
                                       int ranks, unsigned* ticket) {
    if (st[ST_DONE] != 0.0) return;
    const int m = vector_chunks(n);
    update_rows(n, m, st[ST_ALPHA], p, q, x, r, nullptr, 1, inv_diag, z, partials);
    if (last_block(ticket)) peer_publish(m, 2, partials, -1, nullptr, area, peers, me, ranks);
}

// One block: peer_publish of `count` groups of m partials (then, with
// m_b >= 0, the sum of m_b partials b).
extern "C" __global__ void peer_publish_partials(int m, int count, const double* partials,
                                                 int m_b, const double* b, const double* st,
                                                 const u64* area, const u64* __restrict__ peers,
                                                 int me, int ranks) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    peer_publish(m, count, partials, m_b, b, area, peers, me, ranks);
}

// One block each: the all-reduced sums (peer_gather into `sums`), then the
// step's finish of kernels/pcg.cu.
extern "C" __global__ void peer_finish_precondition(u64* area, int ranks, double* sums,
                                                    double* st, double* rec, int j,
                                                    u64 timeout_ns) {
    if (st[ST_DONE] != 0.0) return;
    if (!peer_gather(1, area, ranks, sums, st, timeout_ns)) return;
    finish_precondition(1, sums, 0, st, rec, j);
}

extern "C" __global__ void peer_finish_operator(u64* area, int ranks, double* sums, double* st,
                                                double* rec, int j, u64 timeout_ns) {
    if (st[ST_DONE] != 0.0) return;
    if (!peer_gather(1, area, ranks, sums, st, timeout_ns)) return;
    finish_operator(1, sums, st, rec, j);
}

extern "C" __global__ void peer_finish_update(u64* area, int ranks, double* sums, double* st,
                                              double* rec, int j, u64 timeout_ns) {
    if (st[ST_DONE] != 0.0) return;
    if (!peer_gather(2, area, ranks, sums, st, timeout_ns)) return;
    finish_update(1, sums, 1, st, rec, j);
}

// One block: the single-reduction form's finish (kernels/pcg.cu
// finish_single) on the ranks' sums: [r.u, w.u] for the `prologue`, else
// [sum|r|, r.u, w.u].
extern "C" __global__ void peer_finish_single(u64* area, int ranks, double* sums, double* st,
                                              double* rec, int j, u64 timeout_ns, int prologue) {
    if (st[ST_DONE] != 0.0) return;
    if (!peer_gather(prologue ? 2 : 3, area, ranks, sums, st, timeout_ns)) return;
    finish_single(prologue, sums, st, rec, j);
}

// Subdomain deflation (Gupta et al. 2011, §4), compiled with spmv.cu and
// pcg.cu (uses u64, block_sum, ST_ALPHA, ST_DONE). CPU reference:
// src/solve/deflation/mod.rs. Every reduction is a fixed tree (block_sum): the
// same bits run to run.

// ---- Deflation. Subdomain p is rows offsets[p] .. offsets[p+1] (contiguous);
// AZ is stored column-major as an n x w ELL: slot j of row i at j*n + i,
// subdomain az_parts (-1: padding) and value az_values.

// part[i] = the subdomain p of row i (offsets[p] <= i < offsets[p+1]; k
// subdomains covering 0..n): a binary search over the k + 1 offsets, one
// thread per row, so the n owners need no host array or upload.
extern "C" __global__ void defl_owners(int n, int k, const int* __restrict__ offsets,
                                       int* __restrict__ part) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int lo = 0, hi = k;  // offsets[lo] <= i < offsets[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (offsets[mid] <= i) lo = mid;
        else hi = mid;
    }
    part[i] = lo;
}

// Most subdomains one row of AZ may touch (the row's own and its neighbours').
#define DEFL_MAX_WIDTH 32

// Row i of AZ from the mod-SELL matrix: the subdomains of its columns in
// order of first appearance (the diagonal's first, then slot order) and the
// sum of a_ij over each, in slot order. Count pass (az_parts null): atomicMax
// of the number of subdomains into *width (DEFL_MAX_WIDTH + 1 when a row
// touches more). Fill pass: writes w slots of row i. One thread per row.
extern "C" __global__ void defl_az(int n, int h, const u64* __restrict__ slice_ptr,
                                   const int* __restrict__ codes,
                                   const double* __restrict__ vals,
                                   const double* __restrict__ diag,
                                   const int* __restrict__ part, int w,
                                   int* __restrict__ width, int* __restrict__ az_parts,
                                   double* __restrict__ az_values) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int qs[DEFL_MAX_WIDTH];
    double sums[DEFL_MAX_WIDTH];
    qs[0] = part[i];
    sums[0] = diag[i];
    int m = 1;
    const int s = i / h, first = s * h;
    for (u64 k = slice_ptr[s] + (i - first); k < slice_ptr[s + 1]; k += h) {
        const int c = codes[k];
        if (c == 0) continue;
        const int q = part[c > 0 ? c - 1 : first + (-(c + 1))];
        int j = 0;
        while (j < m && qs[j] != q) ++j;
        if (j == m) {
            if (m == DEFL_MAX_WIDTH) {
                m = DEFL_MAX_WIDTH + 1;
                break;
            }
            qs[m] = q;
            sums[m] = 0.0;
            ++m;
        }
        sums[j] += vals[k];
    }
    if (az_parts == nullptr) {
        atomicMax(width, m);
        return;
    }
    for (int j = 0; j < w; ++j) {
        az_parts[(size_t)j * n + i] = j < m ? qs[j] : -1;
        az_values[(size_t)j * n + i] = j < m ? sums[j] : 0.0;
    }
}

// Most subdomains (src/solve/deflation/mod.rs MAX_SUBDOMAINS): the bits of a
// block's touched subdomains fit in shared memory.
#define DEFL_MAX_SUBDOMAINS 4096
// Most subdomains a block's rows may touch for one pass over its rows.
#define DEFL_ONE_PASS_MAX 64

// E = Z^T (AZ), row p by block p: E[p][q] = sum over the rows of p of their
// AZ entries in subdomain q, each thread summing its rows (and their slots)
// in ascending order, then block_sum per q in ascending q. The subdomains
// the rows touch are first marked in a shared bit set; up to
// DEFL_ONE_PASS_MAX of them (a compact subdomain touches its own and its
// neighbours') each thread keeps a partial sum per subdomain, indexed by the
// subdomain's rank among the marked, and reads AZ once; beyond, a pass per
// subdomain (the same sums in the same order). E (row-major k x k) must be
// zero on entry; k <= DEFL_MAX_SUBDOMAINS; blockDim multiple of 32.
extern "C" __global__ void defl_galerkin(int n, int k, int w, const int* __restrict__ offsets,
                                         const int* __restrict__ az_parts,
                                         const double* __restrict__ az_values,
                                         double* __restrict__ e) {
    __shared__ unsigned touched[DEFL_MAX_SUBDOMAINS / 32];
    __shared__ int marked_before[DEFL_MAX_SUBDOMAINS / 32];
    __shared__ int marked;
    const int p = blockIdx.x, first = offsets[p], last = offsets[p + 1];
    const int words = (k + 31) / 32;
    for (int x = threadIdx.x; x < words; x += blockDim.x) touched[x] = 0u;
    __syncthreads();
    for (int i = first + threadIdx.x; i < last; i += blockDim.x) {
        for (int j = 0; j < w; ++j) {
            const int q = az_parts[(size_t)j * n + i];
            if (q >= 0) atomicOr(&touched[q >> 5], 1u << (q & 31));
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int c = 0;
        for (int x = 0; x < words; ++x) {
            marked_before[x] = c;
            c += __popc(touched[x]);
        }
        marked = c;
    }
    __syncthreads();
    const bool one_pass = marked <= DEFL_ONE_PASS_MAX;
    double partial[DEFL_ONE_PASS_MAX];
    if (one_pass) {
        for (int r = 0; r < marked; ++r) partial[r] = 0.0;
        for (int i = first + threadIdx.x; i < last; i += blockDim.x) {
            for (int j = 0; j < w; ++j) {
                const int q = az_parts[(size_t)j * n + i];
                if (q < 0) continue;
                const unsigned below = touched[q >> 5] & ((1u << (q & 31)) - 1u);
                partial[marked_before[q >> 5] + __popc(below)] += az_values[(size_t)j * n + i];
            }
        }
    }
    // The marked subdomains in ascending order: the r-th one's partial, or
    // a pass of its own over AZ.
    int r = 0;
    for (int x = 0; x < words; ++x) {
        for (unsigned bits = touched[x]; bits != 0u; bits &= bits - 1u, ++r) {
            const int q = x * 32 + __ffs(bits) - 1;
            double s = 0.0;
            if (one_pass) {
                s = partial[r];
            } else {
                for (int i = first + threadIdx.x; i < last; i += blockDim.x) {
                    for (int j = 0; j < w; ++j) {
                        if (az_parts[(size_t)j * n + i] == q) s += az_values[(size_t)j * n + i];
                    }
                }
            }
            const double total = block_sum(s);
            if (threadIdx.x == 0) e[(size_t)p * k + q] = total;
        }
    }
}

// The projection's kernels take the fused PCG loop's state `st` (pcg.cu ST_*;
// null outside the loop) and are no-ops once it says done, as the loop's own
// kernels are (src/gpu/pcg.rs `LoopProjection`).

// out[p] = sum of v over subdomain p (Z^T v), one block per subdomain.
extern "C" __global__ void defl_restrict(const int* __restrict__ offsets,
                                         const double* __restrict__ v,
                                         double* __restrict__ out,
                                         const double* __restrict__ st) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const int p = blockIdx.x, first = offsets[p], last = offsets[p + 1];
    double s = 0.0;
    for (int i = first + threadIdx.x; i < last; i += blockDim.x) s += v[i];
    const double total = block_sum(s);
    if (threadIdx.x == 0) out[p] = total;
}

// a = E^-1 c with the dense row-major inverse, one block per row p.
extern "C" __global__ void defl_coarse_solve(int k, const double* __restrict__ e_inverse,
                                             const double* __restrict__ c,
                                             double* __restrict__ a,
                                             const double* __restrict__ st) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const int p = blockIdx.x;
    const double* row = e_inverse + (size_t)p * k;
    double s = 0.0;
    for (int q = threadIdx.x; q < k; q += blockDim.x) s += row[q] * c[q];
    const double total = block_sum(s);
    if (threadIdx.x == 0) a[p] = total;
}

// v -= (AZ) a: P v once a = E^-1 Z^T v.
extern "C" __global__ void defl_subtract(int n, int w, const int* __restrict__ az_parts,
                                         const double* __restrict__ az_values,
                                         const double* __restrict__ a,
                                         double* __restrict__ v,
                                         const double* __restrict__ st) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = 0.0;
    for (int j = 0; j < w; ++j) {
        const int q = az_parts[(size_t)j * n + i];
        if (q >= 0) s += az_values[(size_t)j * n + i] * a[q];
    }
    v[i] -= s;
}

// x += s Z a.
extern "C" __global__ void defl_prolong_add(int n, double s, const int* __restrict__ part,
                                            const double* __restrict__ a,
                                            double* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += s * a[part[i]];
}

// x -= alpha Z a with alpha = st[ST_ALPHA] of the fused loop's iteration (after
// cg_operator_dot set it, before cg_update), a of its projection; a no-op once
// done.
extern "C" __global__ void defl_prolong_in_loop(int n, const double* __restrict__ st,
                                                const int* __restrict__ part,
                                                const double* __restrict__ a,
                                                double* __restrict__ x) {
    if (st[ST_DONE] != 0.0) return;
    const double s = -st[ST_ALPHA];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += s * a[part[i]];
}

// Partials of sum |v|, one per block (vector_grid blocks).
extern "C" __global__ void abs_sum_partials(int n, const double* __restrict__ v,
                                            double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? fabs(v[i]) : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

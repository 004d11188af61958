// SpMV kernels (FP64), the deterministic block reduction shared with pcg.cu, and
// what the factorisations share: round-to-nearest operations in either
// precision, the merge of two ascending column lists and the insertion sort
// of a short list.
// Formats: src/sparse/csr.rs, src/sparse/modsell.rs (Wikberg 2024, §3).

typedef unsigned long long u64;

// This thread's warp counted over the grid: the row of a kernel with a warp
// per row (blockDim.x a multiple of 32, so a warp's lanes share it).
__device__ __forceinline__ int grid_warp() {
    return (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5);
}

// The sums of every v[k] over each group of `group` threads of the block at
// once, one barrier pair for all: a fixed shuffle tree inside every warp, then
// warp g adds group g's warp sums with the same tree (the same bits run to
// run); group g's sums are valid in lane 0 of warp g. blockDim.x must be a
// multiple of group, group a multiple of 32 (at most 1024). Safe to call twice
// in a row.
template <int K>
__device__ void group_sums(double (&v)[K], int group) {
    __shared__ double warp_sums[K][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
    }
    __syncthreads();  // an earlier call may still be reading warp_sums
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) warp_sums[k][warp] = v[k];
    }
    __syncthreads();
    const int per_group = group >> 5;
    if (warp * per_group < (int)(blockDim.x >> 5)) {  // warp g < the groups
#pragma unroll
        for (int k = 0; k < K; ++k) {
            double t = lane < per_group ? warp_sums[k][warp * per_group + lane] : 0.0;
            for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
            v[k] = t;
        }
    }
}

// The sums of every v[k] over the block at once (group_sums of one group),
// valid in thread 0's v.
template <int K>
__device__ void block_sums(double (&v)[K]) {
    group_sums(v, (int)blockDim.x);
}

// Sum of v over the block, valid in thread 0 (block_sums of one value: warp 0
// holds its lanes' tree sums, the other threads 0). blockDim.x must be a
// multiple of 32 (at most 1024). Safe to call twice in a row.
__device__ double block_sum(double v) {
    double one[1] = {v};
    block_sums(one);
    return (threadIdx.x >> 5) == 0 ? one[0] : 0.0;
}

// This block's partials of two grid-wide sums, stored as [a per block][b per
// block] (the layout reduce_partials reads with count 2): block_sum of each,
// reduced together (one barrier pair), written by thread 0. Every thread of
// the block must call it.
__device__ void block_partials2(double a, double b, double* partials) {
    double two[2] = {a, b};
    block_sums(two);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = two[0];
        partials[gridDim.x + blockIdx.x] = two[1];
    }
}

// The partials of one grid-wide sum as a chunked kernel of `chunk` threads a
// block stores them (chunk_partials: chunk k holds rows [k chunk, (k + 1)
// chunk)), from a kernel whose blocks of blockDim.x threads, one row a thread,
// each hold blockDim.x / chunk whole chunks (blockDim.x a multiple of chunk,
// chunk a multiple of 32): chunk g's sum is group_sums' over groups of `chunk`
// threads, which is block_sum's over a block of `chunk` threads bit for bit.
// Thread 0 stores them, as chunk_partials does (a ticket it takes next
// publishes them); partials k >= m are not stored. Every thread of the block
// must call it.
__device__ void chunk_partials_of_block(double v, int chunk, int m, double* partials) {
    __shared__ double chunk_sums[32];
    double one[1] = {v};
    group_sums(one, chunk);
    const int warp = threadIdx.x >> 5, chunks = blockDim.x / chunk;
    if ((threadIdx.x & 31) == 0 && warp < chunks) chunk_sums[warp] = one[0];
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int g = 0; g < chunks; ++g) {
        const int k = blockIdx.x * chunks + g;
        if (k >= m) break;
        partials[k] = chunk_sums[g];
    }
}

// Chunked vector kernels: a block of blockDim.x threads takes VECTOR_CHUNKS
// chunks of blockDim.x rows in turn (chunk k = blockIdx.x * VECTOR_CHUNKS + c
// holds rows [k blockDim.x, (k + 1) blockDim.x)) and stores one partial per
// chunk, block_sum's of the chunk's terms: the partials of a grid of one block
// per chunk, bit for bit, while a block's fixed costs (its barriers, the
// ticket's fence of a ticketed launch) are paid once for VECTOR_CHUNKS chunks.
// A grid larger than the chunks need is correct (its spare blocks store
// nothing). Host: gpu::VECTOR_CHUNKS, gpu::chunked_vector_grid.
#define VECTOR_CHUNKS 4

// Chunks of n rows: the count m of each sum's partials.
__device__ __forceinline__ int vector_chunks(int n) {
    return (int)((n + blockDim.x - 1) / blockDim.x);
}

// This thread's row in the block's chunk c.
__device__ __forceinline__ int chunk_row(int c) {
    return (int)(((u64)blockIdx.x * VECTOR_CHUNKS + c) * blockDim.x + threadIdx.x);
}

// f(c, i) for each chunk c of the block whose row i (this thread's) is below
// n, the chunks in turn.
template <typename F>
__device__ __forceinline__ void for_chunk_rows(int n, const F& f) {
#pragma unroll
    for (int c = 0; c < VECTOR_CHUNKS; ++c) {
        const int i = chunk_row(c);
        if (i < n) f(c, i);
    }
}

// The partials of the first `count` of S grid-wide sums of a chunked kernel,
// t[s][c] this thread's term of sum s in chunk c: thread 0 stores the block's
// sums at partials[s * m + k] for its chunks k < m (the layout of
// block_partials2 and reduce_partials: [sum 0 per chunk][sum 1 per chunk]).
// Every thread of the block must call it.
template <int S>
__device__ void chunk_partials(double (&t)[S][VECTOR_CHUNKS], int count, int m,
                               double* partials) {
    double v[S * VECTOR_CHUNKS];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
        for (int c = 0; c < VECTOR_CHUNKS; ++c) v[s * VECTOR_CHUNKS + c] = t[s][c];
    block_sums(v);
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int c = 0; c < VECTOR_CHUNKS; ++c) {
        const int k = blockIdx.x * VECTOR_CHUNKS + c;
        if (k >= m) break;
        for (int s = 0; s < count && s < S; ++s) partials[s * m + k] = v[s * VECTOR_CHUNKS + c];
    }
}

// Round-to-nearest arithmetic in either precision, overloaded on it (the _rn
// intrinsics, which NVRTC never contracts into fused multiply-adds): what the
// kernels that repeat the CPU's operations bit for bit use (fsai.cu, ic.cu,
// block_ic.cu).
__device__ __forceinline__ double rn_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double rn_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double rn_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double rn_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double rn_sqrt(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float rn_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float rn_sqrt(float a) { return __fsqrt_rn(a); }

// The columns two ascending column lists share, cols[p .. p_end) and
// cols[q .. q_end), in ascending order: match(p, q) at each (a merge, as the
// CPU factorisations walk two rows; ic.cu's IC(0) row and ilu.cu's ILU row).
template <typename Match>
__device__ __forceinline__ void for_common_columns(const int* __restrict__ cols, u64 p, u64 p_end,
                                                   u64 q, u64 q_end, Match match) {
    while (p < p_end && q < q_end) {
        const int cp = cols[p], cq = cols[q];
        if (cp < cq) {
            ++p;
        } else if (cp > cq) {
            ++q;
        } else {
            match(p, q);
            ++p;
            ++q;
        }
    }
}

// The column of a nonzero mod-SELL code in slice base `base` (codes as in
// src/sparse/modsell.rs: c > 0 the column c - 1, c < 0 the slice's row -(c + 1)).
__device__ __forceinline__ unsigned modsell_column(int code, int base) {
    return code > 0 ? (unsigned)(code - 1) : (unsigned)(base - code - 1);
}

// f(k, col) for each stored off-diagonal of row `row` of a mod-SELL matrix in
// slices of h rows: its slot k (slot order) and its column.
template <typename F>
__device__ __forceinline__ void for_modsell_offdiagonals(int row, int h,
                                                         const u64* __restrict__ slice_ptr,
                                                         const int* __restrict__ codes,
                                                         const F& f) {
    const int s = row / h, base = s * h;
    for (u64 k = slice_ptr[s] + (row - base); k < slice_ptr[s + 1]; k += h) {
        const int c = codes[k];
        if (c == 0) continue;
        f(k, modsell_column(c, base));
    }
}

// Sorts keys[start, end) ascending in place by insertion (a short list,
// one thread's; stable), each values[] entry moved with its key where values
// is not null: a row's columns, a list of faces or of members.
__device__ __forceinline__ void insertion_sort(unsigned* keys, double* values, u64 start,
                                               u64 end) {
    for (u64 k = start + 1; k < end; ++k) {
        const unsigned key = keys[k];
        const double value = values != nullptr ? values[k] : 0.0;
        u64 p = k;
        while (p > start && keys[p - 1] > key) {
            keys[p] = keys[p - 1];
            if (values != nullptr) values[p] = values[p - 1];
            --p;
        }
        keys[p] = key;
        if (values != nullptr) values[p] = value;
    }
}

// Row `row` of a mod-SELL matrix as a CSR row at row_ptr[row]: the diagonal,
// then each stored off-diagonal inserted so that the columns ascend
// (insertion sort; the row's columns are distinct). `payload` writes what
// each entry carries beside its column: diagonal(at, row), entry(at, k) for
// mod-SELL slot k, shift(to, from) when the sort moves an entry.
template <typename Payload>
__device__ void modsell_row_to_csr(int row, int h, const u64* __restrict__ slice_ptr,
                                   const int* __restrict__ codes,
                                   const u64* __restrict__ row_ptr,
                                   unsigned* __restrict__ cols, const Payload& payload) {
    const u64 start = row_ptr[row];
    u64 end = start;
    cols[end] = (unsigned)row;
    payload.diagonal(end, row);
    ++end;
    for_modsell_offdiagonals(row, h, slice_ptr, codes, [&](u64 k, unsigned col) {
        u64 p = end;
        while (p > start && cols[p - 1] > col) {
            cols[p] = cols[p - 1];
            payload.shift(p, p - 1);
            --p;
        }
        cols[p] = col;
        payload.entry(p, k);
        ++end;
    });
}

// Scalar CSR: one thread per row.
extern "C" __global__ void spmv_csr(int n, const u64* __restrict__ row_ptr,
                                    const unsigned* __restrict__ cols,
                                    const double* __restrict__ vals,
                                    const double* __restrict__ x, double* __restrict__ y) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    double acc = 0.0;
    for (u64 k = row_ptr[row]; k < row_ptr[row + 1]; ++k) acc += vals[k] * __ldg(&x[cols[k]]);
    y[row] = acc;
}

// Plain SELL: one block per slice, blockDim.x = slice height; padding column -1.
extern "C" __global__ void spmv_sell(int n, const u64* __restrict__ slice_ptr,
                                     const int* __restrict__ cols,
                                     const double* __restrict__ vals,
                                     const double* __restrict__ x, double* __restrict__ y) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    double acc = 0.0;
    // Two slots per trip, as modsell_row.
    u64 k = start + threadIdx.x;
    for (; k + h < end; k += 2 * (u64)h) {
        const int c0 = cols[k], c1 = cols[k + h];
        const double v0 = vals[k], v1 = vals[k + h];
        const double x0 = c0 >= 0 ? __ldg(&x[c0]) : 0.0, x1 = c1 >= 0 ? __ldg(&x[c1]) : 0.0;
        if (c0 >= 0) acc += v0 * x0;
        if (c1 >= 0) acc += v1 * x1;
    }
    if (k < end && cols[k] >= 0) acc += vals[k] * __ldg(&x[cols[k]]);
    if (row < n) y[row] = acc;
}

// x at a mod-SELL column code: x[code-1] (out of slice), the staged slice
// (in slice), 0 for padding.
template <typename T>
__device__ __forceinline__ T modsell_x(int code, const T* __restrict__ x, const T* x_slice) {
    return code > 0 ? __ldg(&x[code - 1]) : code < 0 ? x_slice[-(code + 1)] : T(0);
}

// Dynamic shared memory of the mod-SELL row products, typed per instantiation
// below (one untyped array: extern __shared__ arrays of different types
// cannot share a name).
extern __shared__ __align__(16) unsigned char modsell_shared[];

// Which entries of a row modsell_row_part sums.
enum RowPart { ROW_FULL = 0, ROW_STRICT_LOWER = 1, ROW_STRICT_UPPER = 2 };

// The column code c of row `row` (slice starting at row `first`) if its entry
// belongs to `Part`, else 0 (padding: neither read nor summed).
template <int Part>
__device__ __forceinline__ int modsell_part_code(int c, int row, int first) {
    if constexpr (Part == ROW_FULL) {
        return c;
    } else {
        const int col = c > 0 ? c - 1 : first + (-(c + 1));
        const bool keep = Part == ROW_STRICT_LOWER ? col < row : col > row;
        return keep ? c : 0;
    }
}

// The value of slot k for the code c that modsell_part_code kept: a part
// (strictly lower or upper) loads only its own values, about half of the
// row's, so the truncated Neumann's two half-products move about one
// product's values, not two; the full product loads every slot as before.
template <int Part, typename T>
__device__ __forceinline__ T modsell_part_value(int c, const T* __restrict__ vals, u64 k) {
    if constexpr (Part == ROW_FULL) {
        return vals[k];
    } else {
        return c != 0 ? vals[k] : T(0);
    }
}

// One row of y = A x in modified SELL (Wikberg 2024, §3.5 `ellpack_shared`,
// padding skipped explicitly), row blockIdx.x * H + threadIdx.x with
// H = blockDim.x: the block stages x[s*H .. s*H+H) in shared memory; code > 0
// reads x[code-1], code < 0 reads shared[-(code+1)], code 0 is padding.
// Dynamic shared memory: H values of T. Every thread of the block must call
// it (it synchronises); rows >= n give 0. `x_row` receives x[row] (0 past n).
// T = double for the solver, float for the mixed-precision polynomial
// (kernels/polynomial.cu); the operations are the same. Part = ROW_FULL is
// A x; ROW_STRICT_LOWER / _UPPER sum only the entries left / right of the
// diagonal (no diagonal term; the truncated Neumann preconditioner,
// kernels/neumann.cu). For ROW_FULL the code is the plain product's,
// instruction for instruction.
template <typename T, int Part>
__device__ T modsell_row_part(int n, const u64* __restrict__ slice_ptr,
                              const int* __restrict__ codes, const T* __restrict__ vals,
                              const T* __restrict__ diag, const T* __restrict__ x, T* x_row) {
    T* x_slice = reinterpret_cast<T*>(modsell_shared);
    const int h = blockDim.x, t = threadIdx.x, first = blockIdx.x * h, row = first + t;
    const bool in = row < n;
    const T xr = in ? x[row] : T(0);
    x_slice[t] = xr;
    T acc = Part == ROW_FULL && in ? diag[row] * xr : T(0);
    __syncthreads();
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    // Two slots per trip: both loads of codes, values and x are issued before
    // the first product, so each thread keeps more loads in flight (the
    // sums stay in slot order: the same bits as one slot per trip).
    u64 k = start + t;
    for (; k + h < end; k += 2 * (u64)h) {
        const int c0 = modsell_part_code<Part>(codes[k], row, first),
                  c1 = modsell_part_code<Part>(codes[k + h], row, first);
        const T v0 = modsell_part_value<Part>(c0, vals, k),
                v1 = modsell_part_value<Part>(c1, vals, k + h);
        const T x0 = modsell_x(c0, x, x_slice), x1 = modsell_x(c1, x, x_slice);
        if (c0 != 0) acc += v0 * x0;
        if (c1 != 0) acc += v1 * x1;
    }
    if (k < end) {
        const int c = modsell_part_code<Part>(codes[k], row, first);
        if (c != 0) acc += vals[k] * modsell_x(c, x, x_slice);
    }
    *x_row = xr;
    return acc;
}

// The full row of A x in precision T (see modsell_row_part).
template <typename T>
__device__ T modsell_row_t(int n, const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
                           const T* __restrict__ vals, const T* __restrict__ diag,
                           const T* __restrict__ x, T* x_row) {
    return modsell_row_part<T, ROW_FULL>(n, slice_ptr, codes, vals, diag, x, x_row);
}

// The f64 row product every solver kernel uses.
__device__ double modsell_row(int n, const u64* __restrict__ slice_ptr,
                              const int* __restrict__ codes, const double* __restrict__ vals,
                              const double* __restrict__ diag, const double* __restrict__ x,
                              double* x_row) {
    return modsell_row_t<double>(n, slice_ptr, codes, vals, diag, x, x_row);
}

// y = A x in modified SELL: one block per slice, blockDim.x = slice height.
extern "C" __global__ void spmv_modsell(int n, const u64* __restrict__ slice_ptr,
                                        const int* __restrict__ codes,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ diag,
                                        const double* __restrict__ x, double* __restrict__ y) {
    double xr;
    const double acc = modsell_row(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) y[row] = acc;
}

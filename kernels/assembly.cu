// Assembly of the FVM Laplacian straight into mod-SELL (Wikberg 2024, §2.5 and §9.2,
// "GPU assembly directly into mod. SELL"; compiled with spmv.cu: u64 and
// block_partials2 come from there). The host data and its
// layout: src/gpu/assembly.rs (AssemblyMap).
//
// Row kernels run one block per slice and one thread per row, as the mod-SELL
// SpMV. A row walks its internal faces in face order (the order in which the
// CPU adds face terms to a cell; two cells share at most one face, Mesh::new):
// face step k sits at the mod-SELL position of slot k, `face_slots` names the
// slot j (0..) of the row that the face's coefficient goes to (ASM_NO_SLOT ends
// the row), and `face_codes` holds (device face << 1) | 1 when the row's cell
// is the face's neighbour, | 0 when it is the owner. Every value is a gather:
// no atomics, the same bits every run.
//
// Arithmetic: sums and products are the round-to-nearest intrinsics, which
// NVRTC never contracts into an FMA, in the order and association of the CPU
// code (src/fvm/system.rs, gradient.rs, schemes.rs), so the device assembly
// equals the CPU assembly bit for bit.

#define ASM_NO_SLOT 0xFFu
#define ASM_SMALL 1e-15  // OpenFOAM SMALL, system.rs SMALL

__device__ __forceinline__ double asm_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double asm_sub(double a, double b) { return __dadd_rn(a, -b); }
__device__ __forceinline__ double asm_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double asm_div(double a, double b) { return __ddiv_rn(a, b); }

// GammaInterpolation::interpolate: equal values give the value itself.
__device__ double asm_interpolate(int harmonic, double owner, double neighbour, double w) {
    if (owner == neighbour) return owner;
    if (harmonic) {
        const double inv_n = asm_div(1.0, neighbour);
        return asm_div(1.0, asm_add(asm_mul(w, asm_sub(asm_div(1.0, owner), inv_n)), inv_n));
    }
    return asm_add(asm_mul(w, asm_sub(owner, neighbour)), neighbour);
}

// (a0 b0 + a1 b1) + a2 b2, as nalgebra's Vector3::dot.
__device__ __forceinline__ double asm_dot(const double* __restrict__ a, double b0, double b1,
                                          double b2) {
    return asm_add(asm_add(asm_mul(a[0], b0), asm_mul(a[1], b1)), asm_mul(a[2], b2));
}

// Per internal face (device order): Gamma_f |S_f| and the matrix coefficient
// Gamma_f |S_f| deltaCoeff_f. `gamma` null: Gamma is `gamma_uniform`
// everywhere (interpolating equal values gives the value). `gamma_mag_sf` may
// be null (no correction needs it).
extern "C" __global__ void asm_face_coefficients(
    int n_faces, int harmonic, double gamma_uniform, const double* __restrict__ gamma,
    const unsigned* __restrict__ owner, const unsigned* __restrict__ neighbour,
    const double* __restrict__ weights, const double* __restrict__ mag_sf,
    const double* __restrict__ delta_coeffs, double* __restrict__ coeffs,
    double* __restrict__ gamma_mag_sf) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const double gamma_f =
        gamma == nullptr
            ? gamma_uniform
            : asm_interpolate(harmonic, gamma[owner[d]], gamma[neighbour[d]], weights[d]);
    const double gms = asm_mul(gamma_f, mag_sf[d]);
    if (gamma_mag_sf != nullptr) gamma_mag_sf[d] = gms;
    coeffs[d] = asm_mul(gms, delta_coeffs[d]);
}

// Matrix and explicit right-hand side, one thread per row (LaplacianSystem::
// assemble): off-diagonal slot = 0 - its face's coefficient; diagonal =
// sum over the row's faces in face order, then its boundary faces'
// -Gamma_b|S_b| gradientInternal, then V/dt (dt > 0: Euler), then doubled in
// the reference row (`reference_diag` gets the value before); explicit rhs =
// q V + sum of Gamma_b|S_b| gradientBoundary; rhs = explicit rhs.
// `b_gamma_mag_sf` may be null. No shared memory: rows past n return at once.
extern "C" __global__ void asm_matrix_rows(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const double* __restrict__ coeffs,
    const unsigned* __restrict__ boundary_ptr, const double* __restrict__ b_gamma,
    const double* __restrict__ b_mag_sf, const double* __restrict__ b_gradient_internal,
    const double* __restrict__ b_gradient_boundary, double* __restrict__ b_gamma_mag_sf,
    const double* __restrict__ volumes, const double* __restrict__ source, double dt,
    int reference_row, double* __restrict__ reference_diag, double* __restrict__ vals,
    double* __restrict__ diag, double* __restrict__ explicit_rhs, double* __restrict__ rhs) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    const u64 first = slice_ptr[blockIdx.x] + threadIdx.x, end = slice_ptr[blockIdx.x + 1];
    double a = 0.0;
    for (u64 k = first; k < end; k += h) {
        const unsigned j = face_slots[k];
        if (j == ASM_NO_SLOT) break;
        const double c = coeffs[face_codes[k] >> 1];
        a = asm_add(a, c);
        vals[first + (u64)j * h] = asm_sub(0.0, c);
    }
    double b = asm_mul(source[row], volumes[row]);
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double gms = asm_mul(b_gamma[i], b_mag_sf[i]);
        if (b_gamma_mag_sf != nullptr) b_gamma_mag_sf[i] = gms;
        a = asm_add(a, asm_mul(-gms, b_gradient_internal[i]));
        b = asm_add(b, asm_mul(gms, b_gradient_boundary[i]));
    }
    if (dt > 0.0) a = asm_add(a, asm_div(volumes[row], dt));
    if (row == reference_row) {
        *reference_diag = a;
        a = asm_add(a, a);
    }
    diag[row] = a;
    explicit_rhs[row] = b;
    rhs[row] = b;
}

// The right-hand side of asm_matrix_rows alone, for a new source q when Γ is
// the one of the last assembly (a PISO corrector after the first: rAU is the
// momentum equation's, unchanged). The same products and sums in the same
// order, so the same bits as a full re-assembly; the matrix, its diagonal and
// b_gamma_mag_sf stay as the last assembly wrote them.
extern "C" __global__ void asm_source_rhs(
    int n, const unsigned* __restrict__ boundary_ptr, const double* __restrict__ b_gamma,
    const double* __restrict__ b_mag_sf, const double* __restrict__ b_gradient_boundary,
    const double* __restrict__ volumes, const double* __restrict__ source,
    double* __restrict__ explicit_rhs, double* __restrict__ rhs) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    double b = asm_mul(source[row], volumes[row]);
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double gms = asm_mul(b_gamma[i], b_mag_sf[i]);
        b = asm_add(b, asm_mul(gms, b_gradient_boundary[i]));
    }
    explicit_rhs[row] = b;
    rhs[row] = b;
}

// Cell gradient of p (CellGradient::compute), one thread per row; the slice's
// p is staged in shared memory (H doubles) as x in the SpMV, and the other
// cell across a face is found from the mod-SELL code of its slot. Gauss linear
// (`gauss` nonzero): sum of +-S_f (w (p_o - p_n) + p_n) over the faces in face
// order, plus S_b p_b over boundary faces, divided by V. Least squares: sum of
// +-l_f (p_n - p_o) with the owner or neighbour vector l, plus l_b (p_b - p_P).
// Boundary values p_b = valueInternal p_P + valueBoundary; `b_vectors` are
// S_b (Gauss) or l_b. Vectors are 3 consecutive doubles.
extern "C" __global__ void asm_gradient(
    int n, const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
    const unsigned* __restrict__ face_codes, const unsigned char* __restrict__ face_slots,
    int gauss, const double* __restrict__ weights, const double* __restrict__ sf,
    const double* __restrict__ ls_owner, const double* __restrict__ ls_neighbour,
    const unsigned* __restrict__ boundary_ptr, const double* __restrict__ b_value_internal,
    const double* __restrict__ b_value_boundary, const double* __restrict__ b_vectors,
    const double* __restrict__ volumes, const double* __restrict__ p,
    double* __restrict__ grad) {
    extern __shared__ double p_slice[];
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    const double pr = in ? p[row] : 0.0;
    p_slice[t] = pr;
    __syncthreads();
    if (!in) return;
    double g0 = 0.0, g1 = 0.0, g2 = 0.0;
    const u64 first = slice_ptr[blockIdx.x] + t, end = slice_ptr[blockIdx.x + 1];
    for (u64 k = first; k < end; k += h) {
        const unsigned j = face_slots[k];
        if (j == ASM_NO_SLOT) break;
        const int c = codes[first + (u64)j * h];
        const double p_other = c > 0 ? p[c - 1] : p_slice[-(c + 1)];
        const unsigned code = face_codes[k];
        const u64 d = code >> 1;
        const bool is_neighbour = (code & 1u) != 0;
        const double p_own = is_neighbour ? p_other : pr;
        const double p_nei = is_neighbour ? pr : p_other;
        if (gauss) {
            const double pf = asm_add(asm_mul(weights[d], asm_sub(p_own, p_nei)), p_nei);
            const double* s = sf + 3 * d;
            const double f0 = asm_mul(s[0], pf), f1 = asm_mul(s[1], pf), f2 = asm_mul(s[2], pf);
            if (is_neighbour) {
                g0 = asm_sub(g0, f0);
                g1 = asm_sub(g1, f1);
                g2 = asm_sub(g2, f2);
            } else {
                g0 = asm_add(g0, f0);
                g1 = asm_add(g1, f1);
                g2 = asm_add(g2, f2);
            }
        } else {
            const double dp = asm_sub(p_nei, p_own);
            if (is_neighbour) {
                const double* l = ls_neighbour + 3 * d;
                g0 = asm_sub(g0, asm_mul(l[0], dp));
                g1 = asm_sub(g1, asm_mul(l[1], dp));
                g2 = asm_sub(g2, asm_mul(l[2], dp));
            } else {
                const double* l = ls_owner + 3 * d;
                g0 = asm_add(g0, asm_mul(l[0], dp));
                g1 = asm_add(g1, asm_mul(l[1], dp));
                g2 = asm_add(g2, asm_mul(l[2], dp));
            }
        }
    }
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double value = asm_add(asm_mul(b_value_internal[i], pr), b_value_boundary[i]);
        const double* v = b_vectors + 3 * (u64)i;
        const double m = gauss ? value : asm_sub(value, pr);
        g0 = asm_add(g0, asm_mul(v[0], m));
        g1 = asm_add(g1, asm_mul(v[1], m));
        g2 = asm_add(g2, asm_mul(v[2], m));
    }
    if (gauss) {
        const double vol = volumes[row];
        g0 = asm_div(g0, vol);
        g1 = asm_div(g1, vol);
        g2 = asm_div(g2, vol);
    }
    double* out = grad + 3 * (u64)row;
    out[0] = g0;
    out[1] = g1;
    out[2] = g2;
}

// Explicit non-orthogonal correction flux of every internal face (device
// order), LaplacianSystem::internal_correction: Gamma_f|S_f| k.(w (g_o - g_n)
// + g_n), times the `limited` limiter when psi >= 0 (psi < 0: corrected).
extern "C" __global__ void asm_correction_flux(
    int n_faces, const unsigned* __restrict__ owner, const unsigned* __restrict__ neighbour,
    const double* __restrict__ weights, const double* __restrict__ k,
    const double* __restrict__ gamma_mag_sf, const double* __restrict__ grad, double psi,
    const double* __restrict__ delta_coeffs, const double* __restrict__ p,
    double* __restrict__ flux) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const u64 o = owner[d], nb = neighbour[d];
    const double w = weights[d];
    const double* go = grad + 3 * o;
    const double* gn = grad + 3 * nb;
    const double f0 = asm_add(asm_mul(w, asm_sub(go[0], gn[0])), gn[0]);
    const double f1 = asm_add(asm_mul(w, asm_sub(go[1], gn[1])), gn[1]);
    const double f2 = asm_add(asm_mul(w, asm_sub(go[2], gn[2])), gn[2]);
    double correction = asm_dot(k + 3 * (u64)d, f0, f1, f2);
    if (psi >= 0.0) {
        const double uncorrected = asm_mul(delta_coeffs[d], asm_sub(p[nb], p[o]));
        const double limiter =
            fmin(asm_div(asm_mul(psi, fabs(uncorrected)),
                         asm_add(asm_mul(asm_sub(1.0, psi), fabs(correction)), ASM_SMALL)),
                 1.0);
        correction = asm_mul(correction, limiter);
    }
    flux[d] = asm_mul(gamma_mag_sf[d], correction);
}

// Right-hand side for the current field (LaplacianSystem::update_rhs before
// the singular treatment): explicit rhs, + (V/dt) p_old (`old` set), + the
// owner's / - the neighbour's correction flux over the row's faces in face
// order (`flux` set), + f Gamma_b|S_b| k_b.grad_P over boundary faces with value
// fraction f = -gradientInternal/deltaCoeff nonzero (`b_k` set:
// boundaryCorrected).
extern "C" __global__ void asm_rhs(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const double* __restrict__ flux,
    const unsigned* __restrict__ boundary_ptr, const double* __restrict__ b_gradient_internal,
    const double* __restrict__ b_delta_coeffs, const double* __restrict__ b_gamma_mag_sf,
    const double* __restrict__ b_k, const double* __restrict__ grad,
    const double* __restrict__ volumes, double dt, const double* __restrict__ old,
    const double* __restrict__ explicit_rhs, double* __restrict__ rhs) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    double b = explicit_rhs[row];
    if (old != nullptr) b = asm_add(b, asm_mul(asm_div(volumes[row], dt), old[row]));
    if (flux != nullptr) {
        const u64 first = slice_ptr[blockIdx.x] + threadIdx.x, end = slice_ptr[blockIdx.x + 1];
        for (u64 k = first; k < end; k += h) {
            if (face_slots[k] == ASM_NO_SLOT) break;
            const unsigned code = face_codes[k];
            const double f = flux[code >> 1];
            b = (code & 1u) != 0 ? asm_sub(b, f) : asm_add(b, f);
        }
    }
    if (b_k != nullptr) {
        const double* g = grad + 3 * (u64)row;
        for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
            const double fraction = asm_div(-b_gradient_internal[i], b_delta_coeffs[i]);
            if (fraction != 0.0) {
                const double kg = asm_dot(b_k + 3 * (u64)i, g[0], g[1], g[2]);
                b = asm_add(b, asm_mul(asm_mul(fraction, b_gamma_mag_sf[i]), kg));
            }
        }
    }
    rhs[row] = b;
}

// Per-block partials of sum x_i y_i (y null: sum x_i) and of sum |x_i|:
// [first sum per block][second sum per block].
extern "C" __global__ void asm_sum_partials(int n, const double* __restrict__ x,
                                            const double* __restrict__ y,
                                            double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double s = 0.0, a = 0.0;
    if (i < n) {
        s = y != nullptr ? asm_mul(x[i], y[i]) : x[i];
        a = fabs(x[i]);
    }
    block_partials2(s, a, partials);
}

// x_i -= w_i s (w null: x_i -= s): the singular projection and the zero-mean shift.
extern "C" __global__ void asm_subtract(int n, const double* __restrict__ w, double s,
                                        double* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = asm_sub(x[i], w != nullptr ? asm_mul(w[i], s) : s);
}

// rhs[row] += reference_diag * value (setReference; one thread).
extern "C" __global__ void asm_add_reference(int row, double value,
                                             const double* __restrict__ reference_diag,
                                             double* __restrict__ rhs) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        rhs[row] = asm_add(rhs[row], asm_mul(*reference_diag, value));
}

// y_i += x_i (an implicit source on the diagonal).
extern "C" __global__ void asm_add_vector(int n, const double* __restrict__ x,
                                          double* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = asm_add(y[i], x[i]);
}

// y_i += s_i x_i (an explicit source proportional to the field).
extern "C" __global__ void asm_add_product(int n, const double* __restrict__ s,
                                           const double* __restrict__ x,
                                           double* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = asm_add(y[i], asm_mul(s[i], x[i]));
}

// Gamma on each boundary face = its cell's (a per-cell Gamma from the device;
// fvm::LaplacianSystem::boundary_gamma), one thread per row.
extern "C" __global__ void asm_boundary_gamma(int n, const unsigned* __restrict__ boundary_ptr,
                                              const double* __restrict__ gamma,
                                              double* __restrict__ b_gamma) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const double g = gamma[row];
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) b_gamma[i] = g;
}

// Sum of the face values phi out of each row's cell (flow::Simple::divergence):
// + on the owner, - on the neighbour over the row's internal faces in face
// order, then + over its boundary faces. phi: internal faces in device order,
// then boundary faces in device boundary order (from n_faces on).
extern "C" __global__ void asm_divergence(int n, const u64* __restrict__ slice_ptr,
                                          const unsigned* __restrict__ face_codes,
                                          const unsigned char* __restrict__ face_slots,
                                          const unsigned* __restrict__ boundary_ptr,
                                          int n_faces, const double* __restrict__ phi,
                                          double* __restrict__ div) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    double s = 0.0;
    const u64 first = slice_ptr[blockIdx.x] + threadIdx.x, end = slice_ptr[blockIdx.x + 1];
    for (u64 k = first; k < end; k += h) {
        if (face_slots[k] == ASM_NO_SLOT) break;
        const unsigned code = face_codes[k];
        const double f = phi[code >> 1];
        s = (code & 1u) != 0 ? asm_sub(s, f) : asm_add(s, f);
    }
    const double* b_phi = phi + n_faces;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) s = asm_add(s, b_phi[i]);
    div[row] = s;
}

// phi = phi_pre - coeff (p_n - p_o) - correction on internal faces (device
// order; fvMatrix::flux as flow::Simple::pressure_equation writes it);
// `correction` null: none.
extern "C" __global__ void asm_subtract_flux(int n_faces, const unsigned* __restrict__ owner,
                                             const unsigned* __restrict__ neighbour,
                                             const double* __restrict__ coeffs,
                                             const double* __restrict__ correction,
                                             const double* __restrict__ p,
                                             const double* __restrict__ phi_pre,
                                             double* __restrict__ phi) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const double implicit = asm_mul(coeffs[d], asm_sub(p[neighbour[d]], p[owner[d]]));
    const double c = correction != nullptr ? correction[d] : 0.0;
    phi[d] = asm_sub(asm_sub(phi_pre[d], implicit), c);
}

// phi += (w c_o + (1 - w) c_n) |S_f| deltaCoeff_f (p_n - p_o) on internal faces
// (device order): SIMPLEC's flux term (flow::Simple::predict, consistent).
extern "C" __global__ void asm_add_gradient_flux(
    int n_faces, const unsigned* __restrict__ owner, const unsigned* __restrict__ neighbour,
    const double* __restrict__ weights, const double* __restrict__ mag_sf,
    const double* __restrict__ delta_coeffs, const double* __restrict__ c,
    const double* __restrict__ p, double* __restrict__ phi) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const u64 o = owner[d], nb = neighbour[d];
    const double w = weights[d];
    const double cf = asm_add(asm_mul(w, c[o]), asm_mul(asm_sub(1.0, w), c[nb]));
    const double t = asm_mul(asm_mul(asm_mul(cf, mag_sf[d]), delta_coeffs[d]), asm_sub(p[nb], p[o]));
    phi[d] = asm_add(phi[d], t);
}

// The boundary faces' part of asm_subtract_flux and asm_add_gradient_flux, one
// thread per row: phi_b = base_b -/+ (c_P |S_b|)(gradientInternal p_P +
// gradientBoundary), minus when `subtract` is nonzero (fvMatrix::flux, c = Gamma,
// base = phi_pre), plus otherwise (SIMPLEC, c = rAtU - rAU, base = phi).
extern "C" __global__ void asm_boundary_flux(
    int n, const unsigned* __restrict__ boundary_ptr, int n_faces,
    const double* __restrict__ b_mag_sf, const double* __restrict__ b_gradient_internal,
    const double* __restrict__ b_gradient_boundary, const double* __restrict__ c,
    const double* __restrict__ p, const double* base, double* phi, int subtract) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const double cr = c[row], pr = p[row];
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double sn_grad = asm_add(asm_mul(b_gradient_internal[i], pr), b_gradient_boundary[i]);
        const u64 at = (u64)n_faces + i;
        const double t = asm_mul(asm_mul(cr, b_mag_sf[i]), sn_grad);
        phi[at] = subtract != 0 ? asm_sub(base[at], t) : asm_add(base[at], t);
    }
}

// rowSum(A) (diagonal first, then the off-diagonals in slot order, as
// GpuCgBackend::new sums them on the host) and 1/diagonal (unless inv_diag
// is null) of a mod-SELL matrix; one thread per row, one block per slice.
extern "C" __global__ void modsell_row_sums(int n, const u64* __restrict__ slice_ptr,
                                            const int* __restrict__ codes,
                                            const double* __restrict__ vals,
                                            const double* __restrict__ diag,
                                            double* __restrict__ row_sums,
                                            double* __restrict__ inv_diag) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    const double d = diag[row];
    double s = d;
    const u64 end = slice_ptr[blockIdx.x + 1];
    for (u64 k = slice_ptr[blockIdx.x] + threadIdx.x; k < end; k += h)
        if (codes[k] != 0) s = asm_add(s, vals[k]);
    row_sums[row] = s;
    if (inv_diag != nullptr) inv_diag[row] = asm_div(1.0, d);
}

// The SIMPLE loop's cell-wise steps on the device (src/gpu/simple.rs), after
// assembly.cu in the one module (asm_* arithmetic: round-to-nearest, never
// contracted into FMAs, in the order of src/flow/simple.rs, so the device
// values equal the CPU's bit for bit). Cells in the pressure system's row order.

// The pressure equation's source q = -div / V (div: the flux sum out of the cell).
extern "C" __global__ void simple_source(int n, const double* __restrict__ div,
                                         const double* __restrict__ volumes,
                                         double* __restrict__ source) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) source[i] = asm_div(-div[i], volumes[i]);
}

// Explicit relaxation x = old + alpha (x - old) (p by alpha_p).
extern "C" __global__ void simple_relax(int n, double alpha, const double* __restrict__ old,
                                        double* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = asm_add(old[i], asm_mul(alpha, asm_sub(x[i], old[i])));
}

// U_c = HbyA_c - rAU (grad p)_c for component c; grad: 3 doubles per cell.
extern "C" __global__ void simple_correct_velocity(int n, int c, const double* __restrict__ hbya,
                                                   const double* __restrict__ r_au,
                                                   const double* __restrict__ grad,
                                                   double* __restrict__ u) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) u[i] = asm_sub(hbya[i], asm_mul(r_au[i], grad[3 * (unsigned long long)i + c]));
}

// The deferred correction times the flux, per internal face (device order),
// as Convection::correction and the source terms of Simple::momentum_equation:
// k < 0: linearUpwind, F (grad_P . (x_f - x_P)) with P the upwind cell (the
// owner when F >= 0); k >= 0: limitedLinear k, F psi(r) (linear - upwind) with
// OpenFOAM's r (NVDTVD) from delta = x_N - x_P. to_owner / to_neighbour:
// x_f - x_P and x_f - x_N per face (linearUpwind); delta per face (limitedLinear).
extern "C" __global__ void simple_deferred_correction(
    int n_faces, double k, const unsigned* __restrict__ owner,
    const unsigned* __restrict__ neighbour, const double* __restrict__ weights,
    const double* __restrict__ phi, const double* __restrict__ u, const double* __restrict__ grad,
    const double* __restrict__ to_owner, const double* __restrict__ to_neighbour,
    const double* __restrict__ delta, double* __restrict__ fc) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const double f = phi[d];
    const bool upwind_owner = f >= 0.0;
    const unsigned long long at = 3ull * (unsigned long long)d;
    const unsigned o = owner[d], nb = neighbour[d];
    const double* g = grad + 3ull * (unsigned long long)(upwind_owner ? o : nb);
    double correction;
    if (k < 0.0) {
        const double* t = upwind_owner ? to_owner + at : to_neighbour + at;
        correction = asm_dot(g, t[0], t[1], t[2]);
    } else {
        const double uo = u[o], un = u[nb];
        const double jump = asm_sub(un, uo);
        const double* dl = delta + at;
        const double along = asm_dot(dl, g[0], g[1], g[2]);
        double r;
        if (fabs(along) >= asm_mul(1000.0, fabs(jump)))
            r = asm_sub(asm_mul(asm_mul(2000.0, copysign(1.0, along)), copysign(1.0, jump)), 1.0);
        else
            r = asm_sub(asm_div(asm_mul(2.0, along), jump), 1.0);
        const double limiter =
            fmin(fmax(asm_mul(asm_div(2.0, fmax(k, 2.220446049250313e-16)), r), 0.0), 1.0);
        const double w = weights[d];
        const double linear = asm_add(asm_mul(w, uo), asm_mul(asm_sub(1.0, w), un));
        correction = asm_mul(limiter, asm_sub(linear, upwind_owner ? uo : un));
    }
    fc[d] = asm_mul(f, correction);
}

// The relaxed momentum matrix of one component, one thread per row, one block
// per slice (Simple::momentum_equation): the viscous matrix plus bounded
// upwind convection of the fluxes phi (device face layout) on the row's
// internal faces in face order, the deferred correction `fc` (null: upwind)
// on the right-hand side, the boundary faces' upwind terms, then
// fvMatrix::relax(alpha) with the current u; source = the relaxed right-hand
// side, b = source - V (grad p)_c.
extern "C" __global__ void simple_momentum_rows(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const unsigned* __restrict__ boundary_ptr,
    int n_faces, const double* __restrict__ phi, const double* __restrict__ fc,
    const double* __restrict__ visc_vals, const double* __restrict__ visc_diag,
    const double* __restrict__ visc_rhs, const double* __restrict__ b_value_internal,
    const double* __restrict__ b_value_boundary, const double* __restrict__ u, double alpha,
    const double* __restrict__ volumes, const double* __restrict__ grad_p, int c,
    double* __restrict__ vals, double* __restrict__ diag, double* __restrict__ source,
    double* __restrict__ b) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    const u64 first = slice_ptr[blockIdx.x] + threadIdx.x, end = slice_ptr[blockIdx.x + 1];
    double a = visc_diag[row], s = visc_rhs[row];
    for (u64 k = first; k < end; k += h) {
        const unsigned j = face_slots[k];
        if (j == ASM_NO_SLOT) break;
        const unsigned code = face_codes[k];
        const unsigned d = code >> 1;
        const double f = phi[d];
        const u64 slot = first + (u64)j * h;
        if ((code & 1u) != 0) {
            a = asm_add(a, asm_add(fmax(-f, 0.0), f));
            vals[slot] = asm_add(visc_vals[slot], fmin(-f, 0.0));
            if (fc != nullptr) s = asm_add(s, fc[d]);
        } else {
            a = asm_add(a, asm_sub(fmax(f, 0.0), f));
            vals[slot] = asm_add(visc_vals[slot], fmin(f, 0.0));
            if (fc != nullptr) s = asm_sub(s, fc[d]);
        }
    }
    const double* b_phi = phi + n_faces;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double f = b_phi[i];
        a = asm_add(a, asm_mul(f, asm_sub(b_value_internal[i], 1.0)));
        s = asm_sub(s, asm_mul(f, b_value_boundary[i]));
    }
    double off = 0.0;
    for (u64 k = first; k < end; k += h) {
        const unsigned j = face_slots[k];
        if (j == ASM_NO_SLOT) break;
        off = asm_add(off, fabs(vals[first + (u64)j * h]));
    }
    const double relaxed = asm_div(fmax(fabs(a), off), alpha);
    s = asm_add(s, asm_mul(asm_sub(relaxed, a), u[row]));
    diag[row] = relaxed;
    source[row] = s;
    b[row] = asm_sub(s, asm_mul(volumes[row], grad_p[3 * (u64)row + c]));
}

// a_P = the mean of the components' diagonals (fvVectorMatrix::A()); d1, d2
// may be null (fewer components).
extern "C" __global__ void simple_average_diagonal(int n, const double* __restrict__ d0,
                                                   const double* __restrict__ d1,
                                                   const double* __restrict__ d2,
                                                   double* __restrict__ a_p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a = d0[i], count = 1.0;
    if (d1 != nullptr) {
        a = asm_add(a, d1[i]);
        count = 2.0;
    }
    if (d2 != nullptr) {
        a = asm_add(a, d2[i]);
        count = 3.0;
    }
    a_p[i] = asm_div(a, count);
}

// HbyA_c = (source - sum_off a u_j - (a_ii - a_P) u_i) / a_P per row (one block
// per slice, the mod-SELL column codes as the SpMV reads them); `off_sum`
// (may be null) gets the signed sum of the row's off-diagonals (SIMPLEC).
extern "C" __global__ void simple_hbya(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ diag,
                                       const double* __restrict__ source,
                                       const double* __restrict__ a_p,
                                       const double* __restrict__ u, double* __restrict__ hbya,
                                       double* __restrict__ off_sum) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    const double ap = a_p[row];
    double s = source[row], off = 0.0;
    const u64 end = slice_ptr[blockIdx.x + 1];
    for (u64 k = slice_ptr[blockIdx.x] + threadIdx.x; k < end; k += h) {
        const int c = codes[k];
        if (c == 0) continue;
        const u64 col = c > 0 ? (u64)(c - 1) : (u64)blockIdx.x * h + (u64)(-(c + 1));
        s = asm_sub(s, asm_mul(vals[k], u[col]));
        off = asm_add(off, vals[k]);
    }
    s = asm_sub(s, asm_mul(asm_sub(diag[row], ap), u[row]));
    hbya[row] = asm_div(s, ap);
    if (off_sum != nullptr) off_sum[row] = off;
}

// rAU = V / a_P; with `off_sum` (SIMPLEC) also rAtU = V / (a_P + sum_off a).
extern "C" __global__ void simple_r_au(int n, const double* __restrict__ volumes,
                                       const double* __restrict__ a_p,
                                       const double* __restrict__ off_sum,
                                       double* __restrict__ r_au, double* __restrict__ r_atu) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    r_au[i] = asm_div(volumes[i], a_p[i]);
    if (off_sum != nullptr) r_atu[i] = asm_div(volumes[i], asm_add(a_p[i], off_sum[i]));
}

// out = x - y.
extern "C" __global__ void simple_difference(int n, const double* __restrict__ x,
                                             const double* __restrict__ y,
                                             double* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = asm_sub(x[i], y[i]);
}

// SIMPLEC: HbyA_c -= (rAU - rAtU) (grad p)_c.
extern "C" __global__ void simple_simplec_hbya(int n, int c, const double* __restrict__ r_au,
                                               const double* __restrict__ r_atu,
                                               const double* __restrict__ grad,
                                               double* __restrict__ hbya) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        hbya[i] = asm_sub(hbya[i],
                          asm_mul(asm_sub(r_au[i], r_atu[i]), grad[3 * (unsigned long long)i + c]));
}

// phi_f = (w h_o + (1 - w) h_n) . S_f on internal faces (device order), h the
// three components (null: zero); Simple::face_flux.
extern "C" __global__ void simple_face_flux(int n_faces, const unsigned* __restrict__ owner,
                                            const unsigned* __restrict__ neighbour,
                                            const double* __restrict__ weights,
                                            const double* __restrict__ sf,
                                            const double* __restrict__ h0,
                                            const double* __restrict__ h1,
                                            const double* __restrict__ h2,
                                            double* __restrict__ phi) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const unsigned o = owner[d], nb = neighbour[d];
    const double w = weights[d], v = asm_sub(1.0, w);
    const double* hs[3] = {h0, h1, h2};
    double f[3];
    for (int c = 0; c < 3; ++c)
        f[c] = hs[c] == nullptr ? 0.0 : asm_add(asm_mul(w, hs[c][o]), asm_mul(v, hs[c][nb]));
    phi[d] = asm_dot(sf + 3 * (unsigned long long)d, f[0], f[1], f[2]);
}

// The boundary faces' part of simple_face_flux, one thread per row: the
// components' face values valueInternal h_P + valueBoundary (zero where h_c is
// null) dotted with S_b; vi_c / vb_c per device boundary face.
extern "C" __global__ void simple_boundary_face_flux(
    int n, const unsigned* __restrict__ boundary_ptr, int n_faces,
    const double* __restrict__ b_sf, const double* __restrict__ h0,
    const double* __restrict__ vi0, const double* __restrict__ vb0,
    const double* __restrict__ h1, const double* __restrict__ vi1,
    const double* __restrict__ vb1, const double* __restrict__ h2,
    const double* __restrict__ vi2, const double* __restrict__ vb2, double* __restrict__ phi) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double f0 = h0 == nullptr ? 0.0 : asm_add(asm_mul(vi0[i], h0[row]), vb0[i]);
        const double f1 = h1 == nullptr ? 0.0 : asm_add(asm_mul(vi1[i], h1[row]), vb1[i]);
        const double f2 = h2 == nullptr ? 0.0 : asm_add(asm_mul(vi2[i], h2[row]), vb2[i]);
        phi[(u64)n_faces + i] = asm_dot(b_sf + 3 * (u64)i, f0, f1, f2);
    }
}

//! The device kernels emulated on the host, statement for statement
//! (`kernels/assembly.cu`), on the very arrays the device gets. They must
//! reproduce the CPU assembly bit for bit: this checks the assembly map, the
//! host arrays and the kernels' order of operations without a device;
//! `tests/gpu_assembly.rs` runs the kernels themselves.

use super::*;
use crate::fvm::testing::{
    all_neumann_problem, mixed_conditions, random_field, schemes, source,
    varying_and_uniform_gamma, varying_gamma,
};
use crate::fvm::{BoundaryCondition, CellField, PatchValues};
use crate::mesh::Geometry;

/// Everything the kernels read, in host memory.
struct Host {
    map: AssemblyMap,
    ordering: Permutation,
    statics: StaticArrays,
    gradient: GradientArrays,
    problem: ProblemArrays,
    schemes: Schemes,
    dt: f64,
    singular: Option<SingularPolicy>,
}

impl Host {
    /// The arrays for `problem`, which `system` was last assembled with.
    fn new(
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
        ordering: Permutation,
        slice_height: usize,
    ) -> Self {
        let map = AssemblyMap::new(system.mesh(), &ordering, slice_height).unwrap();
        let values = system.evaluate(problem).unwrap();
        let statics = StaticArrays::new(system, &map, &ordering);
        let (faces, boundary) = (&map.device_faces, &map.device_boundary);
        let arrays = ProblemArrays::new(&values, faces, boundary, &ordering);
        let gradient = arrays
            .gradient
            .clone()
            .unwrap_or_else(|| GradientArrays::new(system.cell_gradient(), faces, boundary));
        Self {
            map,
            ordering,
            statics,
            gradient,
            problem: arrays,
            schemes: system.schemes(),
            dt: match values.time {
                TimeScheme::Euler { dt } => dt,
                TimeScheme::SteadyState => 0.0,
            },
            singular: values.singular,
        }
    }

    fn n(&self) -> usize {
        self.statics.volumes.len()
    }
    fn h(&self) -> usize {
        self.map.pattern.slice_height()
    }

    /// The kernels' loop over a row's faces: (slot position, face code).
    fn row_faces(&self, row: usize) -> impl Iterator<Item = (usize, u32)> + '_ {
        let h = self.h();
        let ptr = self.map.pattern.slice_ptr();
        let (first, end) = (ptr[row / h] as usize + row % h, ptr[row / h + 1] as usize);
        (first..end).step_by(h).map_while(move |k| {
            let j = self.map.face_slots[k];
            (j != NO_SLOT).then(|| (first + j as usize * h, self.map.face_codes[k]))
        })
    }

    /// The row's boundary faces (device boundary indices).
    fn row_boundary(&self, row: usize) -> std::ops::Range<usize> {
        self.map.boundary_ptr[row] as usize..self.map.boundary_ptr[row + 1] as usize
    }

    fn reference(&self) -> Option<(usize, f64)> {
        pinned_row(self.singular, &self.ordering)
    }

    /// `asm_face_coefficients`: (coefficients, Γ_f|S_f|).
    fn face_coefficients(&self) -> (Vec<f64>, Vec<f64>) {
        let s = &self.statics;
        let harmonic = self.schemes.gamma_interpolation == GammaInterpolation::Harmonic;
        (0..s.weights.len())
            .map(|d| {
                let gamma_f = match &self.problem.gamma {
                    None => self.problem.gamma_uniform,
                    Some(g) => interpolate(
                        harmonic,
                        g[s.face_owner[d] as usize],
                        g[s.face_neighbour[d] as usize],
                        s.weights[d],
                    ),
                };
                let gms = gamma_f * s.mag_sf[d];
                (gms * s.delta_coeffs[d], gms)
            })
            .unzip()
    }

    /// `asm_matrix_rows`: (matrix, explicit rhs, Γ_b|S_b|, reference diagonal).
    fn matrix_rows(&self, coeffs: &[f64]) -> (ModSell, Vec<f64>, Vec<f64>, f64) {
        let (s, p) = (&self.statics, &self.problem);
        let n = self.n();
        let mut vals = vec![0.0; self.map.face_slots.len()];
        let (mut diag, mut explicit) = (vec![0.0; n], vec![0.0; n]);
        let mut b_gms = vec![0.0; p.b_gamma.len()];
        let mut reference_diag = f64::NAN;
        let reference_row = self.reference().map(|r| r.0);
        for row in 0..n {
            let mut a = 0.0;
            for (slot, code) in self.row_faces(row) {
                let c = coeffs[(code >> 1) as usize];
                a += c;
                vals[slot] = 0.0 - c;
            }
            let mut b = p.source[row] * s.volumes[row];
            for i in self.row_boundary(row) {
                let gms = p.b_gamma[i] * s.b_mag_sf[i];
                b_gms[i] = gms;
                a += -gms * p.b_gradient_internal[i];
                b += gms * p.b_gradient_boundary[i];
            }
            if self.dt > 0.0 {
                a += s.volumes[row] / self.dt;
            }
            if Some(row) == reference_row {
                reference_diag = a;
                a += a;
            }
            diag[row] = a;
            explicit[row] = b;
        }
        let m = &self.map.pattern;
        let matrix = ModSell::from_parts(
            m.slice_height(),
            diag,
            m.slice_ptr().to_vec(),
            m.codes().to_vec(),
            vals,
        )
        .unwrap();
        (matrix, explicit, b_gms, reference_diag)
    }

    /// `asm_gradient` of `p` (row order): 3 doubles per row.
    fn gradient(&self, p: &[f64]) -> Vec<f64> {
        let (s, g, pa) = (&self.statics, &self.gradient, &self.problem);
        let gauss = self.schemes.grad == GradScheme::GaussLinear;
        let b_vectors = if gauss { &s.b_sf } else { &g.b_ls };
        let h = self.h();
        let codes = self.map.pattern.codes();
        let mut grad = vec![0.0; 3 * self.n()];
        for row in 0..self.n() {
            let pr = p[row];
            let mut acc = [0.0f64; 3];
            for (slot, code) in self.row_faces(row) {
                let c = codes[slot];
                let p_other = if c > 0 {
                    p[c as usize - 1]
                } else {
                    p[(row / h) * h + (-(c + 1)) as usize]
                };
                let d = (code >> 1) as usize;
                let is_neighbour = code & 1 == 1;
                let (p_own, p_nei) = if is_neighbour {
                    (p_other, pr)
                } else {
                    (pr, p_other)
                };
                let sign = if is_neighbour { -1.0 } else { 1.0 };
                for (i, acc) in acc.iter_mut().enumerate() {
                    // x − y is x + (−y) exactly: the sign is folded in.
                    *acc += sign
                        * if gauss {
                            s.sf[3 * d + i] * (s.weights[d] * (p_own - p_nei) + p_nei)
                        } else {
                            let l = if is_neighbour {
                                &g.ls_neighbour
                            } else {
                                &g.ls_owner
                            };
                            l[3 * d + i] * (p_nei - p_own)
                        };
                }
            }
            for i in self.row_boundary(row) {
                let value = pa.b_value_internal[i] * pr + pa.b_value_boundary[i];
                let m = if gauss { value } else { value - pr };
                for (k, acc) in acc.iter_mut().enumerate() {
                    *acc += b_vectors[3 * i + k] * m;
                }
            }
            for (k, acc) in acc.iter().enumerate() {
                grad[3 * row + k] = if gauss { acc / s.volumes[row] } else { *acc };
            }
        }
        grad
    }

    /// `asm_correction_flux`.
    fn correction_flux(&self, gms: &[f64], grad: &[f64], p: &[f64]) -> Vec<f64> {
        let s = &self.statics;
        (0..s.weights.len())
            .map(|d| {
                let (o, nb) = (s.face_owner[d] as usize, s.face_neighbour[d] as usize);
                let w = s.weights[d];
                let f: Vec<f64> = (0..3)
                    .map(|i| w * (grad[3 * o + i] - grad[3 * nb + i]) + grad[3 * nb + i])
                    .collect();
                let k = &s.k[3 * d..3 * d + 3];
                let mut correction = k[0] * f[0] + k[1] * f[1] + k[2] * f[2];
                if let SnGradScheme::Limited(psi) = self.schemes.sn_grad {
                    let uncorrected = s.delta_coeffs[d] * (p[nb] - p[o]);
                    let limiter = (psi * uncorrected.abs()
                        / ((1.0 - psi) * correction.abs() + 1e-15))
                        .min(1.0);
                    correction *= limiter;
                }
                gms[d] * correction
            })
            .collect()
    }

    /// `asm_rhs` (before the singular treatment).
    fn rhs(
        &self,
        explicit: &[f64],
        correction: Option<(&[f64], &[f64], &[f64])>,
        old: Option<&[f64]>,
    ) -> Vec<f64> {
        let (s, pa) = (&self.statics, &self.problem);
        (0..self.n())
            .map(|row| {
                let mut b = explicit[row];
                if let Some(old) = old {
                    b += s.volumes[row] / self.dt * old[row];
                }
                if let Some((flux, b_gms, grad)) = correction {
                    for (_, code) in self.row_faces(row) {
                        let f = flux[(code >> 1) as usize];
                        b = if code & 1 == 1 { b - f } else { b + f };
                    }
                    if self.schemes.sn_grad == SnGradScheme::BoundaryCorrected {
                        let g = &grad[3 * row..3 * row + 3];
                        for i in self.row_boundary(row) {
                            let fraction = -pa.b_gradient_internal[i] / s.b_delta_coeffs[i];
                            if fraction != 0.0 {
                                let k = &s.b_k[3 * i..3 * i + 3];
                                let kg = k[0] * g[0] + k[1] * g[1] + k[2] * g[2];
                                b += fraction * b_gms[i] * kg;
                            }
                        }
                    }
                }
                b
            })
            .collect()
    }
}

/// `asm_interpolate`.
fn interpolate(harmonic: bool, owner: f64, neighbour: f64, w: f64) -> f64 {
    if owner == neighbour {
        return owner;
    }
    if harmonic {
        let inv_n = 1.0 / neighbour;
        1.0 / (w * (1.0 / owner - inv_n) + inv_n)
    } else {
        w * (owner - neighbour) + neighbour
    }
}

/// Emulates the whole device path for `problem` and checks it against the CPU
/// system: matrix, explicit rhs, gradient and `update_rhs` with a random
/// field (and old-time field), for RCM and the identity ordering and slice
/// heights 32 and 512. Singular problems compare the right-hand side to
/// 1e-14 of its largest value (the device sums it in another order).
fn check(
    name: &str,
    mesh: &Mesh,
    geometry: &Geometry,
    schemes: Schemes,
    problem: &LaplacianProblem,
) {
    let mut system = LaplacianSystem::new(mesh, geometry, schemes, problem).unwrap();
    let n = mesh.n_cells();
    let rcm = reverse_cuthill_mckee(&system.matrix);
    for (ordering, h) in [
        (rcm.clone(), 32),
        (rcm, 512),
        (Permutation::identity(n), 64),
    ] {
        let what = format!("{name}, H = {h}");
        let host = Host::new(&system, problem, ordering.clone(), h);
        let (coeffs, gms) = host.face_coefficients();
        let (matrix, explicit, b_gms, _) = host.matrix_rows(&coeffs);
        let csr = ordering.inverse().apply_symmetric(&matrix.to_csr());
        assert_eq!(csr, system.matrix, "{what}: matrix");
        assert_eq!(
            ordering.to_old(&explicit),
            system.explicit_rhs(),
            "{what}: explicit rhs"
        );
        let p = random_field(n, 7);
        let old = random_field(n, 8);
        let old = matches!(problem.time, TimeScheme::Euler { .. }).then_some(old.as_slice());
        system.update_rhs(&p, old).unwrap();
        let p_rows = ordering.to_new(&p);
        let grad = host.gradient(&p_rows);
        let cpu_grad = system.gradient(&p);
        let device_grad: Vec<Vec3> = ordering.to_old(
            &grad
                .chunks_exact(3)
                .map(|g| Vec3::new(g[0], g[1], g[2]))
                .collect::<Vec<_>>(),
        );
        assert_eq!(device_grad, cpu_grad, "{what}: gradient");
        let corrected = schemes.sn_grad.is_corrected();
        let flux = if corrected {
            host.correction_flux(&gms, &grad, &p_rows)
        } else {
            Vec::new()
        };
        let old_rows = old.map(|o| ordering.to_new(o));
        let mut rhs = host.rhs(
            &explicit,
            corrected.then_some((flux.as_slice(), b_gms.as_slice(), grad.as_slice())),
            old_rows.as_deref(),
        );
        match host.singular {
            None => assert_eq!(ordering.to_old(&rhs), system.rhs, "{what}: rhs"),
            Some(policy) => {
                // What the device does after `asm_rhs`, sums aside.
                assert!(policy.project, "{what}: the tests project");
                let sum: f64 = rhs.iter().sum();
                let total: f64 = geometry.cell_volumes.iter().sum();
                for (b, v) in rhs.iter_mut().zip(&host.statics.volumes) {
                    *b -= v * (sum / total);
                }
                if let Some((row, value)) = host.reference() {
                    let (_, _, _, reference_diag) = host.matrix_rows(&coeffs);
                    rhs[row] += reference_diag * value;
                }
                let rhs = ordering.to_old(&rhs);
                let scale = system.rhs.iter().fold(0.0f64, |m, b| m.max(b.abs()));
                for (c, (a, b)) in rhs.iter().zip(&system.rhs).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-14 * scale,
                        "{what}: rhs {c}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn emulated_kernels_reproduce_the_cpu_assembly_on_real_meshes() {
    use GradScheme::{GaussLinear as Gauss, LeastSquares as Ls};
    use SnGradScheme::*;
    let cases: [(&str, SnGradScheme, GradScheme, bool, bool); 8] = [
        (
            "box:5x4x3:tet:perturb=0.2:renumber",
            Corrected,
            Gauss,
            true,
            false,
        ),
        (
            "box:5x4x3:tet:perturb=0.2:renumber",
            Limited(0.5),
            Ls,
            false,
            true,
        ),
        ("meshes/foam/warped", Corrected, Ls, true, true),
        ("meshes/foam/warped", BoundaryCorrected, Ls, false, false),
        ("meshes/foam/polydual", BoundaryCorrected, Gauss, true, true),
        (
            "meshes/gmsh/tet_cube.v41.msh",
            Uncorrected,
            Gauss,
            true,
            false,
        ),
        ("meshes/foam/cavity", Corrected, Ls, true, true),
        ("box:6x5x1:2d:perturb=0.3", Orthogonal, Gauss, false, false),
    ];
    for (i, (spec, sn_grad, grad, harmonic, euler)) in cases.into_iter().enumerate() {
        let mesh = crate::mesh::load(spec).unwrap();
        let geometry = mesh.geometry().unwrap();
        for (what, problem) in varying_and_uniform_gamma(&mesh, i as u64, euler) {
            check(
                &format!("{spec} {sn_grad:?} {grad:?} gamma {what}"),
                &mesh,
                &geometry,
                schemes(sn_grad, grad, harmonic),
                &problem,
            );
        }
    }
}

#[test]
fn emulated_kernels_reproduce_singular_problems() {
    let mesh = crate::mesh::load("box:4x5x3:perturb=0.25").unwrap();
    let geometry = mesh.geometry().unwrap();
    for reference in [
        Reference::ZeroMean,
        Reference::Cell {
            cell: 17,
            value: 0.3,
        },
    ] {
        let problem = all_neumann_problem(&mesh, reference);
        check(
            &format!("all-Neumann {reference:?}"),
            &mesh,
            &geometry,
            Schemes::default(),
            &problem,
        );
    }
}

#[test]
fn emulated_re_assembly_with_new_gamma_and_conditions() {
    let mesh = crate::mesh::load("box:5x4x4:tet:perturb=0.2:renumber").unwrap();
    let geometry = mesh.geometry().unwrap();
    let schemes = schemes(
        SnGradScheme::BoundaryCorrected,
        GradScheme::LeastSquares,
        true,
    );
    let first = LaplacianProblem::steady(varying_gamma(), source(), mixed_conditions(&mesh, 3));
    let mut system = LaplacianSystem::new(&mesh, &geometry, schemes, &first).unwrap();
    let ordering = reverse_cuthill_mckee(&system.matrix);
    let before = Host::new(&system, &first, ordering.clone(), 64);
    // Other Γ, other conditions (fixedValue faces change the least-squares fit), a time step.
    let mut second = LaplacianProblem::steady(
        CellField::function(|c| 2.0 + c.x * c.x),
        CellField::Uniform(-1.0),
        mixed_conditions(&mesh, 6),
    );
    second.time = TimeScheme::Euler { dt: 0.3 };
    system.reassemble(&second).unwrap();
    let after = Host::new(&system, &second, ordering.clone(), 64);
    // The map depends on the mesh only (the pattern's values are the matrix's).
    let (b, a) = (&before.map, &after.map);
    assert_eq!(
        (&b.face_codes, &b.face_slots, &b.device_faces),
        (&a.face_codes, &a.face_slots, &a.device_faces)
    );
    assert_eq!(
        (&b.boundary_ptr, &b.device_boundary, b.pattern.codes()),
        (&a.boundary_ptr, &a.device_boundary, a.pattern.codes())
    );
    assert!(after.problem.gradient.is_some());
    let (coeffs, _) = after.face_coefficients();
    let (matrix, _, _, _) = after.matrix_rows(&coeffs);
    assert_eq!(
        ordering.inverse().apply_symmetric(&matrix.to_csr()),
        system.matrix
    );
    let p = random_field(mesh.n_cells(), 1);
    assert_ne!(
        before.gradient(&p).as_slice(),
        after.gradient(&p).as_slice()
    );
    check("re-assembled", &mesh, &geometry, schemes, &second);
}

#[test]
fn the_map_covers_every_slot_once_and_numbers_faces_by_rows() {
    let mesh = crate::mesh::load("meshes/foam/polydual").unwrap();
    let geometry = mesh.geometry().unwrap();
    let problem = LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::Uniform(0.0),
        vec![BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)); mesh.patches().len()],
    );
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    let ordering = reverse_cuthill_mckee(&system.matrix);
    let host = Host::new(&system, &problem, ordering.clone(), 32);
    let map = &host.map;
    let codes = map.pattern.codes();
    let mut seen = vec![0u8; mesh.n_internal_faces()];
    let mut next_new_face = 0;
    for row in 0..mesh.n_cells() {
        let cell = ordering.new_to_old()[row] as usize;
        let mut slots: Vec<usize> = Vec::new();
        let mut previous_face = None;
        for (slot, code) in host.row_faces(row) {
            let f = map.device_faces[(code >> 1) as usize] as usize;
            // The slot's column is the cell across face f; the side bit says which side.
            let (owner, neighbour) = (mesh.owner()[f] as usize, mesh.neighbour()[f] as usize);
            let (this, other) = if code & 1 == 1 {
                (neighbour, owner)
            } else {
                (owner, neighbour)
            };
            assert_eq!(this, cell);
            let c = codes[slot];
            let column = if c > 0 {
                c as usize - 1
            } else {
                (row / 32) * 32 + (-(c + 1)) as usize
            };
            assert_eq!(column, ordering.old_to_new()[other] as usize);
            assert!(previous_face < Some(f), "faces in face order");
            previous_face = Some(f);
            seen[f] += 1;
            slots.push(slot);
            // Device faces are numbered as the rows first meet them.
            if seen[f] == 1 {
                assert_eq!(code >> 1, next_new_face);
                next_new_face += 1;
            }
        }
        slots.sort_unstable();
        slots.dedup();
        let ptr = map.pattern.slice_ptr();
        let row_slots = (ptr[row / 32] as usize + row % 32..ptr[row / 32 + 1] as usize)
            .step_by(32)
            .filter(|&s| codes[s] != 0)
            .count();
        assert_eq!(slots.len(), row_slots, "row {row}: every slot once");
        let boundary: Vec<u32> = host
            .row_boundary(row)
            .map(|i| map.device_boundary[i])
            .collect();
        let first = mesh.n_internal_faces();
        let expected: Vec<u32> = (first..mesh.n_faces())
            .filter(|&f| mesh.owner()[f] as usize == cell)
            .map(|f| (f - first) as u32)
            .collect();
        assert_eq!(boundary, expected, "row {row}: boundary faces");
    }
    assert!(
        seen.iter().all(|&s| s == 2),
        "each face on both of its rows"
    );
}

/// The assembly map as it was built from the host's CSR pattern before its
/// passes were fused: the permuted CSR, binary searches per entry, boundary
/// faces counted per row. The map built from the mesh must equal it for the
/// mesh's zero-valued pattern.
fn reference_map(
    mesh: &Mesh,
    matrix: &Csr,
    ordering: &Permutation,
    slice_height: usize,
) -> Result<AssemblyMap, AssemblyError> {
    let n = mesh.n_cells();
    if matrix.n_rows() != n || ordering.len() != n {
        return Err(GpuError::Invalid(format!(
            "assembly map: the mesh has {n} cells, the matrix {} rows, the ordering {}",
            matrix.n_rows(),
            ordering.len()
        ))
        .into());
    }
    let n_internal = mesh.n_internal_faces();
    if n_internal >= 1 << 30 {
        return Err(AssemblyError::Unsupported(format!(
            "{n_internal} internal faces; face codes hold fewer than 2^30"
        )));
    }
    let permuted = ordering.apply_symmetric(matrix);
    let pattern = ModSell::from_csr(&permuted, slice_height).map_err(GpuError::Invalid)?;
    let mut active = vec![true; mesh.n_faces() - n_internal];
    for patch in mesh.patches().iter().filter(|p| p.kind == PatchKind::Empty) {
        active[patch.boundary_faces(n_internal)].fill(false);
    }
    let (offsets, cell_faces) = mesh.cell_faces();
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let (new_to_old, old_to_new) = (ordering.new_to_old(), ordering.old_to_new());
    let h = slice_height;
    let faces_of = |cell: usize| &cell_faces[offsets[cell] as usize..offsets[cell + 1] as usize];
    // The row across internal face f from `cell`, and whether `cell` is
    // the face's neighbour.
    let across = |f: usize, cell: usize| {
        let is_neighbour = neighbour[f] as usize == cell;
        let other = if is_neighbour { owner[f] } else { neighbour[f] } as usize;
        (old_to_new[other] as usize, is_neighbour)
    };
    // Pass 1, rows in parallel: checks, and per row the faces it meets
    // first (the row before the other side's) and its active boundary faces.
    let mut counts = vec![(0u32, 0u32); n];
    let first_error = counts
        .par_iter_mut()
        .enumerate()
        .filter_map(|(row, count)| {
            let checked = (|| {
            let cell = new_to_old[row] as usize;
            let cols = permuted.row(row).0;
            let bad = |what: String| GpuError::Invalid(format!("assembly map: {what}"));
            cols.binary_search(&(row as u32))
                .map_err(|_| bad(format!("row {row} has no diagonal")))?;
            let n_off = cols.len() - 1;
            if n_off > NO_SLOT as usize {
                return Err(AssemblyError::Unsupported(format!(
                    "cell {cell} has {n_off} neighbours; the device assembly handles up to {NO_SLOT}"
                )));
            }
            let (mut step, mut first_met, mut boundary) = (0, 0u32, 0u32);
            for &f in faces_of(cell) {
                let f = f as usize;
                if f >= n_internal {
                    boundary += u32::from(active[f - n_internal]);
                    continue;
                }
                let (column, _) = across(f, cell);
                let found = cols.binary_search(&(column as u32)).is_ok() && column != row;
                if !found || step >= n_off {
                    return Err(bad(format!(
                        "face {f} of cell {cell} (row {row}) has no off-diagonal slot of its own"
                    ))
                    .into());
                }
                first_met += u32::from(row < column);
                step += 1;
            }
            if step != n_off {
                return Err(bad(format!(
                    "row {row} has {n_off} off-diagonals but cell {cell} has {step} internal faces"
                ))
                .into());
            }
            Ok((first_met, boundary))
            })();
            match checked {
                Ok(c) => {
                    *count = c;
                    None
                }
                Err(e) => Some((row, e)),
            }
        })
        // The first failing row, as a pass in row order reports it.
        .min_by_key(|(row, _)| *row);
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    // Device faces in the order the rows first meet them, device
    // boundary faces in row order: offsets of each row's share.
    let mut face_start = Vec::with_capacity(n + 1);
    let mut boundary_ptr = Vec::with_capacity(n + 1);
    face_start.push(0u32);
    boundary_ptr.push(0u32);
    for &(first_met, boundary) in &counts {
        face_start.push(face_start.last().unwrap() + first_met);
        boundary_ptr.push(boundary_ptr.last().unwrap() + boundary);
    }
    drop(counts);
    if face_start[n] as usize != n_internal {
        return Err(GpuError::Invalid(format!(
            "assembly map: the rows meet {} of the {n_internal} internal faces",
            face_start[n]
        ))
        .into());
    }
    // Pass 2, blocks of rows in parallel: each fills its own ranges of
    // `device_faces` and `device_boundary`, and the device number of the
    // faces it meets first (each face has one such row).
    const BLOCK: usize = 4096;
    let blocks: Vec<std::ops::Range<usize>> = (0..n)
        .step_by(BLOCK)
        .map(|first| first..(first + BLOCK).min(n))
        .collect();
    let mut device_faces = vec![0u32; n_internal];
    let mut device_boundary = vec![0u32; boundary_ptr[n] as usize];
    let device_id: Vec<AtomicU32> = (0..n_internal).map(|_| AtomicU32::new(0)).collect();
    let face_parts = crate::slices::split_lengths(
        &mut device_faces,
        blocks
            .iter()
            .map(|b| (face_start[b.end] - face_start[b.start]) as usize),
    );
    let boundary_parts = crate::slices::split_lengths(
        &mut device_boundary,
        blocks
            .iter()
            .map(|b| (boundary_ptr[b.end] - boundary_ptr[b.start]) as usize),
    );
    face_parts
        .into_par_iter()
        .zip(boundary_parts)
        .zip(&blocks)
        .for_each(|((faces, boundary), rows)| {
            let (mut next_face, mut next_boundary) = (0, 0);
            let first_id = face_start[rows.start];
            for row in rows.clone() {
                let cell = new_to_old[row] as usize;
                for &f in faces_of(cell) {
                    let f = f as usize;
                    if f >= n_internal {
                        if active[f - n_internal] {
                            boundary[next_boundary] = (f - n_internal) as u32;
                            next_boundary += 1;
                        }
                    } else if row < across(f, cell).0 {
                        faces[next_face] = f as u32;
                        device_id[f].store(first_id + next_face as u32, Ordering::Relaxed);
                        next_face += 1;
                    }
                }
            }
        });
    // Pass 3, slices in parallel: each row's face codes and slots at its
    // mod-SELL positions (a slice's positions are its own).
    let slots = pattern.values().len();
    let (mut face_codes, mut face_slots) = (vec![0u32; slots], vec![NO_SLOT; slots]);
    let lengths = || {
        pattern
            .slice_ptr()
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
    };
    crate::slices::split_lengths(&mut face_codes, lengths())
        .into_par_iter()
        .zip(crate::slices::split_lengths(&mut face_slots, lengths()))
        .enumerate()
        .for_each(|(slice, (codes, slots))| {
            let rows = slice * h..((slice + 1) * h).min(n);
            for (row, &cell) in rows.clone().zip(&new_to_old[rows]) {
                let cell = cell as usize;
                let cols = permuted.row(row).0;
                let diag_at = cols.binary_search(&(row as u32)).unwrap_or(0);
                let mut at_slot = row % h;
                for &f in faces_of(cell) {
                    let f = f as usize;
                    if f >= n_internal {
                        continue;
                    }
                    let (column, is_neighbour) = across(f, cell);
                    let at = cols.binary_search(&(column as u32)).unwrap_or(0);
                    let id = device_id[f].load(Ordering::Relaxed);
                    codes[at_slot] = (id << 1) | u32::from(is_neighbour);
                    slots[at_slot] = if at < diag_at { at } else { at - 1 } as u8;
                    at_slot += h;
                }
            }
        });
    Ok(AssemblyMap {
        pattern,
        face_codes,
        face_slots,
        device_faces,
        boundary_ptr,
        device_boundary,
    })
}

/// Face codes, face slots, device faces, boundary pointers, device boundary faces.
type MapArrays = (Vec<u32>, Vec<u8>, Vec<u32>, Vec<u32>, Vec<u32>);

/// The assembly map as one pass over the rows in order builds it from the
/// host's CSR pattern: the definition that the parallel [`AssemblyMap::new`]
/// must equal.
fn map_in_one_pass(mesh: &Mesh, matrix: &Csr, ordering: &Permutation, h: usize) -> MapArrays {
    let n_internal = mesh.n_internal_faces();
    let permuted = ordering.apply_symmetric(matrix);
    let pattern = ModSell::from_csr(&permuted, h).unwrap();
    let slots = pattern.values().len();
    let (mut codes, mut face_slots) = (vec![0u32; slots], vec![NO_SLOT; slots]);
    let (mut faces, mut boundary_ptr, mut boundary) = (Vec::new(), vec![0u32], Vec::new());
    let (offsets, cell_faces) = mesh.cell_faces();
    let mut device_id = vec![u32::MAX; n_internal];
    let empty: Vec<bool> = (0..mesh.n_faces() - n_internal)
        .map(|b| {
            mesh.patches()
                .iter()
                .any(|p| p.kind == PatchKind::Empty && p.boundary_faces(n_internal).contains(&b))
        })
        .collect();
    for (row, &cell) in ordering.new_to_old().iter().enumerate() {
        let cell = cell as usize;
        let cols = permuted.row(row).0;
        let diag_at = cols.binary_search(&(row as u32)).unwrap();
        let base = pattern.slice_ptr()[row / h] as usize + row % h;
        let mut step = 0;
        for &f in &cell_faces[offsets[cell] as usize..offsets[cell + 1] as usize] {
            let f = f as usize;
            if f >= n_internal {
                if !empty[f - n_internal] {
                    boundary.push((f - n_internal) as u32);
                }
                continue;
            }
            let is_neighbour = mesh.neighbour()[f] as usize == cell;
            let other = if is_neighbour {
                mesh.owner()[f]
            } else {
                mesh.neighbour()[f]
            };
            let at = cols
                .binary_search(&ordering.old_to_new()[other as usize])
                .unwrap();
            if device_id[f] == u32::MAX {
                device_id[f] = faces.len() as u32;
                faces.push(f as u32);
            }
            codes[base + step * h] = (device_id[f] << 1) | u32::from(is_neighbour);
            face_slots[base + step * h] = if at < diag_at { at } else { at - 1 } as u8;
            step += 1;
        }
        boundary_ptr.push(boundary.len() as u32);
    }
    (codes, face_slots, faces, boundary_ptr, boundary)
}

#[test]
fn the_parallel_map_equals_the_one_pass_map() {
    for spec in [
        "meshes/foam/polydual",
        "box:5x4x3:tet:perturb=0.2:renumber",
        "box:6x5x1:2d:perturb=0.3",
        "box:40x30x20:renumber",
    ] {
        let (mesh, matrix) = mesh_and_pattern(spec);
        let n = mesh.n_cells();
        for ordering in [reverse_cuthill_mckee(&matrix), Permutation::identity(n)] {
            for h in [32, 64] {
                let map = AssemblyMap::new(&mesh, &ordering, h).unwrap();
                let (codes, slots, faces, boundary_ptr, boundary) =
                    map_in_one_pass(&mesh, &matrix, &ordering, h);
                assert_eq!(map.face_codes, codes, "{spec} h {h}");
                assert_eq!(map.face_slots, slots, "{spec} h {h}");
                assert_eq!(map.device_faces, faces, "{spec} h {h}");
                assert_eq!(map.boundary_ptr, boundary_ptr, "{spec} h {h}");
                assert_eq!(map.device_boundary, boundary, "{spec} h {h}");
                let permuted = ordering.apply_symmetric(&matrix.zeros_like());
                assert_eq!(map.pattern, ModSell::from_csr(&permuted, h).unwrap());
            }
        }
    }
}

#[test]
fn values_evaluated_on_another_mesh_are_refused() {
    let mesh = crate::mesh::load("box:4x4x3").unwrap();
    let other = crate::mesh::load("box:5x4x3").unwrap();
    let problem = |mesh: &Mesh| {
        LaplacianProblem::steady(CellField::Uniform(1.0), source(), mixed_conditions(mesh, 2))
    };
    let (geometry, other_geometry) = (mesh.geometry().unwrap(), other.geometry().unwrap());
    let own = LaplacianSystem::deferred(&mesh, &geometry, Schemes::default(), &problem(&mesh))
        .unwrap()
        .take_evaluated()
        .unwrap();
    let foreign = LaplacianSystem::deferred(
        &other,
        &other_geometry,
        Schemes::default(),
        &problem(&other),
    )
    .unwrap()
    .take_evaluated()
    .unwrap();
    assert!(check_values_fit(&own, &mesh).is_ok());
    let message = check_values_fit(&foreign, &mesh).unwrap_err().to_string();
    assert!(
        message.contains("60 cells") && message.contains("48 cells"),
        "{message}"
    );
}

/// A random permutation of 0..n (Fisher–Yates on the sparse tests' generator).
fn shuffled(n: usize, seed: u64) -> Permutation {
    let mut rng = crate::sparse::testing::SplitMix(seed);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    Permutation::from_new_to_old(order).unwrap()
}

/// The Laplacian pattern of `spec`'s mesh, as a GPU run builds it.
fn mesh_and_pattern(spec: &str) -> (Mesh, Csr) {
    let mesh = crate::mesh::load(spec).unwrap();
    let problem = LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::Uniform(0.0),
        BoundaryCondition::on_every_patch(
            &mesh,
            BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        ),
    );
    let geometry = mesh.geometry().unwrap();
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    let matrix = system.matrix.clone();
    drop(system);
    (mesh, matrix)
}

#[test]
fn the_map_from_the_mesh_equals_the_map_from_the_csr_pattern() {
    // Tets, hexes, a 2-D mesh (empty patches) and polyhedra; natural, RCM
    // and random orders; slices of one and several warps.
    for spec in [
        "meshes/foam/polydual",
        "box:7x6x5:tet:perturb=0.2:renumber",
        "box:9x8x7:perturb=0.2:renumber",
        "box:6x5x1:2d:perturb=0.3",
        "box:12x10x9:tet:perturb=0.2:seed=4:renumber",
    ] {
        let (mesh, matrix) = mesh_and_pattern(spec);
        // The device assembly writes every value: the map's pattern is zero.
        let pattern = matrix.zeros_like();
        let n = mesh.n_cells();
        for (k, ordering) in [
            reverse_cuthill_mckee(&matrix),
            Permutation::identity(n),
            shuffled(n, 11),
        ]
        .into_iter()
        .enumerate()
        {
            for h in [32, 64, 256] {
                let map = AssemblyMap::new(&mesh, &ordering, h).unwrap();
                let reference = reference_map(&mesh, &pattern, &ordering, h).unwrap();
                assert_eq!(map, reference, "{spec}, ordering {k}, h {h}");
            }
        }
    }
}

#[test]
fn bad_shapes_give_clear_errors() {
    let (mesh, matrix) = mesh_and_pattern("box:6x5x4:tet:perturb=0.2:renumber");
    let n = mesh.n_cells();
    let ordering = reverse_cuthill_mckee(&matrix);
    // A slice height mod-SELL refuses: the reference's message.
    let got = AssemblyMap::new(&mesh, &ordering, 48)
        .unwrap_err()
        .to_string();
    let expected = reference_map(&mesh, &matrix, &ordering, 48)
        .unwrap_err()
        .to_string();
    assert_eq!(got, expected);
    let short = Permutation::identity(n - 1);
    let got = AssemblyMap::new(&mesh, &short, 32).unwrap_err().to_string();
    assert!(got.contains("the ordering"), "{got}");
}

/// A fixed array made in pieces (as the device set-up uploads it, a piece
/// possibly starting inside a vector) equals the array made whole.
#[test]
fn gathered_arrays_made_in_pieces_equal_the_whole() {
    let vectors: Vec<Vec3> = (0..50)
        .map(|i| Vec3::new(i as f64, 0.5 - i as f64, (i * i) as f64))
        .collect();
    let values: Vec<f64> = (0..50).map(|i| (i as f64).ln_1p()).collect();
    let index: Vec<u32> = (0..37).map(|i| (i * 7 % 40) as u32).collect();
    for gathered in [
        Gathered::Values(&values, &index),
        Gathered::Vectors(&vectors, &index, 0),
        Gathered::Vectors(&vectors, &index, 10),
    ] {
        let whole = gathered.to_vec();
        assert_eq!(whole.len(), gathered.len());
        for piece_len in [1, 2, 4, 5, 16, whole.len()] {
            let mut pieces = vec![f64::NAN; whole.len()];
            for (p, piece) in pieces.chunks_mut(piece_len).enumerate() {
                gathered.fill(p * piece_len, piece);
            }
            assert_eq!(pieces, whole, "pieces of {piece_len}");
        }
    }
    let i = index[5] as usize + 10;
    assert_eq!(
        Gathered::Vectors(&vectors, &index, 10).to_vec()[15..18],
        [vectors[i].x, vectors[i].y, vectors[i].z]
    );
    assert!(Gathered::Unused.to_vec().is_empty());
    // The face geometry's entries, computed per face, in pieces too.
    let mesh = crate::mesh::load("box:5x4x3:tet:perturb=0.2:renumber").unwrap();
    let geometry = mesh.geometry().unwrap();
    let faces: Vec<u32> = (0..mesh.n_internal_faces() as u32).rev().collect();
    for sn_grad in [SnGradScheme::Corrected, SnGradScheme::Uncorrected] {
        let entries = FaceEntries {
            mesh: &mesh,
            geometry: &geometry,
            sn_grad,
            index: &faces,
        };
        let (mag_sf, delta, k) = entries.to_vecs(faces.len());
        assert_eq!(
            k.len(),
            if sn_grad.is_corrected() {
                3 * faces.len()
            } else {
                0
            }
        );
        let whole = [mag_sf, delta, k];
        for piece_len in [1, 2, 5, 64] {
            let mut pieces: Vec<Vec<f64>> = whole.iter().map(|a| vec![f64::NAN; a.len()]).collect();
            for first in (0..faces.len()).step_by(piece_len) {
                let end = (first + piece_len).min(faces.len());
                let mut parts: Vec<&mut [f64]> = pieces
                    .iter_mut()
                    .zip(entries.widths())
                    .map(|(a, &w)| &mut a[first * w..end * w])
                    .collect();
                entries.fill(first, &mut parts);
            }
            let bits = |v: &[Vec<f64>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&pieces), bits(&whole), "pieces of {piece_len}");
        }
        // The entries are those of the host's face geometry.
        let host = FaceGeometry::new(&mesh, &geometry, sn_grad).unwrap();
        for (d, &f) in faces.iter().enumerate() {
            let f = f as usize;
            assert_eq!(whole[0][d].to_bits(), host.mag_sf[f].to_bits());
            assert_eq!(whole[1][d].to_bits(), host.delta_coeffs[f].to_bits());
        }
    }
}

/// The device arrays of the face geometry, computed per device face from a
/// deferred system that never builds the host's face geometry, hold the bits
/// of the host's arrays gathered in device order.
#[test]
fn device_face_arrays_are_the_host_face_geometry_without_building_it() {
    use SnGradScheme::*;
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (spec, sn_grad) in [
        ("box:5x4x3:tet:perturb=0.2:renumber", Corrected),
        ("box:5x4x3:tet:perturb=0.2", Limited(0.5)),
        ("meshes/foam/warped", BoundaryCorrected),
        ("box:6x5x1:2d:perturb=0.3", Orthogonal),
        ("box:4x4x4:perturb=0.2", Uncorrected),
    ] {
        let mesh = crate::mesh::load(spec).unwrap();
        let geometry = mesh.geometry().unwrap();
        let schemes = schemes(sn_grad, GradScheme::GaussLinear, true);
        let [(_, problem), _] = varying_and_uniform_gamma(&mesh, 3, false);
        let system = LaplacianSystem::deferred(&mesh, &geometry, schemes, &problem).unwrap();
        let ordering = reverse_cuthill_mckee(&system.matrix);
        let map = AssemblyMap::new(&mesh, &ordering, 32).unwrap();
        let statics = StaticArrays::new(&system, &map, &ordering);
        assert!(system.built_face_geometry().is_none(), "{spec}");
        let faces = FaceGeometry::new(&mesh, &geometry, sn_grad).unwrap();
        let (index, boundary) = (&map.device_faces, &map.device_boundary);
        let first = mesh.n_internal_faces();
        assert_eq!(bits(&statics.mag_sf), bits(&gather(&faces.mag_sf, index)));
        assert_eq!(
            bits(&statics.delta_coeffs),
            bits(&gather(&faces.delta_coeffs, index))
        );
        let k = match sn_grad.is_corrected() {
            true => flatten(&faces.correction_vectors, index, 0),
            false => Vec::new(),
        };
        assert_eq!(bits(&statics.k), bits(&k), "{spec}");
        let b_mag_sf = gather(&faces.mag_sf[first..], boundary);
        assert_eq!(bits(&statics.b_mag_sf), bits(&b_mag_sf));
        let corrected = sn_grad == BoundaryCorrected;
        let b_k = match corrected {
            true => flatten(&faces.patch_correction_vectors, boundary, 0),
            false => Vec::new(),
        };
        assert_eq!(bits(&statics.b_k), bits(&b_k));
        let b_delta = match corrected {
            true => gather(&faces.patch_delta_coeffs, boundary),
            false => Vec::new(),
        };
        assert_eq!(bits(&statics.b_delta_coeffs), bits(&b_delta));
        // A host use builds the same arrays.
        assert_eq!(system.face_geometry(), &faces);
    }
}

/// The device set-up's internal-face arrays, made in one pass per face,
/// hold the bits of the host's arrays in face order (weights, area vectors,
/// |S_f|, Δ coefficients, correction vectors), from the whole geometry and
/// from the one that keeps the cells' and the boundary's only.
#[test]
fn internal_face_arrays_in_one_pass_are_the_hosts() {
    use SnGradScheme::*;
    let Some(gpu) = crate::gpu::test_device() else {
        return;
    };
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let vectors = |v: &[Vec3]| v.iter().flat_map(|p| [p.x, p.y, p.z]).collect::<Vec<_>>();
    for (spec, sn_grad, gauss) in [
        ("box:40x30x20:tet:perturb=0.2:renumber", Corrected, true),
        ("box:5x4x3:tet:perturb=0.2", Limited(0.5), false),
        ("meshes/foam/warped", BoundaryCorrected, true),
        ("box:64x64x40:perturb=0.2", Uncorrected, true),
        ("meshes/foam/polydual", Orthogonal, false),
    ] {
        let mesh = crate::mesh::load(spec).unwrap();
        let whole = mesh.geometry().unwrap();
        let faces = FaceGeometry::new(&mesh, &whole, sn_grad).unwrap();
        let n = mesh.n_internal_faces();
        for geometry in [
            mesh.geometry().unwrap(),
            mesh.geometry_of_cells_and_boundary().unwrap(),
        ] {
            let what = format!("{spec}, faces kept {}", geometry.keeps_faces());
            let arrays =
                InternalFaceArrays::upload(&gpu, &mesh, &geometry, sn_grad, gauss).unwrap();
            let down = |a: &CudaSlice<f64>| gpu.download(a).unwrap();
            assert_eq!(bits(&down(&arrays.weights)), bits(&whole.weights), "{what}");
            assert_eq!(
                bits(&down(&arrays.mag_sf)),
                bits(&faces.mag_sf[..n]),
                "{what}"
            );
            assert_eq!(
                bits(&down(&arrays.delta_coeffs)),
                bits(&faces.delta_coeffs[..n]),
                "{what}"
            );
            match (&arrays.k, sn_grad.is_corrected()) {
                (Some(k), true) => assert_eq!(
                    bits(&down(k)),
                    bits(&vectors(&faces.correction_vectors[..n])),
                    "{what}"
                ),
                (None, false) => {}
                _ => panic!("{what}: correction vectors where the scheme does not read them"),
            }
            match (&arrays.sf, gauss) {
                (Some(sf), true) => assert_eq!(
                    bits(&down(sf)),
                    bits(&vectors(&whole.face_area_vectors[..n])),
                    "{what}"
                ),
                (None, false) => {}
                _ => panic!("{what}: area vectors where the gradient does not read them"),
            }
        }
    }
}

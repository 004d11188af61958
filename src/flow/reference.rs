//! Reference solutions of the flow validation cases, and sampling of a
//! computed flow at their points.
//!
//! - Lid-driven cavity: U. Ghia, K. N. Ghia, C. T. Shin, "High-Re solutions
//!   for incompressible flow using the Navier–Stokes equations and a
//!   multigrid method", J. Comput. Phys. 48 (1982) 387–411, Table I
//!   (u along the vertical line through the cavity centre) and Table II (v
//!   along the horizontal line), 129×129 grid points, lid velocity 1, side 1.
//! - Lid-driven cube: S. Albensoeder, H. C. Kuhlmann, "Accurate
//!   three-dimensional lid-driven cavity flow", J. Comput. Phys. 206 (2005)
//!   536–558, Tables 5 and 6: Re = 1000, Chebyshev collocation, the velocity
//!   along the two centrelines of the mid-plane normal to the spanwise axis.
//!   The numbers are transcribed from the public copy of the tables in the
//!   validation script of the PICT solver (tum-pbs/PICT,
//!   `tests/validations.py`, function `lid_driven_cavity_3D`); their
//!   positions are Ghia's, so the profiles sit next to the 2-D ones.
//! - Plane Poiseuille flow between walls a distance H apart, mean velocity
//!   U: u(y) = 6U (y/H)(1 − y/H), dp/dx = −12νU/H².

use crate::mesh::{Geometry, Mesh, Vec3};

/// One of Ghia, Ghia & Shin's tables for one Reynolds number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GhiaTable {
    pub reynolds: u32,
    /// u at (0.5, `U_Y[k]`).
    pub u: [f64; 17],
    /// v at (`V_X[k]`, 0.5).
    pub v: [f64; 17],
    /// Indices of `v` known to be misprinted: shown, not counted.
    pub v_misprints: &'static [usize],
}

/// Table I's y positions (grid points 129, 126, 125, 124, 123, 110, 95, 80,
/// 65, 59, 37, 23, 14, 10, 9, 8, 1 of 129).
pub const GHIA_U_Y: [f64; 17] = [
    1.0000, 0.9766, 0.9688, 0.9609, 0.9531, 0.8516, 0.7344, 0.6172, 0.5000, 0.4531, 0.2813, 0.1719,
    0.1016, 0.0703, 0.0625, 0.0547, 0.0000,
];

/// Table II's x positions (grid points 129, 125, 124, 123, 122, 117, 111,
/// 104, 65, 31, 30, 21, 13, 11, 10, 9, 1 of 129).
pub const GHIA_V_X: [f64; 17] = [
    1.0000, 0.9688, 0.9609, 0.9531, 0.9453, 0.9063, 0.8594, 0.8047, 0.5000, 0.2344, 0.2266, 0.1563,
    0.0938, 0.0781, 0.0703, 0.0625, 0.0000,
];

/// Ghia, Ghia & Shin (1982), Tables I and II, Re = 100, 400, 1000.
pub const GHIA: [GhiaTable; 3] = [
    GhiaTable {
        reynolds: 100,
        u: [
            1.00000, 0.84123, 0.78871, 0.73722, 0.68717, 0.23151, 0.00332, -0.13641, -0.20581,
            -0.21090, -0.15662, -0.10150, -0.06434, -0.04775, -0.04192, -0.03717, 0.00000,
        ],
        v: [
            0.00000, -0.05906, -0.07391, -0.08864, -0.10313, -0.16914, -0.22445, -0.24533, 0.05454,
            0.17527, 0.17507, 0.16077, 0.12317, 0.10890, 0.10091, 0.09233, 0.00000,
        ],
        v_misprints: &[],
    },
    GhiaTable {
        reynolds: 400,
        u: [
            1.00000, 0.75837, 0.68439, 0.61756, 0.55892, 0.29093, 0.16256, 0.02135, -0.11477,
            -0.17119, -0.32726, -0.24299, -0.14612, -0.10338, -0.09266, -0.08186, 0.00000,
        ],
        v: [
            0.00000, -0.12146, -0.15663, -0.19254, -0.22847, -0.23827, -0.44993, -0.38598, 0.05186,
            0.30174, 0.30203, 0.28124, 0.22965, 0.20920, 0.19713, 0.18360, 0.00000,
        ],
        // −0.23827 at x = 0.9063 breaks the monotone profile between −0.22847
        // (x = 0.9453) and −0.44993 (x = 0.8594): taken as a misprint (the
        // 129×129 run here gives −0.387, its neighbours within 0.005).
        v_misprints: &[5],
    },
    GhiaTable {
        reynolds: 1000,
        u: [
            1.00000, 0.65928, 0.57492, 0.51117, 0.46604, 0.33304, 0.18719, 0.05702, -0.06080,
            -0.10648, -0.27805, -0.38289, -0.29730, -0.22220, -0.20196, -0.18109, 0.00000,
        ],
        v: [
            0.00000, -0.21388, -0.27669, -0.33714, -0.39188, -0.51550, -0.42665, -0.31966, 0.02526,
            0.32235, 0.33075, 0.37095, 0.32627, 0.30353, 0.29012, 0.27485, 0.00000,
        ],
        v_misprints: &[],
    },
];

/// Ghia's table for `reynolds`, if it is one of 100, 400, 1000.
pub fn ghia(reynolds: u32) -> Option<&'static GhiaTable> {
    GHIA.iter().find(|t| t.reynolds == reynolds)
}

/// The lid-driven cube of Albensoeder & Kuhlmann (2005), Tables 5 and 6, in
/// fvpoisson's (OpenFOAM's cavity) frame: the unit cube, the lid at y = 1
/// moving with (1, 0, 0), z spanwise. Their frame has the cube [−½, ½]³ with
/// the lid at x = −½ moving in +y, so their (x, y, z) is (½ − y, x − ½,
/// z − ½) here and their (u, v) is (−v, u) here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CubeCavityTable {
    pub reynolds: u32,
    /// u at (0.5, `GHIA_U_Y[k]`, 0.5) (their Table 5: v along x).
    pub u: [f64; 17],
    /// v at (`GHIA_V_X[k]`, 0.5, 0.5) (their Table 6: −u along y).
    pub v: [f64; 17],
}

/// Albensoeder & Kuhlmann (2005), Tables 5 and 6: the cube at Re = 1000.
pub const ALBENSOEDER_KUHLMANN_1000: CubeCavityTable = CubeCavityTable {
    reynolds: 1000,
    u: [
        1.00000, 0.58964, 0.48443, 0.39821, 0.33171, 0.12183, 0.07334, 0.03905, 0.00802, -0.00612,
        -0.10999, -0.25160, -0.27293, -0.23696, -0.22283, -0.20623, 0.00000,
    ],
    v: [
        0.00000, -0.18864, -0.24095, -0.29032, -0.33511, -0.43423, -0.31117, -0.15223, 0.03674,
        0.16987, 0.17580, 0.22924, 0.24407, 0.23503, 0.22746, 0.21738, 0.00000,
    ],
};

/// A computed value against a reference value at a position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    pub position: f64,
    pub reference: f64,
    pub computed: f64,
    /// A known misprint of the reference: shown, not counted.
    pub misprint: bool,
}

impl Comparison {
    pub fn deviation(&self) -> f64 {
        (self.computed - self.reference).abs()
    }
}

/// The root mean square deviation of a list of comparisons, misprints left
/// out (0 for none).
pub fn rms_deviation(rows: &[Comparison]) -> f64 {
    let counted: Vec<f64> = rows
        .iter()
        .filter(|r| !r.misprint)
        .map(|r| r.deviation().powi(2))
        .collect();
    if counted.is_empty() {
        return 0.0;
    }
    (counted.iter().sum::<f64>() / counted.len() as f64).sqrt()
}

/// The largest deviation of a list of comparisons, misprints left out.
pub fn max_deviation(rows: &[Comparison]) -> f64 {
    rows.iter()
        .filter(|r| !r.misprint)
        .map(Comparison::deviation)
        .fold(0.0, f64::max)
}

/// Trilinear interpolation of a cell field of a structured box mesh (a
/// tensor-product lattice of hexahedra, uniform or graded, in any cell order)
/// on the lattice of its cell centres, extended to the walls by the boundary
/// face values. Lattice points on the box's edges and corners, which no cell
/// or face gives, take the mean of their neighbours on the walls.
pub struct LatticeSampler {
    /// Lattice coordinates per axis: the low wall, the cell centres in
    /// ascending order, the high wall.
    axes: [Vec<f64>; 3],
    /// Lattice position of every cell (1-based; 0 and N + 1 are walls).
    cell_index: Vec<[usize; 3]>,
    /// Lattice position of every boundary face.
    face_index: Vec<[usize; 3]>,
}

impl LatticeSampler {
    /// The lattice of `mesh`; the error says why the mesh is not one.
    pub fn new(mesh: &Mesh, geometry: &Geometry) -> Result<Self, String> {
        let points = mesh.points();
        if points.is_empty() || geometry.cell_centres.is_empty() {
            return Err("the mesh has no cells".into());
        }
        let lo = points.iter().fold(Vec3::repeat(f64::MAX), |m, p| m.inf(p));
        let hi = points.iter().fold(Vec3::repeat(f64::MIN), |m, p| m.sup(p));
        let tolerance = 1e-9 * (hi - lo).norm();
        let axes: [Vec<f64>; 3] = std::array::from_fn(|a| {
            let mut centres: Vec<f64> = geometry.cell_centres.iter().map(|c| c[a]).collect();
            centres.sort_by(f64::total_cmp);
            centres.dedup_by(|x, y| (*x - *y).abs() <= tolerance);
            let mut axis = vec![lo[a]];
            axis.extend(centres);
            axis.push(hi[a]);
            axis
        });
        let sizes = axes.each_ref().map(|axis| axis.len() - 2);
        if sizes.iter().product::<usize>() != mesh.n_cells() {
            return Err(format!(
                "{} cells are not a lattice: the cell centres take {} × {} × {} distinct coordinates",
                mesh.n_cells(),
                sizes[0],
                sizes[1],
                sizes[2]
            ));
        }
        let locate = |a: usize, x: f64| -> Option<usize> {
            let axis = &axes[a];
            let k = axis.partition_point(|&y| y < x - tolerance);
            (k < axis.len() && (axis[k] - x).abs() <= tolerance).then_some(k)
        };
        let mut taken = vec![false; axes.iter().map(Vec::len).product()];
        let flat = |i: [usize; 3]| i[0] + axes[0].len() * (i[1] + axes[1].len() * i[2]);
        let mut cell_index = Vec::with_capacity(mesh.n_cells());
        for (cell, c) in geometry.cell_centres.iter().enumerate() {
            let index = [0, 1, 2].map(|a| locate(a, c[a]));
            match index {
                [Some(i), Some(j), Some(k)]
                    if !std::mem::replace(&mut taken[flat([i, j, k])], true) =>
                {
                    cell_index.push([i, j, k])
                }
                _ => {
                    return Err(format!(
                        "cell {cell} at ({}, {}, {}) is not on the lattice",
                        c.x, c.y, c.z
                    ))
                }
            }
        }
        let first = mesh.n_internal_faces();
        let mut face_index = Vec::with_capacity(geometry.boundary_face_centres.len());
        for (b, c) in geometry.boundary_face_centres.iter().enumerate() {
            let normal = geometry.face_area_vectors[first + b];
            let a = (0..3)
                .max_by(|&x, &y| normal[x].abs().total_cmp(&normal[y].abs()))
                .unwrap_or(0);
            let index = [0, 1, 2].map(|d| locate(d, c[d]));
            let wall = index[a].filter(|&i| i == 0 || i == axes[a].len() - 1);
            match (wall, index) {
                (Some(_), [Some(i), Some(j), Some(k)])
                    if normal[a].abs() > (1.0 - 1e-9) * normal.norm() =>
                {
                    face_index.push([i, j, k])
                }
                _ => {
                    return Err(format!(
                        "boundary face {} at ({}, {}, {}) is not a wall face of the lattice",
                        first + b,
                        c.x,
                        c.y,
                        c.z
                    ))
                }
            }
        }
        Ok(Self {
            axes,
            cell_index,
            face_index,
        })
    }

    /// Cells along each axis.
    pub fn sizes(&self) -> [usize; 3] {
        self.axes.each_ref().map(|axis| axis.len() - 2)
    }

    /// The lattice coordinates of axis `a`: the low wall, the cell centres,
    /// the high wall.
    pub fn axis(&self, a: usize) -> &[f64] {
        &self.axes[a]
    }

    /// Component `c` of the cell field `cells` (boundary face values
    /// `boundary`) at `points`.
    pub fn sample(&self, cells: &[Vec3], boundary: &[Vec3], c: usize, points: &[Vec3]) -> Vec<f64> {
        let n = self.axes.each_ref().map(Vec::len);
        let flat = |i: usize, j: usize, k: usize| i + n[0] * (j + n[1] * k);
        let mut grid = vec![f64::NAN; n[0] * n[1] * n[2]];
        for (&[i, j, k], v) in self.cell_index.iter().zip(cells) {
            grid[flat(i, j, k)] = v[c];
        }
        for (&[i, j, k], v) in self.face_index.iter().zip(boundary) {
            grid[flat(i, j, k)] = v[c];
        }
        // Edges first (their wall neighbours are set), then corners (their
        // edge neighbours are).
        for _ in 0..2 {
            let before = grid.clone();
            for k in 0..n[2] {
                for j in 0..n[1] {
                    for i in 0..n[0] {
                        if !before[flat(i, j, k)].is_nan() {
                            continue;
                        }
                        let neighbours = [
                            (i > 0).then(|| flat(i - 1, j, k)),
                            (i + 1 < n[0]).then(|| flat(i + 1, j, k)),
                            (j > 0).then(|| flat(i, j - 1, k)),
                            (j + 1 < n[1]).then(|| flat(i, j + 1, k)),
                            (k > 0).then(|| flat(i, j, k - 1)),
                            (k + 1 < n[2]).then(|| flat(i, j, k + 1)),
                        ];
                        let known: Vec<f64> = neighbours
                            .into_iter()
                            .flatten()
                            .map(|m| before[m])
                            .filter(|v| !v.is_nan())
                            .collect();
                        if !known.is_empty() {
                            grid[flat(i, j, k)] = known.iter().sum::<f64>() / known.len() as f64;
                        }
                    }
                }
            }
        }
        let bracket = |axis: &[f64], x: f64| {
            let k = axis
                .windows(2)
                .position(|p| x <= p[1])
                .unwrap_or(axis.len() - 2);
            let t = ((x - axis[k]) / (axis[k + 1] - axis[k])).clamp(0.0, 1.0);
            [(k, 1.0 - t), (k + 1, t)]
        };
        points
            .iter()
            .map(|p| {
                let [bx, by, bz] = [0, 1, 2].map(|a| bracket(&self.axes[a], p[a]));
                let mut value = 0.0;
                for (k, wz) in bz {
                    for (j, wy) in by {
                        for (i, wx) in bx {
                            // A point on a lattice plane does not read the
                            // (possibly unset) values beyond it.
                            let w = wx * wy * wz;
                            if w != 0.0 {
                                value += w * grid[flat(i, j, k)];
                            }
                        }
                    }
                }
                value
            })
            .collect()
    }
}

/// Bilinear interpolation of a cell field of a structured 2-D box mesh (a
/// `box:NXxNYx1:2d` mesh in any cell order): the [`LatticeSampler`] of the
/// mesh, checked to be the uniform lattice asked for, sampled in its
/// mid-plane.
pub struct BoxSampler {
    lattice: LatticeSampler,
}

impl BoxSampler {
    /// The lattice of a box from `origin` with `nx` × `ny` cells of the
    /// given `size`; `None` when a cell centre does not sit on it.
    pub fn new(
        mesh: &Mesh,
        geometry: &Geometry,
        (nx, ny): (usize, usize),
        origin: (f64, f64),
        size: (f64, f64),
    ) -> Option<Self> {
        let lattice = LatticeSampler::new(mesh, geometry).ok()?;
        let uniform = |a: usize, n: usize, o: f64, l: f64| {
            let axis = lattice.axis(a);
            axis.len() == n + 2
                && axis.iter().enumerate().all(|(i, &x)| {
                    let expected = match i {
                        0 => o,
                        i if i == n + 1 => o + l,
                        i => o + (i as f64 - 0.5) * l / n as f64,
                    };
                    (x - expected).abs() <= 1e-6 * l / n as f64
                })
        };
        (lattice.sizes()[2] == 1
            && uniform(0, nx, origin.0, size.0)
            && uniform(1, ny, origin.1, size.1))
        .then_some(Self { lattice })
    }

    /// Component `c` of the cell field `cells` (boundary face values
    /// `boundary`) at the points `(x, y)`.
    pub fn sample(
        &self,
        cells: &[Vec3],
        boundary: &[Vec3],
        c: usize,
        points: &[(f64, f64)],
    ) -> Vec<f64> {
        let z = self.lattice.axis(2)[1];
        let points: Vec<Vec3> = points.iter().map(|&(x, y)| Vec3::new(x, y, z)).collect();
        self.lattice.sample(cells, boundary, c, &points)
    }
}

/// The cavity's centreline velocities against Ghia's table: u along x = 0.5
/// and v along y = 0.5 (unit cavity, lid velocity 1).
pub fn compare_with_ghia(
    table: &GhiaTable,
    sampler: &BoxSampler,
    u: &[Vec3],
    boundary_u: &[Vec3],
) -> (Vec<Comparison>, Vec<Comparison>) {
    let points: Vec<(f64, f64)> = GHIA_U_Y.iter().map(|&y| (0.5, y)).collect();
    let computed_u = sampler.sample(u, boundary_u, 0, &points);
    let points: Vec<(f64, f64)> = GHIA_V_X.iter().map(|&x| (x, 0.5)).collect();
    let computed_v = sampler.sample(u, boundary_u, 1, &points);
    (
        comparisons(&GHIA_U_Y, &table.u, computed_u, &[]),
        comparisons(&GHIA_V_X, &table.v, computed_v, table.v_misprints),
    )
}

/// The cube's centreline velocities against Albensoeder & Kuhlmann's table:
/// u along the vertical line and v along the horizontal line through the
/// centre of the cube from `origin` with side `side`, both divided by the
/// lid speed `lid_speed`; positions as fractions of the side.
pub fn compare_with_albensoeder_kuhlmann(
    table: &CubeCavityTable,
    sampler: &LatticeSampler,
    (u, boundary_u): (&[Vec3], &[Vec3]),
    origin: Vec3,
    side: f64,
    lid_speed: f64,
) -> (Vec<Comparison>, Vec<Comparison>) {
    let at = |x: f64, y: f64| origin + side * Vec3::new(x, y, 0.5);
    let scaled = |values: Vec<f64>| values.into_iter().map(|v| v / lid_speed).collect();
    let points: Vec<Vec3> = GHIA_U_Y.iter().map(|&y| at(0.5, y)).collect();
    let computed_u = scaled(sampler.sample(u, boundary_u, 0, &points));
    let points: Vec<Vec3> = GHIA_V_X.iter().map(|&x| at(x, 0.5)).collect();
    let computed_v = scaled(sampler.sample(u, boundary_u, 1, &points));
    (
        comparisons(&GHIA_U_Y, &table.u, computed_u, &[]),
        comparisons(&GHIA_V_X, &table.v, computed_v, &[]),
    )
}

/// Rows of positions, reference and computed values; the indices in
/// `misprints` marked.
fn comparisons(
    positions: &[f64; 17],
    reference: &[f64; 17],
    computed: Vec<f64>,
    misprints: &[usize],
) -> Vec<Comparison> {
    positions
        .iter()
        .zip(reference)
        .zip(computed)
        .enumerate()
        .map(|(k, ((&position, &reference), computed))| Comparison {
            position,
            reference,
            computed,
            misprint: misprints.contains(&k),
        })
        .collect()
}

/// Plane Poiseuille velocity at height `y` above the lower wall of a channel
/// of height `h` with mean velocity `mean`.
pub fn poiseuille_velocity(y: f64, h: f64, mean: f64) -> f64 {
    6.0 * mean * (y / h) * (1.0 - y / h)
}

/// Plane Poiseuille pressure gradient dp/dx (kinematic) for viscosity `nu`.
pub fn poiseuille_pressure_gradient(h: f64, mean: f64, nu: f64) -> f64 {
    -12.0 * nu * mean / (h * h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_interpolates_linear_fields_exactly_in_any_cell_order() {
        let mesh = crate::mesh::source::load("box:8x6x1:2d:size=2x1.5x1:renumber").unwrap();
        let geometry = Geometry::compute(&mesh);
        let field = |p: &Vec3| Vec3::new(p.x + 2.0 * p.y, 0.0, 0.0);
        let cells: Vec<Vec3> = geometry.cell_centres.iter().map(field).collect();
        let boundary: Vec<Vec3> = geometry.boundary_face_centres.iter().map(field).collect();
        let sampler = BoxSampler::new(&mesh, &geometry, (8, 6), (0.0, 0.0), (2.0, 1.5)).unwrap();
        // Away from the corners (their value is the mean of the two walls').
        let points = [
            (1.0, 0.0),
            (1.0, 0.75),
            (0.3, 1.5),
            (2.0, 0.6),
            (1.77, 0.02),
        ];
        for (value, (x, y)) in sampler
            .sample(&cells, &boundary, 0, &points)
            .iter()
            .zip(points)
        {
            assert!((value - (x + 2.0 * y)).abs() < 1e-12, "({x}, {y}): {value}");
        }
        // A mesh that is not the lattice asked for is refused.
        assert!(BoxSampler::new(&mesh, &geometry, (8, 5), (0.0, 0.0), (2.0, 1.5)).is_none());
    }

    /// A graded 6 × 5 × 4 block (blockMesh multi-grading), renumbered.
    fn graded_block() -> Mesh {
        let dir = std::env::temp_dir().join(format!("fvpoisson_lattice_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("blockMeshDict");
        std::fs::write(
            &path,
            "FoamFile { version 2.0; format ascii; class dictionary; object blockMeshDict; }\n\
             scale 1;\n\
             vertices ((0 0 0) (2 0 0) (2 1 0) (0 1 0) (0 0 1.5) (2 0 1.5) (2 1 1.5) (0 1 1.5));\n\
             blocks (hex (0 1 2 3 4 5 6 7) (6 5 4) simpleGrading \
             (((0.5 0.5 3) (0.5 0.5 0.333)) 2.5 0.4));\n\
             boundary (walls { type wall; faces ((0 4 7 3) (2 6 5 1) (1 5 4 0) \
             (3 7 6 2) (0 3 2 1) (4 5 6 7)); });\n",
        )
        .unwrap();
        let mesh = crate::mesh::block_mesh::read_block_mesh_dict(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        mesh
    }

    #[test]
    fn lattice_sampler_interpolates_trilinear_fields_exactly_on_graded_blocks() {
        let mesh = graded_block();
        let geometry = Geometry::compute(&mesh);
        let sampler = LatticeSampler::new(&mesh, &geometry).unwrap();
        assert_eq!(sampler.sizes(), [6, 5, 4]);
        // Graded: the spacing of the centres changes along every axis.
        for a in 0..3 {
            let axis = sampler.axis(a);
            assert!(
                ((axis[2] - axis[1]) - (axis[3] - axis[2])).abs() > 1e-3,
                "axis {a}"
            );
        }
        let field = |p: &Vec3| {
            Vec3::new(
                0.0,
                1.0 + p.x - 2.0 * p.y + 0.5 * p.z + 0.7 * p.x * p.y - 0.3 * p.x * p.y * p.z,
                0.0,
            )
        };
        let cells: Vec<Vec3> = geometry.cell_centres.iter().map(field).collect();
        let boundary: Vec<Vec3> = geometry.boundary_face_centres.iter().map(field).collect();
        // Inside, between the first centre and the wall, and on walls away
        // from the box's edges (whose values are means, not the field's).
        let points = [
            Vec3::new(1.0, 0.5, 0.75),
            Vec3::new(0.13, 0.77, 0.31),
            Vec3::new(1.9, 0.5, 0.75),
            Vec3::new(0.01, 0.45, 0.7),
            Vec3::new(1.0, 1.0, 0.75),
            Vec3::new(0.8, 0.4, 0.0),
        ];
        let values = sampler.sample(&cells, &boundary, 1, &points);
        for (value, p) in values.iter().zip(&points) {
            assert!(
                (value - field(p).y).abs() < 1e-12,
                "{p:?}: {value} vs {}",
                field(p).y
            );
        }
    }

    #[test]
    fn lattice_sampler_refuses_meshes_that_are_not_lattices() {
        let mesh = crate::mesh::source::load("box:4x4x4:tet").unwrap();
        let geometry = Geometry::compute(&mesh);
        let error = LatticeSampler::new(&mesh, &geometry).err().unwrap();
        assert!(error.contains("not"), "{error}");
        let mesh = crate::mesh::source::load("box:4x3x2:perturb=0.2").unwrap();
        let geometry = Geometry::compute(&mesh);
        assert!(LatticeSampler::new(&mesh, &geometry).is_err());
    }

    #[test]
    fn cube_table_maps_albensoeder_and_kuhlmann_to_the_cavity_frame() {
        let t = &ALBENSOEDER_KUHLMANN_1000;
        // The lid's velocity on the lid, no slip at the other walls.
        assert_eq!((t.u[0], t.u[16], t.v[0], t.v[16]), (1.0, 0.0, 0.0, 0.0));
        // The primary vortex turns as in the 2-D cavity at the same points
        // (their frame mapped right): u < 0 in the lower half, v < 0 by the
        // downstream wall (x = 1), v > 0 by the upstream wall; near the
        // centre, where Ghia's u is small, the signs may differ.
        let ghia = ghia(1000).unwrap();
        for k in 0..17 {
            if ghia.u[k].abs() > 0.1 {
                assert_eq!(t.u[k].signum(), ghia.u[k].signum(), "u[{k}]");
            }
            assert_eq!(t.v[k].signum(), ghia.v[k].signum(), "v[{k}]");
        }
    }

    #[test]
    fn misprints_are_shown_but_not_counted() {
        let row = |reference: f64, misprint| Comparison {
            position: 0.0,
            reference,
            computed: 0.0,
            misprint,
        };
        assert_eq!(max_deviation(&[row(0.1, false), row(0.5, true)]), 0.1);
        assert!(GHIA
            .iter()
            .all(|t| t.u[0] == 1.0 && t.u[16] == 0.0 && t.v[0] == 0.0));
        assert_eq!(ghia(400).unwrap().v_misprints, &[5]);
    }
}

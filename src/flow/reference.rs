//! Reference solutions of the flow validation cases, and sampling of a
//! computed flow at their points.
//!
//! - Lid-driven cavity: U. Ghia, K. N. Ghia, C. T. Shin, "High-Re solutions
//!   for incompressible flow using the Navier–Stokes equations and a
//!   multigrid method", J. Comput. Phys. 48 (1982) 387–411, Table I
//!   (u along the vertical line through the cavity centre) and Table II (v
//!   along the horizontal line), 129×129 grid points, lid velocity 1, side 1.
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

/// The largest deviation of a list of comparisons, misprints left out.
pub fn max_deviation(rows: &[Comparison]) -> f64 {
    rows.iter()
        .filter(|r| !r.misprint)
        .map(Comparison::deviation)
        .fold(0.0, f64::max)
}

/// Bilinear interpolation of a cell field of a structured 2-D box mesh (a
/// `box:NXxNYx1:2d` mesh in any cell order) on the lattice of its cell
/// centres, extended to the walls by the boundary face values.
pub struct BoxSampler {
    nx: usize,
    ny: usize,
    /// Lattice coordinates: the low wall, the cell centres, the high wall.
    xs: Vec<f64>,
    ys: Vec<f64>,
    /// Lattice position (I, J) of every cell (1-based; 0 and N + 1 are walls).
    cell_index: Vec<(usize, usize)>,
    /// (I, J) of every boundary face on a wall, `None` on empty faces.
    face_index: Vec<Option<(usize, usize)>>,
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
        let (dx, dy) = (size.0 / nx as f64, size.1 / ny as f64);
        let lattice = |n: usize, o: f64, d: f64, l: f64| {
            let mut v = vec![o];
            v.extend((0..n).map(|i| o + (i as f64 + 0.5) * d));
            v.push(o + l);
            v
        };
        let xs = lattice(nx, origin.0, dx, size.0);
        let ys = lattice(ny, origin.1, dy, size.1);
        // Index of a coordinate on the lattice (cell centres and walls).
        let locate = |x: f64, o: f64, d: f64, n: usize| -> Option<usize> {
            let t = (x - o) / d;
            if t.abs() < 1e-6 {
                return Some(0);
            }
            if (t - n as f64).abs() < 1e-6 {
                return Some(n + 1);
            }
            let i = (t - 0.5).round();
            ((t - 0.5 - i).abs() < 1e-6 && i >= 0.0 && i < n as f64).then_some(i as usize + 1)
        };
        let cell_index = geometry
            .cell_centres
            .iter()
            .map(|c| {
                Some((
                    locate(c.x, origin.0, dx, nx)?,
                    locate(c.y, origin.1, dy, ny)?,
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        let first = mesh.n_internal_faces();
        let face_index = geometry
            .boundary_face_centres
            .iter()
            .enumerate()
            .map(|(b, c)| {
                let normal = geometry.face_area_vectors[first + b];
                (normal.z.abs() < 0.5 * normal.norm())
                    .then(|| {
                        Some((
                            locate(c.x, origin.0, dx, nx)?,
                            locate(c.y, origin.1, dy, ny)?,
                        ))
                    })
                    .flatten()
            })
            .collect();
        Some(Self {
            nx,
            ny,
            xs,
            ys,
            cell_index,
            face_index,
        })
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
        let (w, h) = (self.nx + 2, self.ny + 2);
        let mut grid = vec![f64::NAN; w * h];
        for (&(i, j), v) in self.cell_index.iter().zip(cells) {
            grid[i + w * j] = v[c];
        }
        for (index, v) in self.face_index.iter().zip(boundary) {
            if let Some((i, j)) = index {
                grid[i + w * j] = v[c];
            }
        }
        // Corners: the mean of the two walls meeting there.
        for (i, j, di, dj) in [
            (0, 0, 1, 1),
            (w - 1, 0, w - 2, 1),
            (0, h - 1, 1, h - 2),
            (w - 1, h - 1, w - 2, h - 2),
        ] {
            grid[i + w * j] = 0.5 * (grid[di + w * j] + grid[i + w * dj]);
        }
        let bracket = |coords: &[f64], x: f64| {
            let k = coords
                .windows(2)
                .position(|p| x <= p[1])
                .unwrap_or(coords.len() - 2);
            let t = ((x - coords[k]) / (coords[k + 1] - coords[k])).clamp(0.0, 1.0);
            (k, t)
        };
        points
            .iter()
            .map(|&(x, y)| {
                let (i, s) = bracket(&self.xs, x);
                let (j, t) = bracket(&self.ys, y);
                let at = |i: usize, j: usize| grid[i + w * j];
                (1.0 - t) * ((1.0 - s) * at(i, j) + s * at(i + 1, j))
                    + t * ((1.0 - s) * at(i, j + 1) + s * at(i + 1, j + 1))
            })
            .collect()
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
    let rows =
        |positions: &[f64; 17], reference: &[f64; 17], computed: Vec<f64>, misprints: &[usize]| {
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
        };
    (
        rows(&GHIA_U_Y, &table.u, computed_u, &[]),
        rows(&GHIA_V_X, &table.v, computed_v, table.v_misprints),
    )
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

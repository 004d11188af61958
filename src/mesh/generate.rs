//! Built-in mesh generators: boxes of hexahedra or tetrahedra, optionally
//! perturbed and renumbered, written straight into polyMesh arrays.
//!
//! # Spec grammar
//!
//! ```text
//! spec   = "box:" counts { ":" option }
//! counts = N "x" N "x" N              cells along x, y and z (each N >= 1)
//! option = "size=" R "x" R "x" R      box lengths (default 1x1x1, each > 0)
//!        | "origin=" R "x" R "x" R    lowest corner (default 0x0x0)
//!        | "tet"                      split every hexahedron into 6 tetrahedra
//!        | "prism"                    split every hexahedron into 2 triangular
//!                                     prisms (cut along its x-y diagonal)
//!        | "perturb=" F               move interior points randomly by up to F
//!                                     cell sizes (0 <= F < 0.5, default 0; with
//!                                     tet, F * 0.32 hex sizes: see below)
//!        | "seed=" N                  seed of perturb and renumber (default 1)
//!        | "renumber"                 random cell numbering
//!        | "2d"                       one layer of hexahedra (needs NZ = 1): the
//!                                     z faces form the empty patch frontAndBack
//! ```
//!
//! Example: `box:64x64x64:size=2x1x1:origin=0x0x0:tet:perturb=0.2:seed=7:renumber`.
//! `tet` and `prism` exclude each other; `prism` combines with `2d` (extruded
//! triangles).
//!
//! Patches (kind `patch`): `xmin xmax ymin ymax zmin zmax`, or in 2-D
//! `xmin xmax ymin ymax frontAndBack` (kind `empty`, as in OpenFOAM 2-D cases).
//!
//! # Perturbation
//!
//! Each interior point moves by a random vector of length up to F times the
//! hex spacing along each axis (uniform in a ball; in 2-D in a disc, the front
//! and back copies of a point together). The vector is a hash of (seed, point
//! index), so the mesh is the same for any thread count. Boundary points stay,
//! so the box keeps its shape and volume. For hexahedra F < 0.5 keeps points
//! from meeting; no inverted cell was found at F = 0.499 on 10^6 cells (smallest
//! volume 0.21 of the mean). Tetrahedra are thinner: a Kuhn tetrahedron's edge
//! matrix has smallest singular value 0.555 (unit hex), and moving each corner
//! by at most e changes it by at most 2 e sqrt(3) (Frobenius norm), so e < 0.16
//! can never invert one; the tet displacement is therefore F * 0.32 hex sizes.
//!
//! # Construction
//!
//! The box is a lattice of hexahedra ("hexes") numbered naturally
//! (`i + nx (j + ny k)`); each hex holds one hexahedral cell or six Kuhn
//! tetrahedra (one per path along the edges from the lowest to the highest
//! corner, i.e. one per permutation of the axes; H. W. Kuhn, "Some combinatorial
//! lemmas in topology", IBM J. Res. Dev. 4, 1960), or two prisms. The Kuhn split
//! cuts every hex face along the diagonal through its lowest corner, the same on
//! both sides of the face, so the tetrahedra conform across hexes; the prism
//! split cuts every hex along the same x-y diagonal, so prisms meet whole faces.
//! Prism meshes mix triangles and quadrilaterals: templates pad triangles with
//! [`NO_CORNER`] and the padding is dropped when the face list is built. Every cell's faces come from
//! a per-shape template, oriented outward, so each cell emits the faces it owns
//! (those towards higher-numbered cells) already in upper-triangular order and
//! with owner→neighbour normals; cells are filled in parallel blocks at offsets
//! from a prefix sum of per-cell counts. Renumbering permutes the cells first,
//! so the same pass emits the renumbered mesh in order without a global sort.

use super::{FaceList, Label, Mesh, MeshError, Patch, PatchKind, Vec3};
use rayon::prelude::*;
use std::str::FromStr;

/// A generated box mesh; see the module documentation for the spec grammar.
#[derive(Clone, Debug, PartialEq)]
pub struct BoxSpec {
    /// Cells (hexes before the `tet` split) along x, y and z.
    pub cells: [usize; 3],
    /// Box lengths.
    pub size: [f64; 3],
    /// Lowest corner.
    pub origin: [f64; 3],
    /// Six tetrahedra per hex instead of one hexahedron.
    pub tet: bool,
    /// Two triangular prisms per hex instead of one hexahedron.
    pub prism: bool,
    /// Largest point displacement as a fraction of the cell size, in `[0, 0.5)`.
    pub perturb: f64,
    /// Seed of the perturbation and of the renumbering.
    pub seed: u64,
    /// Random cell numbering.
    pub renumber: bool,
    /// One cell layer with an empty `frontAndBack` patch.
    pub two_d: bool,
}

impl BoxSpec {
    /// A unit box of `cells` hexahedra with every option at its default.
    pub fn new(cells: [usize; 3]) -> Self {
        Self {
            cells,
            size: [1.0; 3],
            origin: [0.0; 3],
            tet: false,
            prism: false,
            perturb: 0.0,
            seed: 1,
            renumber: false,
            two_d: false,
        }
    }

    /// Checks the values (those parsed, or set directly), naming the bad option.
    pub fn validate(&self) -> Result<(), MeshError> {
        let [nx, ny, nz] = self.cells;
        if self.cells.contains(&0) {
            return Err(spec_error(
                format!("{nx}x{ny}x{nz}"),
                "every cell count must be at least 1",
            ));
        }
        if !self.size.iter().all(|s| s.is_finite() && *s > 0.0) {
            return Err(spec_error(
                format!("size={}", join_x(&self.size)),
                "box lengths must be positive and finite",
            ));
        }
        if !self.origin.iter().all(|o| o.is_finite()) {
            return Err(spec_error(
                format!("origin={}", join_x(&self.origin)),
                "coordinates must be finite",
            ));
        }
        if !(0.0..0.5).contains(&self.perturb) {
            return Err(spec_error(
                format!("perturb={}", self.perturb),
                "must be at least 0 and less than 0.5 (a fraction of the cell size; \
                 0.5 would let neighbouring points meet)",
            ));
        }
        if self.two_d && nz != 1 {
            return Err(spec_error(
                "2d",
                format!("a 2-D mesh has one cell layer: the z count must be 1, not {nz}"),
            ));
        }
        if self.tet && self.prism {
            return Err(spec_error(
                "prism",
                "cannot be combined with tet: choose one way to split the hexahedra",
            ));
        }
        if self.two_d && self.tet {
            return Err(spec_error(
                "2d",
                "cannot be combined with tet: a 2-D case needs extruded cells (hexahedra)",
            ));
        }
        Ok(())
    }

    /// Generates the mesh.
    pub fn generate(&self) -> Result<Mesh, MeshError> {
        self.validate()?;
        let shape = match (self.tet, self.prism) {
            (true, _) => SplitShape::Tetrahedra,
            (false, true) => SplitShape::Prisms,
            (false, false) => SplitShape::Hexahedron,
        };
        let topology = Topology::new(Grid { n: self.cells }, shape, self.two_d);
        topology.check_size()?;
        let points = self.points(&topology.grid);
        let numbering = if self.renumber {
            Numbering::random(topology.n_cells(), self.seed)
        } else {
            Numbering::Natural
        };
        assemble(points, &topology, &numbering)
    }

    fn points(&self, grid: &Grid) -> Vec<Vec3> {
        let n = grid.n;
        // Displacements are drawn in lattice units (cell size 1) and scaled per
        // axis: the mesh is an affine image of a perturbed unit lattice.
        let spacing: [f64; 3] = std::array::from_fn(|a| self.size[a] / n[a] as f64);
        let perturbed_axes = if self.two_d { 2 } else { 3 };
        let scale = self.perturb * if self.tet { TET_PERTURB_SCALE } else { 1.0 };
        (0..grid.n_points())
            .into_par_iter()
            .map(|p| {
                let ijk = grid.point_ijk(p);
                let mut x: [f64; 3] = std::array::from_fn(|a| {
                    self.origin[a] + self.size[a] * (ijk[a] as f64 / n[a] as f64)
                });
                let interior = (0..perturbed_axes).all(|a| ijk[a] > 0 && ijk[a] < n[a]);
                if scale > 0.0 && interior {
                    // In 2-D the front and back copies of a point move together.
                    let key = if self.two_d {
                        ijk[0] + (n[0] + 1) * ijk[1]
                    } else {
                        p
                    };
                    let d = random_displacement(self.seed, key as u64, perturbed_axes);
                    for a in 0..perturbed_axes {
                        x[a] += scale * spacing[a] * d[a];
                    }
                }
                Vec3::from(x)
            })
            .collect()
    }
}

impl FromStr for BoxSpec {
    type Err = MeshError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err =
            |part: &str, why: &str| MeshError::invalid(format!("mesh spec '{s}': {part}: {why}"));
        let rest = s.strip_prefix("box:").ok_or_else(|| {
            MeshError::invalid(format!(
                "mesh spec '{s}': expected 'box:NXxNYxNZ' followed by options like ':tet'"
            ))
        })?;
        let mut parts = rest.split(':');
        let counts = parts.next().unwrap_or_default();
        let cells = parse_triple::<usize>(counts).ok_or_else(|| {
            err(
                &format!("cell counts '{counts}'"),
                "expected three positive integers like 32x32x32",
            )
        })?;
        let mut spec = BoxSpec::new(cells);
        let mut seen: Vec<&str> = Vec::new();
        for part in parts {
            let (name, value) = match part.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (part, None),
            };
            if seen.contains(&name) {
                return Err(err(&format!("option '{part}'"), "given twice"));
            }
            seen.push(name);
            let bad_value = |what: &str| err(&format!("option '{part}'"), what);
            match (name, value) {
                ("size", Some(v)) => {
                    spec.size = parse_triple(v)
                        .ok_or_else(|| bad_value("expected three lengths like 2x1x1"))?
                }
                ("origin", Some(v)) => {
                    spec.origin = parse_triple(v)
                        .ok_or_else(|| bad_value("expected three coordinates like 0x0x-1"))?
                }
                ("perturb", Some(v)) => {
                    spec.perturb = v
                        .parse()
                        .map_err(|_| bad_value("expected a number like 0.2"))?
                }
                ("seed", Some(v)) => {
                    spec.seed = v
                        .parse()
                        .map_err(|_| bad_value("expected a non-negative integer"))?
                }
                ("tet", None) => spec.tet = true,
                ("prism", None) => spec.prism = true,
                ("renumber", None) => spec.renumber = true,
                ("2d", None) => spec.two_d = true,
                ("tet" | "prism" | "renumber" | "2d", Some(_)) => {
                    return Err(bad_value("takes no value"));
                }
                ("size" | "origin" | "perturb" | "seed", None) => {
                    return Err(bad_value(&format!("needs a value: {name}=...")));
                }
                _ => {
                    return Err(bad_value(
                        "unknown option (expected size=, origin=, tet, prism, perturb=, seed=, \
                         renumber or 2d)",
                    ))
                }
            }
        }
        spec.validate()
            .map_err(|e| MeshError::invalid(format!("mesh spec '{s}': {e}")))?;
        Ok(spec)
    }
}

fn spec_error(part: impl std::fmt::Display, why: impl std::fmt::Display) -> MeshError {
    MeshError::invalid(format!("{part}: {why}"))
}

fn join_x(v: &[f64; 3]) -> String {
    format!("{}x{}x{}", v[0], v[1], v[2])
}

/// Parses `AxBxC`.
fn parse_triple<T: FromStr + Copy + Default>(s: &str) -> Option<[T; 3]> {
    let mut out = [T::default(); 3];
    let mut items = s.split('x');
    for slot in &mut out {
        *slot = items.next()?.parse().ok()?;
    }
    items.next().is_none().then_some(out)
}

/// Displacement of tetrahedron corners per unit of `perturb`, in hex sizes:
/// `perturb < 0.5` keeps it under 0.16, the bound that keeps every Kuhn
/// tetrahedron valid (module documentation, tested below).
const TET_PERTURB_SCALE: f64 = 0.32;

/// SplitMix64's output function: a bijective 64-bit mix (Steele, Lea & Flood,
/// "Fast splittable pseudorandom number generators", OOPSLA 2014).
pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64's increment of its state.
pub(super) const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Uniform in [0, 1) from 53 random bits.
fn unit_f64(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A point's displacement, uniform in the unit ball (`dims` = 3) or disc
/// (`dims` = 2), a pure function of (seed, key): independent of thread count.
fn random_displacement(seed: u64, key: u64, dims: usize) -> [f64; 3] {
    let base = mix64(seed.wrapping_mul(GOLDEN_GAMMA) ^ mix64(key.wrapping_add(GOLDEN_GAMMA)));
    let u = |stream: u64| unit_f64(mix64(base.wrapping_add(stream.wrapping_mul(GOLDEN_GAMMA))));
    let phi = std::f64::consts::TAU * u(1);
    if dims == 2 {
        let r = u(2).sqrt();
        [r * phi.cos(), r * phi.sin(), 0.0]
    } else {
        let cos_theta = 2.0 * u(0) - 1.0;
        let sin_theta = (1.0 - cos_theta * cos_theta).sqrt();
        let r = u(2).cbrt();
        [
            r * sin_theta * phi.cos(),
            r * sin_theta * phi.sin(),
            r * cos_theta,
        ]
    }
}

/// Cell numbering of the generated mesh.
enum Numbering {
    /// Hex by hex in natural order, cells of a hex consecutively.
    Natural,
    /// A random permutation.
    Shuffled {
        new_of_old: Vec<Label>,
        old_of_new: Vec<Label>,
    },
}

impl Numbering {
    /// Fisher–Yates shuffle driven by a SplitMix64 stream: deterministic for a seed.
    fn random(n: usize, seed: u64) -> Self {
        let mut old_of_new: Vec<Label> = (0..n as Label).collect();
        let mut state = mix64(seed ^ 0x5EED_5EED_5EED_5EED);
        for i in (1..n).rev() {
            state = state.wrapping_add(GOLDEN_GAMMA);
            // Multiply-shift maps 64 random bits onto 0..=i (bias below 2^-32).
            let j = ((mix64(state) as u128 * (i as u128 + 1)) >> 64) as usize;
            old_of_new.swap(i, j);
        }
        let mut new_of_old = vec![0; n];
        for (new, &old) in old_of_new.iter().enumerate() {
            new_of_old[old as usize] = new as Label;
        }
        Self::Shuffled {
            new_of_old,
            old_of_new,
        }
    }

    #[inline]
    fn new_of(&self, old: usize) -> usize {
        match self {
            Self::Natural => old,
            Self::Shuffled { new_of_old, .. } => new_of_old[old] as usize,
        }
    }

    #[inline]
    fn old_of(&self, new: usize) -> usize {
        match self {
            Self::Natural => new,
            Self::Shuffled { old_of_new, .. } => old_of_new[new] as usize,
        }
    }
}

/// The hex lattice: `n` hexes along each axis, `n + 1` points.
#[derive(Clone, Copy, Debug)]
struct Grid {
    n: [usize; 3],
}

impl Grid {
    fn n_hexes(&self) -> usize {
        self.n.iter().product()
    }

    fn n_points(&self) -> usize {
        self.n.iter().map(|n| n + 1).product()
    }

    fn hex(&self, ijk: [usize; 3]) -> usize {
        ijk[0] + self.n[0] * (ijk[1] + self.n[1] * ijk[2])
    }

    fn hex_ijk(&self, h: usize) -> [usize; 3] {
        let [nx, ny, _] = self.n;
        [h % nx, (h / nx) % ny, h / (nx * ny)]
    }

    fn point_ijk(&self, p: usize) -> [usize; 3] {
        let [nx, ny, _] = self.n.map(|n| n + 1);
        [p % nx, (p / nx) % ny, p / (nx * ny)]
    }

    /// Points of a hex's corners; corner `c` is offset by bit 0 in x, bit 1 in y, bit 2 in z.
    fn corners(&self, ijk: [usize; 3]) -> [Label; 8] {
        let [px, py, _] = self.n.map(|n| n + 1);
        let base = ijk[0] + px * (ijk[1] + py * ijk[2]);
        std::array::from_fn(|c| {
            (base + (c & 1) + px * ((c >> 1) & 1) + px * py * (c >> 2)) as Label
        })
    }

    /// The hex beyond the `max` (or min) face along `axis`, if inside the box.
    fn across(&self, ijk: [usize; 3], axis: usize, max: bool) -> Option<usize> {
        let mut next = ijk;
        if max {
            next[axis] += 1;
            (next[axis] < self.n[axis]).then(|| self.hex(next))
        } else {
            next[axis] = ijk[axis].checked_sub(1)?;
            Some(self.hex(next))
        }
    }

    /// Hexes touching one side of the box, in natural order.
    fn side_hexes(&self, axis: usize, max: bool) -> impl Iterator<Item = usize> + '_ {
        let mut ranges = self.n.map(|n| 0..n);
        let fixed = if max { self.n[axis] - 1 } else { 0 };
        ranges[axis] = fixed..fixed + 1;
        let [rx, ry, rz] = ranges;
        rz.flat_map(move |k| {
            let rx = rx.clone();
            ry.clone()
                .flat_map(move |j| rx.clone().map(move |i| self.hex([i, j, k])))
        })
    }
}

/// What lies beyond a face of a cell template.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Beyond {
    /// Another cell of the same hex.
    SameHex(usize),
    /// A cell of the next hex through the hex's `max` (or min) side along `axis`.
    HexSide { axis: usize, max: bool, cell: usize },
}

/// A face of a cell template: hex corners, ordered so the normal points out of the cell.
#[derive(Clone, Copy, Debug)]
struct TemplateFace {
    corners: [u8; 4],
    beyond: Beyond,
}

/// Padding of a triangle in a template's four corner slots (prism meshes).
const NO_CORNER: u8 = u8::MAX;

/// Padding of a triangle in a generated face's four point slots.
const NO_POINT: Label = Label::MAX;

fn corner_position(c: u8) -> Vec3 {
    Vec3::new((c & 1) as f64, ((c >> 1) & 1) as f64, (c >> 2) as f64)
}

/// One hexahedron filling the hex: a face per side.
fn hexahedron_template() -> Vec<Vec<TemplateFace>> {
    let mut faces = Vec::with_capacity(6);
    for axis in 0..3 {
        let (a, b, c) = (
            1u8 << axis,
            1u8 << ((axis + 1) % 3),
            1u8 << ((axis + 2) % 3),
        );
        // (b, c, a) is right-handed, so walking 0 → b → b+c → c turns about +a.
        let min = [0, c, b | c, b];
        let max = [a, a | b, a | b | c, a | c];
        for (corners, is_max) in [(min, false), (max, true)] {
            faces.push(TemplateFace {
                corners,
                beyond: Beyond::HexSide {
                    axis,
                    max: is_max,
                    cell: 0,
                },
            });
        }
    }
    vec![faces]
}

/// The six permutations of the axes in lexicographic order ([0, 1, 2],
/// [0, 2, 1], [1, 0, 2], ...): Kuhn's tetrahedra of a cube (Kuhn 1960), one
/// per path from a corner to the opposite one along the three axes in the
/// permutation's order.
pub(crate) fn kuhn_paths() -> impl Iterator<Item = [usize; 3]> {
    (0..3).flat_map(|a| {
        (0..3)
            .filter(move |&b| b != a)
            .map(move |b| [a, b, 3 - a - b])
    })
}

/// The six Kuhn tetrahedra of a hex, one per axis permutation `s`
/// ([`kuhn_paths`]): corners 0, e_s0, e_s0 + e_s1, 7. Faces are matched by
/// their corner sets.
fn tetrahedra_template() -> Vec<Vec<TemplateFace>> {
    let tets: Vec<[u8; 4]> = kuhn_paths()
        .map(|s| {
            let first = 1u8 << s[0];
            [0, first, first | (1 << s[1]), 7]
        })
        .collect();
    let sorted = |mut t: [u8; 3]| {
        t.sort_unstable();
        t
    };
    let omit = |tet: &[u8; 4], m: usize| -> [u8; 3] {
        let mut out = [0; 3];
        for (slot, &c) in out.iter_mut().zip(
            tet.iter()
                .enumerate()
                .filter(|&(i, _)| i != m)
                .map(|(_, c)| c),
        ) {
            *slot = c;
        }
        out
    };
    // The tetrahedron owning a triangle with these corners (sorted), if any.
    let find = |tri: [u8; 3], not: usize| {
        (0..6).find(|&t| t != not && (0..4).any(|m| sorted(omit(&tets[t], m)) == tri))
    };
    tets.iter()
        .enumerate()
        .map(|(t, tet)| {
            (0..4)
                .map(|m| {
                    let mut tri = omit(tet, m);
                    let [p0, p1, p2] = tri.map(corner_position);
                    if (p1 - p0)
                        .cross(&(p2 - p0))
                        .dot(&(corner_position(tet[m]) - p0))
                        > 0.0
                    {
                        tri.swap(1, 2);
                    }
                    let side = (0..3).find_map(|axis| {
                        let bits = tri.map(|c| (c >> axis) & 1);
                        (bits[0] == bits[1] && bits[1] == bits[2]).then_some((axis, bits[0] == 1))
                    });
                    let beyond = match side {
                        Some((axis, max)) => {
                            // Corners as seen from the next hex through that side.
                            let shifted = sorted(tri.map(|c| c ^ (1 << axis)));
                            let cell = find(shifted, usize::MAX)
                                .expect("Kuhn tetrahedra conform across hex faces");
                            Beyond::HexSide { axis, max, cell }
                        }
                        None => Beyond::SameHex(
                            find(sorted(tri), t).expect("Kuhn tetrahedra conform inside a hex"),
                        ),
                    };
                    TemplateFace {
                        corners: [tri[0], tri[1], tri[2], 0],
                        beyond,
                    }
                })
                .collect()
        })
        .collect()
}

/// The two prisms of a hex: the hex cut along its x-y diagonal from corner 0
/// to corner 3, extruded along z; prism 0 has base corners 0, 1, 3, prism 1 has
/// 0, 3, 2. Beyond the y-min and x-max sides of prism 0 lie prism 1 of the next
/// hexes, and the other way round; along z a prism meets the same prism.
fn prisms_template() -> Vec<Vec<TemplateFace>> {
    let side = |axis, max, cell| Beyond::HexSide { axis, max, cell };
    let cells: [[(&[u8], Beyond); 5]; 2] = [
        [
            (&[0, 1, 3], side(2, false, 0)),
            (&[4, 5, 7], side(2, true, 0)),
            (&[0, 1, 5, 4], side(1, false, 1)),
            (&[1, 3, 7, 5], side(0, true, 1)),
            (&[0, 3, 7, 4], Beyond::SameHex(1)),
        ],
        [
            (&[0, 3, 2], side(2, false, 1)),
            (&[4, 7, 6], side(2, true, 1)),
            (&[3, 2, 6, 7], side(1, true, 0)),
            (&[2, 0, 4, 6], side(0, false, 0)),
            (&[0, 3, 7, 4], Beyond::SameHex(0)),
        ],
    ];
    cells
        .iter()
        .map(|faces| {
            let corners: Vec<Vec3> = faces
                .iter()
                .flat_map(|(c, _)| c.iter().map(|&c| corner_position(c)))
                .collect();
            let centre = corners.iter().sum::<Vec3>() / corners.len() as f64;
            faces
                .iter()
                .map(|&(ring, beyond)| {
                    let p: Vec<Vec3> = ring.iter().map(|&c| corner_position(c)).collect();
                    let area: Vec3 = (0..p.len())
                        .map(|i| p[i].cross(&p[(i + 1) % p.len()]))
                        .sum();
                    let mid = p.iter().sum::<Vec3>() / p.len() as f64;
                    let mut out = [NO_CORNER; 4];
                    out[..ring.len()].copy_from_slice(ring);
                    if area.dot(&(mid - centre)) < 0.0 {
                        out[..ring.len()].reverse();
                    }
                    TemplateFace {
                        corners: out,
                        beyond,
                    }
                })
                .collect()
        })
        .collect()
}

/// What lies beyond a face of a generated cell.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Across {
    /// A cell (natural numbering).
    Cell(usize),
    /// The box side `max` (or min) along `axis`.
    Boundary { axis: usize, max: bool },
}

/// A face of a generated cell, oriented out of the cell.
#[derive(Clone, Copy, Debug)]
struct CellFace {
    across: Across,
    points: [Label; 4],
}

const MAX_CELL_FACES: usize = 6;

/// A patch of the box: the sides (axis, max) it covers.
struct BoxPatch {
    name: String,
    kind: PatchKind,
    sides: Vec<(usize, bool)>,
}

/// How each hex of the lattice is filled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum SplitShape {
    Hexahedron,
    Tetrahedra,
    Prisms,
}

/// Cells of a box: a template per cell of a hex, replicated over the lattice.
struct Topology {
    grid: Grid,
    cells: Vec<Vec<TemplateFace>>,
    /// Point slots per face (the largest face; triangles padded with [`NO_POINT`]).
    face_size: usize,
    /// Faces of different sizes: the padding must be dropped.
    mixed_faces: bool,
    two_d: bool,
}

impl Topology {
    fn new(grid: Grid, shape: SplitShape, two_d: bool) -> Self {
        let (cells, face_size) = match shape {
            SplitShape::Hexahedron => (hexahedron_template(), 4),
            SplitShape::Tetrahedra => (tetrahedra_template(), 3),
            SplitShape::Prisms => (prisms_template(), 4),
        };
        Self {
            grid,
            cells,
            face_size,
            mixed_faces: shape == SplitShape::Prisms,
            two_d,
        }
    }

    fn cells_per_hex(&self) -> usize {
        self.cells.len()
    }

    fn n_cells(&self) -> usize {
        self.grid.n_hexes() * self.cells_per_hex()
    }

    /// Refuses boxes whose counts do not fit 32-bit labels, before allocating.
    fn check_size(&self) -> Result<(), MeshError> {
        // Saturating: absurd counts must not wrap around to small ones.
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let n = self.grid.n.map(|n| n as u128);
        let hexes = mul(mul(n[0], n[1]), n[2]);
        let sides = mul(
            2,
            mul(n[0], n[1])
                .saturating_add(mul(n[1], n[2]))
                .saturating_add(mul(n[2], n[0])),
        );
        let cells = mul(hexes, self.cells_per_hex() as u128);
        // Each cell's faces counted once per side, boundary faces once.
        let faces_per_hex_side = (self.cells_per_hex() > 1) as u128 + 1;
        let cell_face_sides = mul(cells, self.cells[0].len() as u128);
        let faces = cell_face_sides.saturating_add(mul(sides, faces_per_hex_side)) / 2;
        let points = mul(mul(n[0] + 1, n[1] + 1), n[2] + 1);
        let limit = u32::MAX as u128;
        for (what, count) in [
            ("cells", cells),
            ("points", points),
            ("face point labels", mul(faces, self.face_size as u128)),
        ] {
            if count > limit {
                return Err(MeshError::invalid(format!(
                    "box of {}x{}x{} hexes is too large: {count} {what} exceed 32-bit labels",
                    n[0], n[1], n[2]
                )));
            }
        }
        Ok(())
    }

    fn patches(&self) -> Vec<BoxPatch> {
        let mut patches = Vec::new();
        for (axis, name) in ["x", "y", "z"].iter().enumerate() {
            if self.two_d && axis == 2 {
                patches.push(BoxPatch {
                    name: "frontAndBack".to_string(),
                    kind: PatchKind::Empty,
                    sides: vec![(2, false), (2, true)],
                });
            } else {
                for (side, max) in [("min", false), ("max", true)] {
                    patches.push(BoxPatch {
                        name: format!("{name}{side}"),
                        kind: PatchKind::Patch,
                        sides: vec![(axis, max)],
                    });
                }
            }
        }
        patches
    }

    /// The faces of cell `cell` (natural numbering), outward, into `out`.
    #[inline]
    fn cell_faces<'a>(
        &self,
        cell: usize,
        out: &'a mut [CellFace; MAX_CELL_FACES],
    ) -> &'a [CellFace] {
        let per_hex = self.cells_per_hex();
        let (hex, local) = (cell / per_hex, cell % per_hex);
        let ijk = self.grid.hex_ijk(hex);
        let corners = self.grid.corners(ijk);
        let template = &self.cells[local];
        for (slot, face) in out.iter_mut().zip(template) {
            let across = match face.beyond {
                Beyond::SameHex(other) => Across::Cell(hex * per_hex + other),
                Beyond::HexSide { axis, max, cell } => match self.grid.across(ijk, axis, max) {
                    Some(next) => Across::Cell(next * per_hex + cell),
                    None => Across::Boundary { axis, max },
                },
            };
            *slot = CellFace {
                across,
                points: face.corners.map(|c| match c {
                    NO_CORNER => NO_POINT,
                    c => corners[c as usize],
                }),
            };
        }
        &out[..template.len()]
    }
}

/// Cells handled per parallel task when emitting internal faces.
const BLOCK: usize = 4096;

/// Emits the polyMesh arrays: internal faces cell by cell in the new numbering
/// (each cell's faces towards higher cells, sorted by neighbour), then the
/// boundary faces patch by patch.
fn assemble(
    points: Vec<Vec3>,
    topology: &Topology,
    numbering: &Numbering,
) -> Result<Mesh, MeshError> {
    let n_cells = topology.n_cells();
    let k = topology.face_size;

    // Owned internal faces per cell (new numbering), then their offsets.
    let mut first_face: Vec<u32> = (0..n_cells)
        .into_par_iter()
        .map(|new| {
            let mut buf = [CELL_FACE_ZERO; MAX_CELL_FACES];
            topology
                .cell_faces(numbering.old_of(new), &mut buf)
                .iter()
                .filter(|f| matches!(f.across, Across::Cell(o) if numbering.new_of(o) > new))
                .count() as u32
        })
        .collect();
    first_face.push(0);
    let mut sum = 0u32;
    for n in &mut first_face {
        (*n, sum) = (sum, sum + *n);
    }
    let n_internal = sum as usize;

    let boundary = boundary_faces(topology, numbering);
    let n_faces = n_internal + boundary.owner.len();
    let mut owner = vec![0 as Label; n_faces];
    let mut neighbour = vec![0 as Label; n_internal];
    let mut labels = vec![0 as Label; n_faces * k];

    // Disjoint output slices per block of cells, filled in parallel.
    let block_starts: Vec<usize> = (0..n_cells)
        .step_by(BLOCK)
        .map(|c| first_face[c] as usize)
        .chain([n_internal])
        .collect();
    let sizes = || block_starts.windows(2).map(|w| w[1] - w[0]);
    let owner_blocks = split_sizes(&mut owner[..n_internal], sizes(), 1);
    let neighbour_blocks = split_sizes(&mut neighbour, sizes(), 1);
    let label_blocks = split_sizes(&mut labels[..n_internal * k], sizes(), k);
    owner_blocks
        .into_par_iter()
        .zip(neighbour_blocks)
        .zip(label_blocks)
        .enumerate()
        .for_each(|(b, ((own, nei), lab))| {
            let mut at = 0;
            for new in b * BLOCK..((b + 1) * BLOCK).min(n_cells) {
                let mut buf = [CELL_FACE_ZERO; MAX_CELL_FACES];
                let mut owned = [(0usize, [0 as Label; 4]); MAX_CELL_FACES];
                let mut n_owned = 0;
                for face in topology.cell_faces(numbering.old_of(new), &mut buf) {
                    if let Across::Cell(old) = face.across {
                        let other = numbering.new_of(old);
                        if other > new {
                            owned[n_owned] = (other, face.points);
                            n_owned += 1;
                        }
                    }
                }
                let owned = &mut owned[..n_owned];
                owned.sort_unstable_by_key(|&(other, _)| other);
                for &(other, pts) in owned.iter() {
                    own[at] = new as Label;
                    nei[at] = other as Label;
                    lab[at * k..(at + 1) * k].copy_from_slice(&pts[..k]);
                    at += 1;
                }
            }
        });

    owner[n_internal..].copy_from_slice(&boundary.owner);
    labels[n_internal * k..].copy_from_slice(&boundary.labels);
    drop(first_face);
    let mut start = n_internal;
    let patches = boundary
        .patches
        .into_iter()
        .map(|(name, kind, size)| {
            let p = Patch::new(name, kind, start, size);
            start += size;
            p
        })
        .collect();
    let faces = if topology.mixed_faces {
        let offsets = labels.chunks(k).scan(0u32, |end, face| {
            *end += face.iter().filter(|&&p| p != NO_POINT).count() as u32;
            Some(*end)
        });
        let offsets = std::iter::once(0).chain(offsets).collect();
        labels.retain(|&p| p != NO_POINT);
        FaceList::from_compact(offsets, labels)?
    } else {
        FaceList::uniform(k, labels)?
    };
    Mesh::new(points, faces, owner, neighbour, patches)
}

const CELL_FACE_ZERO: CellFace = CellFace {
    across: Across::Boundary {
        axis: 0,
        max: false,
    },
    points: [0; 4],
};

struct BoundaryFaces {
    owner: Vec<Label>,
    labels: Vec<Label>,
    /// Name, kind and face count of each patch, in order.
    patches: Vec<(String, PatchKind, usize)>,
}

/// Boundary faces patch by patch; within a patch, by hex in natural order.
fn boundary_faces(topology: &Topology, numbering: &Numbering) -> BoundaryFaces {
    let mut out = BoundaryFaces {
        owner: Vec::new(),
        labels: Vec::new(),
        patches: Vec::new(),
    };
    let per_hex = topology.cells_per_hex();
    let mut buf = [CELL_FACE_ZERO; MAX_CELL_FACES];
    for BoxPatch { name, kind, sides } in topology.patches() {
        let before = out.owner.len();
        for (axis, max) in sides {
            let side = Across::Boundary { axis, max };
            for hex in topology.grid.side_hexes(axis, max) {
                for cell in hex * per_hex..(hex + 1) * per_hex {
                    for face in topology.cell_faces(cell, &mut buf) {
                        if face.across == side {
                            out.owner.push(numbering.new_of(cell) as Label);
                            out.labels
                                .extend_from_slice(&face.points[..topology.face_size]);
                        }
                    }
                }
            }
        }
        out.patches.push((name, kind, out.owner.len() - before));
    }
    out
}

/// Splits `data` into consecutive slices of `sizes[i] * width` elements.
fn split_sizes<T>(
    mut data: &mut [T],
    sizes: impl Iterator<Item = usize>,
    width: usize,
) -> Vec<&mut [T]> {
    sizes
        .map(|size| {
            let (head, tail) = std::mem::take(&mut data).split_at_mut(size * width);
            data = tail;
            head
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kuhn's paths are the six permutations of the axes, each once, in
    /// lexicographic order.
    #[test]
    fn kuhn_paths_are_the_permutations_of_the_axes_in_order() {
        let paths: Vec<[usize; 3]> = kuhn_paths().collect();
        assert_eq!(paths.len(), 6);
        for p in &paths {
            let mut sorted = *p;
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2], "{p:?} is not a permutation");
        }
        assert!(paths.windows(2).all(|w| w[0] < w[1]), "{paths:?}");
    }

    /// The bound behind [`TET_PERTURB_SCALE`]: corners moved by at most
    /// `e = 0.5 * scale` change a tetrahedron's edge matrix by less than its
    /// smallest singular value, so no tetrahedron can invert.
    #[test]
    fn tet_perturbation_cannot_invert() {
        let largest_move = 0.5 * TET_PERTURB_SCALE;
        for (t, faces) in tetrahedra_template().iter().enumerate() {
            let mut corners: Vec<u8> = faces.iter().flat_map(|f| f.corners[..3].to_vec()).collect();
            corners.sort_unstable();
            corners.dedup();
            assert_eq!(corners.len(), 4);
            for apex in 0..4 {
                let a = corner_position(corners[apex]);
                let edges: Vec<Vec3> = (0..4)
                    .filter(|&i| i != apex)
                    .map(|i| corner_position(corners[i]) - a)
                    .collect();
                let m = nalgebra::Matrix3::from_columns(&edges);
                let sigma_min = m.singular_values().min();
                assert!(
                    2.0 * largest_move * 3f64.sqrt() < sigma_min,
                    "tet {t} apex {apex}: smallest singular value {sigma_min}"
                );
            }
        }
    }

    /// The template's faces close every cell and each internal face is seen from
    /// both sides with opposite orientation.
    #[test]
    fn templates_are_closed_and_matched() {
        let ring = |f: &TemplateFace, k: usize| -> Vec<u8> {
            f.corners[..k]
                .iter()
                .copied()
                .filter(|&c| c != NO_CORNER)
                .collect()
        };
        for (cells, k) in [
            (hexahedron_template(), 4),
            (tetrahedra_template(), 3),
            (prisms_template(), 4),
        ] {
            for (t, faces) in cells.iter().enumerate() {
                let area: Vec3 = faces
                    .iter()
                    .map(|f| {
                        let p: Vec<Vec3> = ring(f, k).iter().map(|&c| corner_position(c)).collect();
                        (0..p.len())
                            .map(|i| p[i].cross(&p[(i + 1) % p.len()]))
                            .sum::<Vec3>()
                    })
                    .sum();
                assert!(area.norm() < 1e-15, "cell {t} is not closed");
                for f in faces {
                    if let Beyond::SameHex(other) = f.beyond {
                        let back = cells[other]
                            .iter()
                            .find(|g| g.beyond == Beyond::SameHex(t))
                            .expect("neighbour sees this cell");
                        let a = ring(f, k);
                        let mut b = ring(back, k);
                        b.reverse();
                        let at = b.iter().position(|&c| c == a[0]).unwrap();
                        b.rotate_left(at);
                        assert_eq!(a, b, "cell {t} and {other} disagree on their face");
                    }
                }
            }
        }
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let Numbering::Shuffled {
            new_of_old,
            old_of_new,
        } = Numbering::random(1000, 9)
        else {
            unreachable!()
        };
        let mut seen = vec![false; 1000];
        for (new, &old) in old_of_new.iter().enumerate() {
            assert!(!seen[old as usize]);
            seen[old as usize] = true;
            assert_eq!(new_of_old[old as usize] as usize, new);
        }
        let moved = old_of_new
            .iter()
            .enumerate()
            .filter(|&(i, &o)| i != o as usize)
            .count();
        assert!(moved > 900);
    }

    #[test]
    fn displacements_fill_the_ball() {
        let d: Vec<[f64; 3]> = (0..20_000).map(|p| random_displacement(3, p, 3)).collect();
        let norm = |v: &[f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        assert!(d.iter().all(|v| norm(v) <= 1.0));
        // Uniform in the ball: 1/8 of the points lie within radius 1/2, mean ~0.
        let inner = d.iter().filter(|v| norm(v) < 0.5).count() as f64 / d.len() as f64;
        assert!((inner - 0.125).abs() < 0.01, "{inner}");
        for a in 0..3 {
            let mean = d.iter().map(|v| v[a]).sum::<f64>() / d.len() as f64;
            assert!(mean.abs() < 0.02, "axis {a}: {mean}");
        }
        let disc: Vec<[f64; 3]> = (0..1000).map(|p| random_displacement(3, p, 2)).collect();
        assert!(disc.iter().all(|v| v[2] == 0.0 && norm(v) <= 1.0));
    }
}

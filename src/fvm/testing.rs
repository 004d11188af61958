//! Boundary conditions for tests and benchmarks (deterministic from a seed).

use super::{BoundaryCondition, PatchValues};
use crate::mesh::{Mesh, PatchKind};
use crate::sparse::testing::SplitMix;

/// One condition per patch: over the non-empty patches in turn fixedValue,
/// zeroGradient, fixedGradient and mixed (starting at kind `seed % 4`), with
/// per-face values in [−1, 1) drawn from `seed` (mixed: value fractions in
/// [0, 1] with the first face 0 and the second 1); `empty` on empty patches.
pub fn mixed_conditions(mesh: &Mesh, seed: u64) -> Vec<BoundaryCondition> {
    let mut rng = SplitMix(seed);
    let mut kind = seed as usize % 4;
    mesh.patches()
        .iter()
        .map(|patch| {
            if patch.kind == PatchKind::Empty {
                return BoundaryCondition::Empty;
            }
            let mut values = |fraction: bool| {
                PatchValues::PerFace(
                    (0..patch.size)
                        .map(|i| match (fraction, i) {
                            (true, 0) => 0.0,
                            (true, 1) => 1.0,
                            (true, _) => rng.next_f64(),
                            (false, _) => 2.0 * rng.next_f64() - 1.0,
                        })
                        .collect(),
                )
            };
            kind += 1;
            match (kind - 1) % 4 {
                0 => BoundaryCondition::FixedValue(values(false)),
                1 => BoundaryCondition::ZeroGradient,
                2 => BoundaryCondition::FixedGradient(values(false)),
                _ => BoundaryCondition::Mixed {
                    ref_value: values(false),
                    ref_gradient: values(false),
                    value_fraction: values(true),
                },
            }
        })
        .collect()
}

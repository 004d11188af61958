//! The Schwarz application on the CPU: gather, the block factor's sweeps,
//! scatter (see the module docs).

use rayon::prelude::*;

use super::{Decomposition, SchwarzKind, SchwarzSettings};
use crate::solve::ic::Ic0;
use crate::solve::ilu::Ilu;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// z_g = the first listed block value, plus the others in list order
/// ([`Decomposition::scatter_lists`]; the GPU's `schwarz_scatter`).
fn scatter(ptr: &[usize], list: &[u32], y: &[f64], z: &mut [f64]) {
    z.par_iter_mut().enumerate().for_each(|(g, z)| {
        let mut held = list[ptr[g]..ptr[g + 1]].iter().map(|&c| y[c as usize]);
        let first = held.next().expect("every row is in a block");
        *z = held.fold(first, |acc, v| acc + v);
    });
}

/// The block factor: ILU(k) (RAS) or IC(0) (AS) of the block matrix.
enum BlockFactor {
    Ilu(Ilu),
    Ic0(Ic0<'static>),
}

/// The Schwarz preconditioner on the CPU.
pub struct Schwarz {
    n: usize,
    settings: SchwarzSettings,
    decomposition: Decomposition,
    scatter_ptr: Vec<usize>,
    scatter_list: Vec<u32>,
    factor: BlockFactor,
}

impl Schwarz {
    pub fn new(a: &Csr, settings: &SchwarzSettings) -> Result<Self, SolveError> {
        let decomposition = Decomposition::new(a, settings)?;
        let factor = match settings.kind {
            SchwarzKind::Restricted => {
                BlockFactor::Ilu(Ilu::new(&decomposition.matrix, settings.fill_level)?)
            }
            SchwarzKind::Additive => {
                BlockFactor::Ic0(Ic0::owned(decomposition.matrix.clone(), "IC(0)")?)
            }
        };
        let (scatter_ptr, scatter_list) = decomposition.scatter_lists(settings.kind, a.n_rows());
        Ok(Self {
            n: a.n_rows(),
            settings: *settings,
            decomposition,
            scatter_ptr,
            scatter_list,
            factor,
        })
    }

    pub fn decomposition(&self) -> &Decomposition {
        &self.decomposition
    }
    /// The ILU factors of the blocks (RAS).
    pub fn ilu(&self) -> Option<&Ilu> {
        match &self.factor {
            BlockFactor::Ilu(f) => Some(f),
            BlockFactor::Ic0(_) => None,
        }
    }
    /// Forward and backward levels of the concatenated factors.
    pub fn levels(&self) -> (usize, usize) {
        match &self.factor {
            BlockFactor::Ilu(f) => f.levels(),
            BlockFactor::Ic0(_) => {
                let m = &self.decomposition.matrix;
                (
                    crate::sparse::levels::LevelSchedule::lower(m).n_levels(),
                    crate::sparse::levels::LevelSchedule::upper(m).n_levels(),
                )
            }
        }
    }
    /// One line for logs and the bench.
    pub fn describe(&self) -> String {
        let (lo, up) = self.levels();
        format!(
            "{}: {} blocks, {:.3}x rows, levels {lo}/{up}",
            self.settings,
            self.decomposition.n_blocks(),
            self.decomposition.expansion()
        )
    }
}

impl LinearOperator for Schwarz {
    fn n(&self) -> usize {
        self.n
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let rb = self.decomposition.gather(r);
        let mut yb = vec![0.0; rb.len()];
        match &self.factor {
            BlockFactor::Ilu(f) => f.apply(&rb, &mut yb),
            BlockFactor::Ic0(f) => f.apply(&rb, &mut yb),
        }
        scatter(&self.scatter_ptr, &self.scatter_list, &yb, z);
    }
}

//! CUDA graphs of a device loop's chunks (`gpu::pcg`, `gpu::bicgstab`),
//! captured once per key and replayed. A key names everything a captured
//! launch holds that may change between chunks: the device addresses of the
//! vectors and matrix, the chunk's length, the preconditioner's buffers. A
//! chunk whose key was seen replays that graph; another is captured first.
//! The least recently replayed graph goes when the cache is full.

use std::cell::{Cell, RefCell};

use cudarc::driver::CudaGraph;

use super::{Gpu, GpuError};

/// Captured graphs by key, at most `capacity`, the most recently replayed
/// last.
pub(crate) struct GraphCache<K> {
    graphs: RefCell<Vec<(K, CudaGraph)>>,
    capacity: usize,
    captures: Cell<usize>,
}

impl<K: PartialEq> GraphCache<K> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            graphs: RefCell::new(Vec::new()),
            capacity: capacity.max(1),
            captures: Cell::new(0),
        }
    }

    /// Graphs captured so far.
    pub(crate) fn captures(&self) -> usize {
        self.captures.get()
    }

    /// Forgets every graph (what they hold is about to change).
    pub(crate) fn clear(&mut self) {
        self.graphs.get_mut().clear();
    }

    /// Replays the graph of `key`, capturing `launches` into it first when
    /// there is none; `false` (after a warning naming `loop_name`) when the
    /// capture failed and nothing ran, so that the caller launches directly.
    pub(crate) fn replay(
        &self,
        gpu: &Gpu,
        key: K,
        loop_name: &str,
        launches: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<bool, GpuError> {
        let mut graphs = self.graphs.borrow_mut();
        let at = match graphs.iter().position(|(k, _)| *k == key) {
            Some(at) => {
                let hit = graphs.remove(at);
                graphs.push(hit);
                graphs.len() - 1
            }
            None => match gpu.capture(launches) {
                Ok(graph) => {
                    if graphs.len() == self.capacity {
                        graphs.remove(0);
                    }
                    graphs.push((key, graph));
                    self.captures.set(self.captures.get() + 1);
                    graphs.len() - 1
                }
                Err(e) => {
                    log::warn!(
                        "CUDA graph capture failed ({e}); {loop_name} launches its kernels \
                         directly"
                    );
                    return Ok(false);
                }
            },
        };
        gpu.launch_graph(&graphs[at].1).map(|()| true)
    }
}

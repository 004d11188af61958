//! Gmsh `.msh` reader: MSH 4.1 (ASCII and binary) and MSH 2.2 (ASCII).
//!
//! Our own parser rather than the `mshio` crate: `mshio` reads only MSH 4.1, skips
//! `$PhysicalNames`, and reports errors as byte positions of its `nom` parsers,
//! while we need 2.2 too, patch names, and errors that name the line.
//!
//! What becomes what:
//! - elements of dimension 3 (first-order tetrahedra, hexahedra, prisms, pyramids)
//!   are the cells, in file order; any other volume element type is an error;
//! - triangles and quads of a physical surface (dimension 2) are tagged boundary
//!   faces; the physical surface's name from `$PhysicalNames` (or `patch<tag>`) is
//!   the patch name, patches ordered by physical tag (physical surfaces of the same
//!   name make one patch). The patch kind is
//!   [`PatchKind::Wall`] when the name contains "wall" (any case), else
//!   [`PatchKind::Patch`]. Boundary faces on no physical surface go to
//!   `defaultFaces` (see [`super::cells`]);
//! - physical volumes are only reported (cell zones are not used yet); lower-dimension
//!   elements on no physical surface are ignored;
//! - node tags may be any positive numbers (gaps allowed); nodes no cell uses are dropped.
//!
//! Errors name the file and line; in binary files the line is 0 and the message
//! gives the byte offset.

use super::cells::{mesh_from_elements, ElementList, ElementShape};
use super::{Label, Mesh, MeshError, PatchKind, Vec3};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Reads a volume mesh; physical surfaces become patches (see the module doc).
pub fn read_msh(path: &Path) -> Result<Mesh, MeshError> {
    let bytes = crate::limits::read_regular_file(path).map_err(|e| MeshError::io(path, e))?;
    parse_msh(path, &bytes)
}

/// Parses the bytes of a `.msh` file; `path` is used in messages only.
pub fn parse_msh(path: &Path, bytes: &[u8]) -> Result<Mesh, MeshError> {
    let contents = MshReader::new(path, bytes).read()?;
    contents.into_mesh().map_err(|e| e.in_file(path))
}

/// Gmsh element types: (dimension, number of nodes, description).
fn element_type(t: i32) -> Option<(u8, usize, &'static str)> {
    Some(match t {
        1 => (1, 2, "2-node line"),
        2 => (2, 3, "3-node triangle"),
        3 => (2, 4, "4-node quadrangle"),
        4 => (3, 4, "4-node tetrahedron"),
        5 => (3, 8, "8-node hexahedron"),
        6 => (3, 6, "6-node prism"),
        7 => (3, 5, "5-node pyramid"),
        8 => (1, 3, "3-node second-order line"),
        9 => (2, 6, "6-node second-order triangle"),
        10 => (2, 9, "9-node second-order quadrangle"),
        11 => (3, 10, "10-node second-order tetrahedron"),
        12 => (3, 27, "27-node second-order hexahedron"),
        13 => (3, 18, "18-node second-order prism"),
        14 => (3, 14, "14-node second-order pyramid"),
        15 => (0, 1, "1-node point"),
        16 => (2, 8, "8-node second-order quadrangle"),
        17 => (3, 20, "20-node second-order hexahedron"),
        18 => (3, 15, "15-node second-order prism"),
        19 => (3, 13, "13-node second-order pyramid"),
        _ => return None,
    })
}

fn volume_shape(t: i32) -> Option<ElementShape> {
    Some(match t {
        4 => ElementShape::Tetrahedron,
        5 => ElementShape::Hexahedron,
        6 => ElementShape::Prism,
        7 => ElementShape::Pyramid,
        _ => return None,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Version {
    V2,
    V41,
}

#[derive(Clone, Copy)]
enum Encoding {
    Ascii,
    /// Binary numbers of the writer's byte order (`swap` when it differs from ours).
    Binary {
        swap: bool,
    },
}

/// Node tag to point index: a table when tags are dense enough, else a hash map.
enum NodeIndex {
    Dense(Vec<Label>),
    Sparse(HashMap<u64, Label>),
}

impl NodeIndex {
    fn new(tags: &[u64]) -> Result<Self, String> {
        let max = tags.iter().copied().max().unwrap_or(0);
        let mut index = if max <= 4 * tags.len() as u64 + 1024 {
            Self::Dense(vec![Label::MAX; max as usize + 1])
        } else {
            Self::Sparse(HashMap::with_capacity(tags.len()))
        };
        for (i, &t) in tags.iter().enumerate() {
            let i = Label::try_from(i).map_err(|_| "more than 2^32 nodes".to_string())?;
            let old = match &mut index {
                Self::Dense(v) => std::mem::replace(&mut v[t as usize], i),
                Self::Sparse(m) => m.insert(t, i).unwrap_or(Label::MAX),
            };
            if old != Label::MAX {
                return Err(format!("node tag {t} is defined twice"));
            }
        }
        Ok(index)
    }

    fn get(&self, tag: u64) -> Option<Label> {
        match self {
            Self::Dense(v) => v.get(tag as usize).copied().filter(|&i| i != Label::MAX),
            Self::Sparse(m) => m.get(&tag).copied(),
        }
    }
}

/// What a `.msh` file says, as far as the mesh needs it.
struct MshContents {
    /// (dimension, physical tag) -> name.
    physical_names: HashMap<(i32, i32), String>,
    points: Vec<Vec3>,
    cells: ElementList<ElementShape>,
    /// Boundary polygons; kind = physical surface tag until `into_mesh`.
    boundary: ElementList<u32>,
    /// Cells per physical volume tag.
    physical_volumes: BTreeMap<i32, usize>,
}

impl MshContents {
    fn into_mesh(self) -> Result<Mesh, MeshError> {
        for (tag, n) in &self.physical_volumes {
            let name = self
                .physical_names
                .get(&(3, *tag))
                .map_or(String::new(), |n| format!(" '{n}'"));
            log::info!("physical volume {tag}{name}: {n} cells (cell zones are not used yet)");
        }
        if self.cells.is_empty() {
            return Err(MeshError::invalid(
                "the file has no volume elements: define a Physical Volume in the .geo file \
                 (Gmsh saves only elements of physical groups when there are any) and mesh in 3-D",
            ));
        }
        let mut tags: Vec<u32> = (0..self.boundary.len())
            .map(|b| self.boundary.kind(b))
            .collect();
        tags.sort_unstable();
        tags.dedup();
        let patches = tags
            .iter()
            .map(|&t| {
                let name = self
                    .physical_names
                    .get(&(2, t as i32))
                    .cloned()
                    .unwrap_or_else(|| format!("patch{t}"));
                let kind = if name.to_lowercase().contains("wall") {
                    PatchKind::Wall
                } else {
                    PatchKind::Patch
                };
                (name, kind)
            })
            .collect();
        let mut boundary = ElementList::new();
        for b in 0..self.boundary.len() {
            let patch = tags.binary_search(&self.boundary.kind(b)).unwrap_or(0) as u32;
            boundary.push(patch, self.boundary.tag(b), self.boundary.nodes(b));
        }
        mesh_from_elements(self.points, &self.cells, &boundary, patches)
    }
}

/// Tokenising reader over the file's bytes that knows the current line (ASCII) or
/// byte offset (binary).
struct MshReader<'a> {
    file: &'a Path,
    bytes: &'a [u8],
    pos: usize,
    /// 1-based line of `pos` while the file is read as text.
    line: usize,
    encoding: Encoding,
    version: Version,
    /// Bytes of a binary `size_t`.
    size_t: usize,
    /// (dimension, entity tag) -> physical tags (MSH 4.1).
    entity_physicals: HashMap<(i32, i32), Vec<i32>>,
    node_tags: Vec<u64>,
    node_index: Option<NodeIndex>,
    out: MshContents,
}

type Res<T> = Result<T, MeshError>;

impl<'a> MshReader<'a> {
    fn new(file: &'a Path, bytes: &'a [u8]) -> Self {
        Self {
            file,
            bytes,
            pos: 0,
            line: 1,
            encoding: Encoding::Ascii,
            version: Version::V41,
            size_t: 8,
            entity_physicals: HashMap::new(),
            node_tags: Vec::new(),
            node_index: None,
            out: MshContents {
                physical_names: HashMap::new(),
                points: Vec::new(),
                cells: ElementList::new(),
                boundary: ElementList::new(),
                physical_volumes: BTreeMap::new(),
            },
        }
    }

    fn err(&self, msg: impl std::fmt::Display) -> MeshError {
        self.err_at(self.line, msg)
    }

    /// An error at `line` of a text file; binary files give the byte offset instead.
    fn err_at(&self, line: usize, msg: impl std::fmt::Display) -> MeshError {
        match self.encoding {
            Encoding::Ascii => MeshError::parse(self.file, line, msg.to_string()),
            Encoding::Binary { .. } => {
                MeshError::parse(self.file, 0, format!("{msg} (at byte offset {})", self.pos))
            }
        }
    }

    fn skip_space(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if !b.is_ascii_whitespace() {
                break;
            }
            if b == b'\n' {
                self.line += 1;
            }
            self.pos += 1;
        }
    }

    /// Next whitespace-delimited token; `what` names it for the error at end of file.
    fn token(&mut self, what: &str) -> Res<&'a str> {
        self.skip_space();
        let start = self.pos;
        while self.pos < self.bytes.len() && !self.bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(format!("unexpected end of file: expected {what}")));
        }
        std::str::from_utf8(&self.bytes[start..self.pos])
            .map_err(|_| self.err(format!("expected {what}, found bytes that are not text")))
    }

    fn parse_token<T: std::str::FromStr>(&mut self, what: &str) -> Res<T> {
        let tok = self.token(what)?;
        tok.parse()
            .map_err(|_| self.err(format!("expected {what}, found '{tok}'")))
    }

    /// The rest of the current line (without the line break), moving to the next line.
    fn rest_of_line(&mut self) -> &'a [u8] {
        let start = self.pos;
        while self.pos < self.bytes.len() && self.bytes[self.pos] != b'\n' {
            self.pos += 1;
        }
        let line = &self.bytes[start..self.pos];
        if self.pos < self.bytes.len() {
            self.pos += 1;
            self.line += 1;
        }
        line
    }

    fn take(&mut self, n: usize, what: &str) -> Res<&'a [u8]> {
        match self.bytes.get(self.pos..self.pos + n) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(self.err(format!("unexpected end of file: expected {what}"))),
        }
    }

    fn binary<const N: usize>(&mut self, what: &str, swap: bool) -> Res<[u8; N]> {
        let mut b: [u8; N] = self.take(N, what)?.try_into().expect("took N bytes");
        if swap {
            b.reverse();
        }
        Ok(b)
    }

    /// A C `int` of the data sections.
    fn int(&mut self, what: &str) -> Res<i32> {
        match self.encoding {
            Encoding::Ascii => self.parse_token(what),
            Encoding::Binary { swap } => Ok(i32::from_ne_bytes(self.binary(what, swap)?)),
        }
    }

    /// A `size_t` of the data sections.
    fn size(&mut self, what: &str) -> Res<u64> {
        match self.encoding {
            Encoding::Ascii => self.parse_token(what),
            Encoding::Binary { swap } if self.size_t == 4 => {
                Ok(u32::from_ne_bytes(self.binary(what, swap)?) as u64)
            }
            Encoding::Binary { swap } => Ok(u64::from_ne_bytes(self.binary(what, swap)?)),
        }
    }

    fn double(&mut self, what: &str) -> Res<f64> {
        let x = match self.encoding {
            Encoding::Ascii => self.parse_token(what)?,
            Encoding::Binary { swap } => f64::from_ne_bytes(self.binary(what, swap)?),
        };
        if x.is_finite() {
            Ok(x)
        } else {
            Err(self.err(format!("{what} is not a finite number")))
        }
    }

    /// A count read as `size_t`, bounded by the bytes left so that a corrupt count
    /// cannot make us allocate without limit (every counted item takes at least a byte).
    fn count(&mut self, what: &str) -> Res<usize> {
        let n = self.size(what)?;
        if n > (self.bytes.len() - self.pos) as u64 {
            return Err(self.err(format!(
                "{what} is {n}, more than the rest of the file can hold"
            )));
        }
        Ok(n as usize)
    }

    fn expect(&mut self, word: &str) -> Res<()> {
        let tok = self.token(word)?;
        if tok == word {
            Ok(())
        } else {
            Err(self.err(format!("expected {word}, found '{tok}'")))
        }
    }

    fn read(mut self) -> Res<MshContents> {
        self.expect("$MeshFormat")?;
        self.read_format()?;
        loop {
            self.skip_space();
            if self.pos >= self.bytes.len() {
                break;
            }
            let section = self.token("a section")?;
            let Some(name) = section.strip_prefix('$') else {
                return Err(self.err(format!("expected a section like $Nodes, found '{section}'")));
            };
            // Binary data starts on the line after the section name.
            self.rest_of_line();
            match name {
                "PhysicalNames" => self.read_physical_names()?,
                "Entities" if self.version == Version::V41 => self.read_entities()?,
                "PartitionedEntities" => {
                    return Err(self
                        .err("partitioned meshes are not supported: save the mesh unpartitioned"))
                }
                "Nodes" => self.read_nodes()?,
                "Elements" => self.read_elements()?,
                _ => {
                    self.skip_section(name)?;
                    continue;
                }
            }
            self.expect(&format!("$End{name}"))?;
        }
        if self.node_index.is_none() {
            return Err(self.err("the file has no $Nodes section"));
        }
        Ok(self.out)
    }

    fn read_format(&mut self) -> Res<()> {
        let version = self.token("the format version")?;
        self.version = match version {
            "4.1" => Version::V41,
            "2" | "2.0" | "2.1" | "2.2" => Version::V2,
            other => {
                return Err(self.err(format!(
                    "MSH format {other} is not supported: save as MSH 4.1 or 2.2 \
                     (gmsh -format msh41 or msh22)"
                )))
            }
        };
        let file_type: i32 = self.parse_token("the file type (0 ASCII, 1 binary)")?;
        let size_t: usize = self.parse_token("the data size")?;
        if size_t != 4 && size_t != 8 {
            return Err(self.err(format!("data size {size_t} is not supported (expected 8)")));
        }
        self.size_t = size_t;
        match file_type {
            0 => {}
            1 if self.version == Version::V2 => {
                return Err(self.err(
                    "binary MSH 2.2 is not supported: save as MSH 4.1 (ASCII or binary) or ASCII MSH 2.2",
                ))
            }
            1 => {
                self.rest_of_line();
                let one = self.take(4, "the binary byte-order marker")?;
                let swap = match i32::from_ne_bytes(one.try_into().expect("4 bytes")) {
                    1 => false,
                    0x0100_0000 => true,
                    _ => return Err(self.err("bad binary byte-order marker (expected the integer 1)")),
                };
                self.encoding = Encoding::Binary { swap };
            }
            other => return Err(self.err(format!("file type {other} is neither 0 (ASCII) nor 1 (binary)"))),
        }
        self.expect("$EndMeshFormat")
    }

    fn skip_section(&mut self, name: &str) -> Res<()> {
        let end = format!("$End{name}");
        let start_line = self.line;
        loop {
            self.skip_space();
            if self.pos >= self.bytes.len() {
                self.line = start_line;
                return Err(self.err(format!("section ${name} has no {end}")));
            }
            let at_line_start = self.pos == 0 || self.bytes[self.pos - 1] == b'\n';
            let line = self.rest_of_line();
            if at_line_start && line.trim_ascii_end() == end.as_bytes() {
                return Ok(());
            }
        }
    }

    /// Always text, also in binary files.
    fn read_physical_names(&mut self) -> Res<()> {
        let n: usize = self.parse_token("the number of physical names")?;
        for _ in 0..n {
            let dim: i32 = self.parse_token("a physical dimension")?;
            let tag: i32 = self.parse_token("a physical tag")?;
            let line = self.line;
            let text = String::from_utf8_lossy(self.rest_of_line()).into_owned();
            let name = text.trim().trim_matches('"');
            if name.is_empty() {
                return Err(self.err_at(line, format!("physical group {tag} has no name")));
            }
            self.out.physical_names.insert((dim, tag), name.to_string());
        }
        Ok(())
    }

    /// MSH 4.1 `$Entities`: the physical tags of each point, curve, surface and volume.
    fn read_entities(&mut self) -> Res<()> {
        let mut counts = [0usize; 4];
        for (dim, c) in counts.iter_mut().enumerate() {
            *c = self.count(&format!("the number of entities of dimension {dim}"))?;
        }
        for (dim, &n) in counts.iter().enumerate() {
            for _ in 0..n {
                let tag = self.int("an entity tag")?;
                let n_coords = if dim == 0 { 3 } else { 6 };
                for _ in 0..n_coords {
                    self.double("an entity bounding box coordinate")?;
                }
                let n_physicals = self.count("the number of physical tags")?;
                let mut physicals = Vec::with_capacity(n_physicals);
                for _ in 0..n_physicals {
                    physicals.push(self.int("a physical tag")?);
                }
                if dim > 0 {
                    let n_bounding = self.count("the number of bounding entities")?;
                    for _ in 0..n_bounding {
                        self.int("a bounding entity tag")?;
                    }
                }
                self.entity_physicals.insert((dim as i32, tag), physicals);
            }
        }
        Ok(())
    }

    fn read_nodes(&mut self) -> Res<()> {
        if self.node_index.is_some() {
            return Err(self.err("a second $Nodes section"));
        }
        let line = self.line;
        match self.version {
            Version::V2 => {
                let n = self.count("the number of nodes")?;
                self.node_tags.reserve(n);
                self.out.points.reserve(n);
                for _ in 0..n {
                    let tag = self.size("a node tag")?;
                    let p = self.point()?;
                    self.node_tags.push(tag);
                    self.out.points.push(p);
                }
            }
            Version::V41 => {
                let (header, n_blocks, n) = self.block_header_v41("node")?;
                self.node_tags.reserve(n);
                self.out.points.reserve(n);
                for _ in 0..n_blocks {
                    let dim = self.int("the entity dimension")?;
                    self.int("the entity tag")?;
                    let parametric = self.int("the parametric flag")?;
                    let in_block = self.count("the number of nodes in the block")?;
                    if self.node_tags.len() + in_block > n {
                        return Err(self.err(format!(
                            "node blocks hold more than the {n} nodes announced"
                        )));
                    }
                    for _ in 0..in_block {
                        let tag = self.size("a node tag")?;
                        self.node_tags.push(tag);
                    }
                    let n_params = if parametric != 0 { dim.clamp(0, 3) } else { 0 };
                    for _ in 0..in_block {
                        let p = self.point()?;
                        self.out.points.push(p);
                        for _ in 0..n_params {
                            self.double("a parametric coordinate")?;
                        }
                    }
                }
                if self.node_tags.len() != n {
                    return Err(self.err_at(
                        header,
                        format!(
                            "the node blocks hold {} nodes but {n} were announced",
                            self.node_tags.len()
                        ),
                    ));
                }
            }
        }
        let index = NodeIndex::new(&self.node_tags).map_err(|msg| self.err_at(line, msg))?;
        self.node_index = Some(index);
        Ok(())
    }

    fn point(&mut self) -> Res<Vec3> {
        Ok(Vec3::new(
            self.double("x")?,
            self.double("y")?,
            self.double("z")?,
        ))
    }

    /// Reads `n` node tags and maps them to point indices.
    fn element_nodes(&mut self, n: usize, element: u64, nodes: &mut Vec<Label>) -> Res<()> {
        nodes.clear();
        for _ in 0..n {
            let tag = self.size("a node tag of an element")?;
            let index = self.node_index.as_ref().and_then(|ix| ix.get(tag));
            match index {
                Some(i) => nodes.push(i),
                None => {
                    return Err(self.err(format!(
                        "element {element} uses node {tag}, which is not in $Nodes"
                    )))
                }
            }
        }
        Ok(())
    }

    fn read_elements(&mut self) -> Res<()> {
        if self.node_index.is_none() {
            return Err(self.err("$Elements comes before $Nodes"));
        }
        match self.version {
            Version::V2 => self.read_elements_v2(),
            Version::V41 => self.read_elements_v41(),
        }
    }

    /// Checks that an element of type `etype` can be used: volume elements and
    /// polygons of a physical surface must be first-order; other elements are ignored.
    /// Returns the element's dimension and number of nodes.
    fn check_type(&self, etype: i32, on_physical: bool) -> Res<(u8, usize)> {
        let Some((dim, n_nodes, description)) = element_type(etype) else {
            return Err(self.err(format!("unknown element type {etype}")));
        };
        let used = dim == 3 || (dim == 2 && on_physical);
        if used && volume_shape(etype).is_none() && etype != 2 && etype != 3 {
            return Err(self.err(format!(
                "element type {etype} ({description}) is not supported: only first-order elements \
                 (tetrahedra, hexahedra, prisms, pyramids, triangles, quadrangles); mesh with \
                 Mesh.ElementOrder = 1"
            )));
        }
        Ok((dim, n_nodes))
    }

    /// Adds an element of a type `check_type` accepted: a cell, a boundary polygon per
    /// physical surface, or nothing.
    fn add_element(&mut self, etype: i32, tag: u64, nodes: &[Label], physicals: &[i32]) -> Res<()> {
        if let Some(shape) = volume_shape(etype) {
            self.out.cells.push(shape, tag, nodes);
            for &p in physicals {
                *self.out.physical_volumes.entry(p).or_default() += 1;
            }
        } else if etype == 2 || etype == 3 {
            for &p in physicals {
                let p = u32::try_from(p).map_err(|_| {
                    self.err(format!("element {tag}: physical tag {p} is negative"))
                })?;
                self.out.boundary.push(p, tag, nodes);
            }
        }
        Ok(())
    }

    fn read_elements_v2(&mut self) -> Res<()> {
        let n = self.count("the number of elements")?;
        let mut nodes = Vec::new();
        for _ in 0..n {
            let tag = self.size("an element tag")?;
            let etype = self.int("an element type")?;
            let n_tags = self.count("the number of element tags")?;
            let mut physical = 0;
            for i in 0..n_tags {
                let t = self.int("an element tag")?;
                if i == 0 {
                    physical = t;
                }
            }
            let (_, n_nodes) = self.check_type(etype, physical > 0)?;
            self.element_nodes(n_nodes, tag, &mut nodes)?;
            let physicals: &[i32] = if physical > 0 { &[physical] } else { &[] };
            self.add_element(etype, tag, &nodes, physicals)?;
        }
        Ok(())
    }

    /// The header of a version 4.1 `$Nodes` or `$Elements` section (`what`:
    /// `node` or `element`): its line, the number of blocks and the number
    /// of items; the tag range after them is read past.
    fn block_header_v41(&mut self, what: &str) -> Res<(usize, usize, usize)> {
        self.skip_space();
        let header = self.line;
        let n_blocks = self.count(&format!("the number of {what} blocks"))?;
        let n = self.count(&format!("the number of {what}s"))?;
        self.size(&format!("the minimum {what} tag"))?;
        self.size(&format!("the maximum {what} tag"))?;
        Ok((header, n_blocks, n))
    }

    fn read_elements_v41(&mut self) -> Res<()> {
        let (header, n_blocks, n) = self.block_header_v41("element")?;
        let mut nodes = Vec::new();
        let mut total = 0usize;
        for _ in 0..n_blocks {
            let dim = self.int("the entity dimension")?;
            let entity = self.int("the entity tag")?;
            let etype = self.int("an element type")?;
            let in_block = self.count("the number of elements in the block")?;
            total += in_block;
            if total > n {
                return Err(self.err(format!(
                    "element blocks hold more than the {n} elements announced"
                )));
            }
            let physicals = self
                .entity_physicals
                .get(&(dim, entity))
                .cloned()
                .unwrap_or_default();
            if element_type(etype).is_none()
                && dim < 3
                && physicals.is_empty()
                && matches!(self.encoding, Encoding::Ascii)
            {
                // One element a line: an unknown type we don't need can be skipped.
                self.rest_of_line();
                for _ in 0..in_block {
                    self.rest_of_line();
                }
                continue;
            }
            let (type_dim, n_nodes) = self.check_type(etype, !physicals.is_empty())?;
            if type_dim as i32 != dim {
                return Err(self.err(format!(
                    "element type {etype} has dimension {type_dim} but its block is of dimension {dim}"
                )));
            }
            for _ in 0..in_block {
                let tag = self.size("an element tag")?;
                self.element_nodes(n_nodes, tag, &mut nodes)?;
                self.add_element(etype, tag, &nodes, &physicals)?;
            }
        }
        if total != n {
            return Err(self.err_at(
                header,
                format!("the element blocks hold {total} elements but {n} were announced"),
            ));
        }
        Ok(())
    }
}

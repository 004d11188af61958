//! The module graph of the library (`src/lib.rs` and the modules it
//! declares) has no cycles: between the top-level modules (the pipeline
//! mesh → fvm → sparse → solve → gpu → flow → case → io → cli) and between
//! the files of `src/solve/`. Benchmarks and studies are no part of the
//! library: they are modules of the binary (`src/main.rs`, `src/bench/`).
//!
//! The test reads the sources, not the compiler: every `use` statement and
//! every inline `crate::…`/`super::…` path (test modules included) is resolved
//! to the file that defines the item. A name re-exported by a `mod.rs`
//! (`pub use error::SolveError`) resolves to the file it comes from, so a
//! module's facade of re-exports is not itself a dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file and the module path it defines (`src/solve/amg/cycle.rs` →
/// `["solve", "amg", "cycle"]`).
struct SourceFile {
    module: Vec<String>,
    /// A `mod.rs` or `lib.rs`: its `#[path]`s are relative to its own
    /// module's directory, another file's to its parent's.
    owns_directory: bool,
    /// Without comments and string contents.
    text: String,
    raw: String,
}

/// The library's source files: `src/lib.rs` and the files of the modules it
/// declares (the binary's own modules, declared by `src/main.rs`, are not
/// the library's).
fn library_files() -> Vec<SourceFile> {
    let declared = declared_modules(&src_dir().join("lib.rs"));
    let mut files = Vec::new();
    source_files(&src_dir(), &mut files);
    files.retain(|f| f.module.is_empty() || f.module.first().is_some_and(|m| declared.contains(m)));
    files
}

/// The modules a crate root declares (`mod name;`, `pub mod name;`).
fn declared_modules(root: &Path) -> BTreeSet<String> {
    let text = strip_comments(&std::fs::read_to_string(root).unwrap());
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            line.strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))
                .and_then(|rest| rest.strip_suffix(';'))
                .map(str::to_string)
        })
        .collect()
}

fn source_files(dir: &Path, out: &mut Vec<SourceFile>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src_dir()).unwrap();
            let mut module: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let owns_directory = module.last().is_some_and(|m| m == "mod" || m == "lib");
            if owns_directory {
                module.pop();
            }
            if module == ["main"] {
                continue; // the binary's root, not the library's
            }
            let raw = std::fs::read_to_string(&path).unwrap();
            out.push(SourceFile {
                module,
                owns_directory,
                text: strip_comments(&raw),
                raw,
            });
        }
    }
}

/// A file declared elsewhere with `#[path = "…"] pub mod name;` (an
/// algorithm's device half, kept in its folder under `solve/` but compiled
/// as part of `gpu`) is the module it is declared as.
fn relocate_path_modules(sources: &mut [SourceFile]) {
    let mut moves = Vec::new();
    for file in sources.iter() {
        let mut lines = file.raw.lines().map(str::trim);
        while let Some(line) = lines.next() {
            let Some(path) = line
                .strip_prefix("#[path = \"")
                .and_then(|rest| rest.strip_suffix("\"]"))
            else {
                continue;
            };
            let name = lines.next().and_then(|next| {
                next.trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
            });
            // Relative to the declaring file's directory (a mod.rs's own,
            // a cpu.rs's its parent module's).
            let mut target = file.module.clone();
            if !file.owns_directory {
                target.pop();
            }
            for part in path.trim_end_matches(".rs").split('/') {
                match part {
                    ".." => {
                        target.pop();
                    }
                    part => target.push(part.to_string()),
                }
            }
            let mut declared = file.module.clone();
            declared.push(name.expect("#[path] precedes a mod").to_string());
            moves.push((target, declared));
        }
    }
    for (from, to) in moves {
        let file = sources.iter_mut().find(|f| f.module == from);
        file.unwrap_or_else(|| panic!("#[path] names {from:?}, not a file"))
            .module = to;
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Drops `//` comments and the contents of string literals, which may mention
/// paths (docs, messages) that are no dependency.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_string && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && !(prev == '\'' && chars.get(i + 1) == Some(&'\'')) {
                in_string = !in_string;
                kept.push(c);
            } else if !in_string {
                kept.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// One path the file names: where it was written (the module path of the
/// enclosing inline `mod`), its segments, whether it is a `pub use`
/// re-export, and whether it is test code (a `#[cfg(test)]` module).
struct PathUse {
    scope: Vec<String>,
    segments: Vec<String>,
    reexport: bool,
    test: bool,
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand_use_tree(tree: &str) -> Vec<String> {
    // `x as y` names x; the alias is dropped before the whitespace goes.
    let mut words: Vec<&str> = tree.split_whitespace().collect();
    while let Some(at) = words.iter().position(|w| *w == "as") {
        let alias = words[at + 1];
        let keep = alias.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_');
        words.splice(at..at + 2, [keep]);
    }
    let tree: String = words.concat();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.len() - 1];
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use_tree(p)
                .into_iter()
                .map(move |s| format!("{prefix}{s}"))
        })
        .collect()
}

/// The paths a file names, each with the inline module it is written in.
fn paths_in(file: &SourceFile) -> Vec<PathUse> {
    let mut uses = Vec::new();
    // Inline modules (`mod tests {`) open a scope: `super` inside them is the file's module.
    let mut scopes: Vec<(String, i32, bool)> = Vec::new();
    let mut depth = 0i32;
    let mut pending_use: Option<(String, bool, Vec<String>)> = None;
    let mut cfg_test = false;
    let file_is_test = file
        .module
        .last()
        .is_some_and(|m| m == "tests" || m == "testing");
    for line in file.text.lines() {
        let trimmed = line.trim_start();
        let test = file_is_test || scopes.iter().any(|s| s.2);
        let scope: Vec<String> = file
            .module
            .iter()
            .cloned()
            .chain(scopes.iter().map(|(name, _, _)| name.clone()))
            .collect();
        if let Some(rest) = trimmed
            .strip_prefix("mod ")
            .or_else(|| trimmed.strip_prefix("pub mod "))
            .or_else(|| trimmed.strip_prefix("pub(crate) mod "))
        {
            if let Some(name) = rest.strip_suffix('{').map(str::trim) {
                scopes.push((name.to_string(), depth, cfg_test));
            }
        }
        if !trimmed.is_empty() {
            cfg_test = trimmed.starts_with("#[cfg(test)]");
        }
        if let Some((text, _, _)) = &mut pending_use {
            text.push_str(trimmed);
        } else {
            let reexport =
                trimmed.starts_with("pub use ") || trimmed.starts_with("pub(crate) use ");
            if let Some(at) = trimmed.find("use ").filter(|&at| {
                ["", "pub", "pub(crate)", "pub(super)"].contains(&trimmed[..at].trim())
            }) {
                pending_use = Some((trimmed[at + 4..].to_string(), reexport, scope.clone()));
            }
        }
        if let Some((text, reexport, use_scope)) = pending_use.take() {
            if let Some(end) = text.find(';') {
                for path in expand_use_tree(&text[..end]) {
                    uses.push(PathUse {
                        scope: use_scope.clone(),
                        segments: path.split("::").map(str::to_string).collect(),
                        reexport,
                        test,
                    });
                }
            } else {
                pending_use = Some((text, reexport, use_scope));
            }
        } else {
            // Inline paths in code: `crate::a::b(…)`, `super::c::D`.
            for (at, _) in line
                .match_indices("crate::")
                .chain(line.match_indices("super::"))
            {
                let before = line[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let path: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                uses.push(PathUse {
                    scope: scope.clone(),
                    segments: path
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect(),
                    reexport: false,
                    test,
                });
            }
        }
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if scopes.last().is_some_and(|(_, d, _)| *d == depth) {
                        scopes.pop();
                    }
                }
                _ => {}
            }
        }
    }
    uses
}

/// The module graph of the crate: which file each path resolves to.
struct Crate {
    /// Module path of every file.
    files: BTreeSet<Vec<String>>,
    /// `pub use` re-exports: (module, name) → the absolute path it stands for.
    reexports: BTreeMap<(Vec<String>, String), Vec<String>>,
    /// File → the files it depends on, test code included.
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    /// File → the files its library code (no test module) depends on.
    library_edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn absolute(scope: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = scope.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some("self") => rest = &rest[1..],
        _ => return None, // external crates, std, or a relative name
    }
    Some(base.into_iter().chain(rest.iter().cloned()).collect())
}

impl Crate {
    fn read() -> Self {
        let mut sources = library_files();
        relocate_path_modules(&mut sources);
        let files: BTreeSet<Vec<String>> = sources.iter().map(|f| f.module.clone()).collect();
        let mut reexports = BTreeMap::new();
        let mut parsed = Vec::new();
        for file in &sources {
            let uses = paths_in(file);
            for u in uses.iter().filter(|u| u.reexport) {
                // `pub use cpu::X` in a mod.rs is relative to the module itself.
                let path = absolute(&u.scope, &u.segments)
                    .unwrap_or_else(|| u.scope.iter().chain(u.segments.iter()).cloned().collect());
                if let Some(name) = path.last() {
                    reexports.insert((u.scope.clone(), name.clone()), path);
                }
            }
            parsed.push((file.module.clone(), uses));
        }
        let mut krate = Crate {
            files,
            reexports,
            edges: BTreeMap::new(),
            library_edges: BTreeMap::new(),
        };
        for (module, uses) in parsed {
            let mut all = BTreeSet::new();
            let mut library = BTreeSet::new();
            for u in uses.iter().filter(|u| !u.reexport) {
                if let Some(path) = absolute(&u.scope, &u.segments) {
                    if let Some(file) = krate.resolve(&path, 0) {
                        if file != module {
                            if !u.test {
                                library.insert(file.clone());
                            }
                            all.insert(file);
                        }
                    }
                }
            }
            krate.edges.insert(module.clone(), all);
            krate.library_edges.insert(module, library);
        }
        krate
    }

    /// The file that defines the item `path` names, following re-exports.
    fn resolve(&self, path: &[String], hops: usize) -> Option<Vec<String>> {
        let file_len = (0..=path.len())
            .rev()
            .find(|&k| self.files.contains(&path[..k]))?;
        let file = path[..file_len].to_vec();
        if hops < 8 {
            if let Some(name) = path.get(file_len) {
                if let Some(target) = self.reexports.get(&(file.clone(), name.clone())) {
                    if target.as_slice() != path {
                        return self.resolve(target, hops + 1);
                    }
                }
            }
        }
        Some(file)
    }

    /// The graph (`edges` or `library_edges`) collapsed onto the first
    /// `depth` segments of the module paths below `prefix`; files outside
    /// `prefix` are dropped.
    fn collapsed(
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        prefix: &[&str],
        depth: usize,
    ) -> BTreeMap<String, BTreeSet<String>> {
        let key = |m: &Vec<String>| -> Option<String> {
            if m.len() < prefix.len() || m.iter().zip(prefix).any(|(a, b)| a != b) {
                return None;
            }
            let rest = &m[prefix.len()..];
            Some(if rest.is_empty() {
                "mod".to_string()
            } else {
                rest[..depth.min(rest.len())].join("/")
            })
        };
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, tos) in edges {
            let Some(from) = key(from) else { continue };
            let entry = graph.entry(from.clone()).or_default();
            for to in tos.iter().filter_map(key) {
                if to != from {
                    entry.insert(to);
                }
            }
        }
        graph
    }
}

/// Strongly connected components with more than one member (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}

/// The edges of `graph` inside one cycle, for the failure message.
fn describe(graph: &BTreeMap<String, BTreeSet<String>>, cycle: &[String]) -> String {
    let members: BTreeSet<&String> = cycle.iter().collect();
    let mut lines = Vec::new();
    for from in cycle {
        let tos: Vec<&str> = graph[from]
            .iter()
            .filter(|t| members.contains(t))
            .map(String::as_str)
            .collect();
        lines.push(format!("    {from} -> {}", tos.join(", ")));
    }
    lines.join("\n")
}

/// The pipeline's order: a module uses those before it, never those after
/// (test code included).
const PIPELINE: [&str; 16] = [
    "test_support",
    "limits",
    "slices",
    "timings",
    "foam",
    "mesh",
    "sparse",
    "fvm",
    "io",
    "parallel",
    "solve",
    "gpu",
    "validate",
    "flow",
    "case",
    "cli",
];

/// Uses against the pipeline's order that the code still has, each with
/// what it uses. Remove an entry when its use goes (the test fails while a
/// listed use no longer exists); never add one.
const KNOWN_BACKWARD: [(&str, &str, &str); 4] = [
    ("foam", "io", "foam::write writes through io::write_atomic"),
    ("foam", "mesh", "foam::write reports mesh::MeshError"),
    ("timings", "gpu", "timings::enter_synced synchronises a Gpu"),
    ("gpu", "flow", "gpu::simple runs flow::Simple's steps"),
];

fn top_level_graph() -> BTreeMap<String, BTreeSet<String>> {
    Crate::collapsed(&Crate::read().edges, &[], 1)
}

fn print_graph(graph: &BTreeMap<String, BTreeSet<String>>) {
    for (from, tos) in graph {
        println!(
            "{from} -> {}",
            tos.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}

#[test]
fn top_level_modules_form_no_cycle() {
    let mut graph = top_level_graph();
    print_graph(&graph);
    let found = cycles(&graph);
    for c in &found {
        println!(
            "top-level cycle {}:\n{}",
            c.join(" ~ "),
            describe(&graph, c)
        );
    }
    // The known backward uses are the only ones that close a cycle.
    for (from, to, _) in KNOWN_BACKWARD {
        graph.get_mut(from).unwrap().remove(to);
    }
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|c| format!("cycle {}:\n{}", c.join(" ~ "), describe(&graph, c)))
        .collect();
    assert!(
        found.is_empty(),
        "top-level modules form cycles:\n{}",
        report.join("\n")
    );
}

#[test]
fn pipeline_modules_use_only_earlier_ones() {
    let graph = top_level_graph();
    let rank = |m: &str| PIPELINE.iter().position(|p| *p == m);
    let mut unranked = Vec::new();
    let mut backwards = Vec::new();
    for (from, tos) in &graph {
        if rank(from).is_none() && from != "mod" {
            unranked.push(from.clone());
        }
        for to in tos {
            if let (Some(f), Some(t)) = (rank(from), rank(to)) {
                let known = KNOWN_BACKWARD.iter().any(|(a, b, _)| a == from && b == to);
                if t > f && !known {
                    backwards.push(format!("{from} -> {to}"));
                }
            }
        }
    }
    assert!(
        unranked.is_empty(),
        "place the modules {unranked:?} in PIPELINE"
    );
    assert!(
        backwards.is_empty(),
        "modules use later stages of the pipeline {PIPELINE:?}: {backwards:?}"
    );
    let gone: Vec<_> = KNOWN_BACKWARD
        .iter()
        .filter(|(from, to, _)| !graph[*from].contains(*to))
        .collect();
    assert!(
        gone.is_empty(),
        "remove from KNOWN_BACKWARD what no longer exists: {gone:?}"
    );
}

/// The files of `src/solve/` form no cycle in their library code: the
/// leaves (errors, scalars, triangles, checks, row sums) below the
/// algorithms, the dispatch (`precond`, `entry`, `registry`) above them.
#[test]
fn files_of_solve_form_no_cycle() {
    let krate = Crate::read();
    let graph = Crate::collapsed(&krate.library_edges, &["solve"], 2);
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|c| {
            format!(
                "cycle of {} files: {}\n{}",
                c.len(),
                c.join(" ~ "),
                describe(&graph, c)
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "files of src/solve/ form cycles (move what both sides use into a leaf module):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_reader_sees_known_dependencies() {
    // Guards the parser itself: a reader that found nothing would pass the
    // tests above vacuously.
    let krate = Crate::read();
    let top = Crate::collapsed(&krate.edges, &[], 1);
    assert!(top["solve"].contains("sparse"), "{:?}", top["solve"]);
    assert!(top["gpu"].contains("solve"), "{:?}", top["gpu"]);
    let solve = Crate::collapsed(&krate.library_edges, &["solve"], 2);
    // `use super::{CgBackend, …}` resolves through `pub use pcg::…` to pcg.rs.
    assert!(solve["gamg"].contains("pcg"), "{:?}", solve["gamg"]);
    assert!(solve["gamg"].contains("amg"), "{:?}", solve["gamg"]);
    // SSOR's and the truncated Neumann series' device halves live in
    // solve/ssor/ and solve/neumann/ but are gpu::ssor and gpu::neumann.
    assert!(top["gpu"].contains("solve"), "{:?}", top["gpu"]);
    assert!(!top["solve"].contains("gpu"), "{:?}", top["solve"]);
    for algorithm in ["ssor", "neumann"] {
        assert!(
            krate
                .files
                .contains(["gpu".to_string(), algorithm.to_string()].as_slice()),
            "{algorithm}"
        );
    }
    // Test modules count at the top level only.
    let with_tests = Crate::collapsed(&krate.edges, &["solve"], 2);
    assert!(
        with_tests["lanczos"].contains("cpu"),
        "{:?}",
        with_tests["lanczos"]
    );
    assert!(!solve["lanczos"].contains("cpu"), "{:?}", solve["lanczos"]);
    let mut graph = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(a.to_string())
            .or_insert_with(BTreeSet::new)
            .insert(b.to_string());
    }
    assert_eq!(
        cycles(&graph),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

/// Whether a module or file name is that of a benchmark or a study.
fn names_a_measurement(name: &str) -> bool {
    name.contains("bench") || name.contains("study")
}

/// The library holds the product; the measurements of `fvpoisson bench` and
/// the `preconditioners` study are modules of the binary (`src/bench/`): no
/// library file and no module the library declares (inline ones included)
/// is a benchmark or a study.
#[test]
fn benchmarks_and_studies_live_outside_the_library() {
    let files = library_files();
    let mut found: Vec<String> = files
        .iter()
        .filter(|f| f.module.iter().any(|m| names_a_measurement(m)))
        .map(|f| f.module.join("::"))
        .collect();
    for file in &files {
        for line in file.text.lines() {
            let declared = line
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .map(|rest| rest.trim_end_matches([';', '{', ' ']));
            if let Some(name) = declared.filter(|name| names_a_measurement(name)) {
                found.push(format!("{}::{name}", file.module.join("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "benchmark or study modules in the library (move them to the binary's src/bench/): \
         {found:?}"
    );
    // Guards the reader: the library's files are found, the binary's are not.
    assert!(files.len() > 100, "{} library files", files.len());
    assert!(files.iter().any(|f| f.module == ["gpu", "pcg"]));
    assert!(!files
        .iter()
        .any(|f| f.module.first().is_some_and(|m| m == "bench")));
    let binary = declared_modules(&src_dir().join("main.rs"));
    assert!(binary.contains("bench"), "{binary:?}");
    assert!(src_dir().join("bench/tables.rs").is_file());
}

//! Import cycles among a crate's modules: each top-level module of `src/` (a file, or a folder
//! with its submodules) is a node, each `use crate::<module>` outside tests an edge, and so is
//! each path `crate::<module>::...` written inline in code (not in comments).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The modules each top-level module of `src` imports from, by name.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    crate::tidy::rust_files(src, &mut files);
    for f in files {
        let Ok(rel) = f.strip_prefix(src) else { continue };
        let Some(first) = rel.components().next() else { continue };
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let deps = graph.entry(module.clone()).or_default();
        for (at, _) in code.match_indices("use crate::") {
            // Only a `use` item: what precedes it on its line is indentation or `pub(crate)`.
            let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
            let before = code[line_start..at].trim();
            if !(before.is_empty() || before == "pub(crate)") {
                continue;
            }
            let rest = &code[at + "use crate::".len()..];
            let path = rest.split(';').next().unwrap_or_default();
            let names: Vec<String> = match path.strip_prefix('{') {
                // The first segment of each top-level item of the group.
                Some(group) => {
                    let mut depth = 0;
                    let mut items = vec![String::new()];
                    for c in group.chars() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => break,
                            '}' => depth -= 1,
                            ',' if depth == 0 => items.push(String::new()),
                            _ if depth == 0 => items.last_mut().into_iter().for_each(|i| i.push(c)),
                            _ => {}
                        }
                    }
                    items
                }
                None => vec![path.to_owned()],
            };
            for name in names {
                let name = name.trim().split("::").next().unwrap_or_default().trim().to_owned();
                if name != module {
                    deps.insert(name);
                }
            }
        }
    }
    inline_paths(src, &mut graph);
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// Adds an edge for every path `crate::<module>::` written inline in code outside tests and
/// comments: a call such as `crate::turns::begin(..)` depends on its module as a `use` does.
fn inline_paths(src: &Path, graph: &mut BTreeMap<String, BTreeSet<String>>) {
    let mut files = Vec::new();
    crate::tidy::rust_files(src, &mut files);
    for f in files {
        let Ok(rel) = f.strip_prefix(src) else { continue };
        let Some(first) = rel.components().next() else { continue };
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let deps = graph.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let preceded = line[..at].chars().next_back();
                if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = &line[at + "crate::".len()..];
                let name: String =
                    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && rest[name.len()..].starts_with("::") && name != module {
                    deps.insert(name);
                }
            }
        }
    }
}

/// The import cycles among the modules of `src`, each as its modules' names, sorted.
pub(crate) fn find(src: &Path) -> Vec<Vec<String>> {
    let graph = imports(src);
    let mut cycles = Vec::new();
    let mut seen = BTreeSet::new();
    for start in graph.keys() {
        if seen.contains(start) {
            continue;
        }
        // The modules reachable from `start` that also reach it back form its cycle.
        let from = reach(&graph, start);
        let mut cycle: Vec<String> = from
            .iter()
            .filter(|m| *m == start || reach(&graph, m).contains(start))
            .cloned()
            .collect();
        cycle.sort();
        seen.extend(cycle.iter().cloned());
        if cycle.len() > 1 || graph[start].contains(start) {
            cycles.push(cycle);
        }
    }
    cycles
}

fn reach(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::from([start.to_owned()]);
    let mut todo = vec![start.to_owned()];
    while let Some(m) = todo.pop() {
        for d in graph.get(&m).into_iter().flatten() {
            if out.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn crate_with(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let src =
            std::env::temp_dir().join(format!("botmesh-cycles-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&src);
        for (file, text) in files {
            let path = src.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        src
    }

    #[test]
    fn modules_importing_each_other_through_a_folder_and_a_group_are_a_cycle() {
        let src = crate_with(
            "cycle",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
                ("a.rs", "//! A.\nuse crate::{b::B, c};\n"),
                ("b/mod.rs", "//! B.\nmod inner;\n"),
                ("b/inner.rs", "//! Inner.\n    pub(crate) use crate::a::A;\n"),
                ("c.rs", "//! C, imported by a, importing nobody but in a doc: use crate::a;\n"),
            ],
        );
        assert_eq!(find(&src), vec![vec!["a".to_owned(), "b".to_owned()]]);
    }

    #[test]
    fn a_path_written_inline_is_an_edge_but_one_in_a_comment_is_not() {
        let src = crate_with(
            "inline",
            &[
                ("runtime.rs", "//! R.\nfn f() { crate::turns::begin(); }\n"),
                ("turns.rs", "//! T.\nuse crate::runtime::State;\n"),
                ("lead.rs", "//! L.\n/// See [`x`](crate::turns::begin).\nfn g() {}\n"),
                (
                    "config.rs",
                    "//! C.\nuse crate::lead;\nfn h() { botmesh_core::crate_like::x(); }\n",
                ),
            ],
        );
        assert_eq!(find(&src), vec![vec!["runtime".to_owned(), "turns".to_owned()]]);
    }

    #[test]
    fn imports_in_tests_and_one_way_imports_are_no_cycle() {
        let src = crate_with(
            "none",
            &[
                ("a.rs", "//! A.\nuse crate::b;\n"),
                ("b.rs", "//! B.\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n"),
            ],
        );
        assert!(find(&src).is_empty());
    }
}

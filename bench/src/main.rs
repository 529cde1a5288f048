//! Benchmark suites, run by `cargo xtask bench SUITE` in release mode.
//!
//! Each suite prints its figures as `name: value unit` and writes them to the JSON file named
//! on the command line as one flat object `{"name": number}`.

mod allocs;
mod common;
mod coord_suite;
mod core_suite;
mod metered;
mod precise;
mod redis_suite;
mod replicated;
mod stores_suite;
mod waits;

use std::path::PathBuf;

/// The system allocator, counting per thread (see `allocs.rs`).
#[global_allocator]
static GLOBAL: alloc_tracker::Allocator<std::alloc::System> = alloc_tracker::Allocator::system();

type Figures = Vec<(&'static str, f64, &'static str)>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let suite = args.next().ok_or("usage: botmesh-bench SUITE OUT.json")?;
    let out = PathBuf::from(args.next().ok_or("usage: botmesh-bench SUITE OUT.json")?);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let figures: Figures = match suite.as_str() {
        "core" => rt.block_on(core_suite::run())?,
        "coord" => rt.block_on(coord_suite::run())?,
        "redis" => rt.block_on(redis_suite::run())?,
        "stores" => rt.block_on(stores_suite::run())?,
        "waits" => rt.block_on(waits::run())?,
        "load" => rt.block_on(redis_suite::load())?,
        "replicated" => rt.block_on(replicated::run())?,
        other => {
            return Err(format!(
                "unknown suite {other:?}; suites: core, coord, redis, stores, waits, load, \
                 replicated"
            )
            .into());
        }
    };
    let mut json = serde_json::Map::new();
    for (name, value, unit) in &figures {
        // Small figures (ratios, commands per message) keep two decimals.
        let value =
            if value.abs() < 100.0 { (value * 100.0).round() / 100.0 } else { value.round() };
        println!("{name}: {value} {unit}");
        json.insert((*name).to_owned(), serde_json::json!(value));
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&json)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

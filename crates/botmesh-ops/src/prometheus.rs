//! The Prometheus exporter: `metrics-exporter-prometheus`'s recorder, rendered on scrape.

use std::time::Duration;

use botmesh_core::telemetry;
use metrics_exporter_prometheus::{BuildError, Matcher};

pub use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The histogram buckets of every `_seconds` metric: from a Redis round trip on loopback to a
/// turn waited for behind a slow conversation step.
const BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Why the exporter could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrometheusError {
    /// The recorder could not be built or installed (another recorder is installed already).
    #[error("installing the Prometheus recorder")]
    Install(#[source] BuildError),
    /// The upkeep thread could not be started.
    #[error("starting the Prometheus upkeep thread")]
    Upkeep(#[source] std::io::Error),
}

/// Installs the Prometheus recorder as the process's `metrics` recorder, with histogram
/// buckets for botmesh's `_seconds` metrics and botmesh's metric descriptions, and returns the
/// handle to give [`Ops::metrics`](crate::Ops::metrics). Call it once, before building the
/// bot. With a recorder of your own, give its handle instead and call
/// [`telemetry::describe`].
///
/// It also starts the exporter's upkeep, a thread that drains the histograms' samples into their
/// buckets every five seconds, so memory stays flat between scrapes.
pub fn install_prometheus() -> Result<PrometheusHandle, PrometheusError> {
    let handle = prometheus_builder()?.install_recorder().map_err(PrometheusError::Install)?;
    telemetry::describe();
    keep_up(handle.clone()).map_err(PrometheusError::Upkeep)?;
    Ok(handle)
}

/// How often the upkeep thread drains the histograms.
const UPKEEP: Duration = Duration::from_secs(5);

/// Runs `handle`'s upkeep every [`UPKEEP`] on a thread of its own, for the life of the process
/// (the recorder it keeps lives as long).
pub fn keep_up(handle: PrometheusHandle) -> std::io::Result<()> {
    std::thread::Builder::new().name("botmesh-prometheus-upkeep".to_owned()).spawn(move || {
        loop {
            std::thread::park_timeout(UPKEEP);
            handle.run_upkeep();
        }
    })?;
    Ok(())
}

/// The exporter's builder as [`install_prometheus`] sets it up (histogram buckets for the
/// `_seconds` metrics), for a recorder you install yourself: with global labels, or inside a
/// recorder of your own (a fan-out, a layer); start [`keep_up`] for it.
pub fn prometheus_builder() -> Result<PrometheusBuilder, PrometheusError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &BUCKETS)
        .map_err(PrometheusError::Install)
}

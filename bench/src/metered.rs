//! The metrics overhead: the process's `metrics` recorder is a switch in front of the
//! Prometheus exporter (set up as `botmesh_ops::install_prometheus` sets it up). Switched off,
//! every metric a bot registers is a no-op handle, as without any recorder; switched on, the
//! exporter records it. A bot takes its handles when it is built, so each run builds its bots
//! after setting the switch, and the runs alternate off and on to cancel the machine's drift.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use botmesh_ops::{PrometheusHandle, keep_up, prometheus_builder};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusRecorder;

struct Switch {
    on: AtomicBool,
    exporter: PrometheusRecorder,
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.exporter.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.exporter.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.exporter.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        match self.on.load(Ordering::Relaxed) {
            true => self.exporter.register_counter(key, metadata),
            false => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        match self.on.load(Ordering::Relaxed) {
            true => self.exporter.register_gauge(key, metadata),
            false => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match self.on.load(Ordering::Relaxed) {
            true => self.exporter.register_histogram(key, metadata),
            false => Histogram::noop(),
        }
    }
}

static SWITCH: OnceLock<(&'static Switch, PrometheusHandle)> = OnceLock::new();

/// Installs the switch once, and sets it: `true` records into the exporter.
pub(crate) fn exporter(on: bool) -> Result<(), Box<dyn std::error::Error>> {
    if SWITCH.get().is_none() {
        let exporter = prometheus_builder()?.build_recorder();
        let handle = exporter.handle();
        // As `install_prometheus` does: histogram samples drained every five seconds.
        keep_up(handle.clone())?;
        let switch: &'static Switch =
            Box::leak(Box::new(Switch { on: AtomicBool::new(false), exporter }));
        metrics::set_global_recorder(switch).map_err(|e| e.to_string())?;
        botmesh_core::telemetry::describe();
        let _ = SWITCH.set((switch, handle));
    }
    if let Some((switch, _)) = SWITCH.get() {
        switch.on.store(on, Ordering::Relaxed);
    }
    Ok(())
}

/// Renders what the exporter holds, as a scrape would; its length, to check it recorded.
pub(crate) fn scrape() -> usize {
    SWITCH.get().map_or(0, |(_, handle)| {
        handle.run_upkeep();
        handle.render().len()
    })
}

/// The median of a few runs.
pub(crate) fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs.get(runs.len() / 2).copied().unwrap_or(0.0)
}

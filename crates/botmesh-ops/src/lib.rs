//! Operate botmesh replicas: what an operator needs to see, as `axum` routes.
//!
//! [`Ops`] builds a [`Router`] for one running [`Bot`]:
//!
//! | route | what | when |
//! | --- | --- | --- |
//! | `GET /livez` | liveness: `200` while the process and its heartbeat loop run, else `503` | always |
//! | `GET /readyz` | readiness: `200` when the replica can take traffic (see [`Bot::health`]), else `503` | always |
//! | `GET /metrics` | the metrics in the Prometheus text format | with `Ops::metrics` (feature `prometheus`) |
//! | `GET /status` | a live HTML page of this replica and the whole cluster | with [`Ops::status_page`] |
//! | `GET /status.json` | the same data as JSON ([`Snapshot`]) | with [`Ops::status_page`] |
//!
//! Both probes answer with the [`Health`](botmesh_core::status::Health) as JSON, reasons
//! included. The status page is off by default, read-only, and shows no message content and
//! no secret: chats appear by key, errors by label. Put it behind a token with
//! [`Ops::token`]: requests then need `Authorization: Bearer <token>`, or HTTP Basic auth with
//! the token as password (what a browser asks for, and sends again on each refresh).
//!
//! # Kubernetes
//!
//! ```yaml
//! livenessProbe:  { httpGet: { path: /livez,  port: 9090 }, periodSeconds: 10, failureThreshold: 3 }
//! readinessProbe: { httpGet: { path: /readyz, port: 9090 }, periodSeconds: 5 }
//! ```
//!
//! A standby replica of an exclusive transport is ready: it takes the transport over when the
//! leader goes. Liveness never depends on the coordination backend answering, so a Redis
//! outage does not restart every replica. Stop replicas with SIGTERM:
//! [`Bot::run_until`]`(`[`shutdown_signal()`](botmesh_core::shutdown_signal)`)` drains and
//! hands over before the process ends.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo(bot: botmesh_core::Bot) -> Result<(), Box<dyn std::error::Error>> {
//! use botmesh_ops::Ops;
//!
//! let ops = Ops::new(bot.clone()).status_page().token("change-me");
//! tokio::spawn(ops.serve("0.0.0.0:9090"));
//! bot.run_until(botmesh_core::shutdown_signal()).await?;
//! # Ok(()) }
//! ```
//!
//! # Feature flags
//!
//! - `prometheus`: `install_prometheus` and the `/metrics` route, with
//!   `metrics-exporter-prometheus`.
//! - `opentelemetry`: `otel::W3cPropagation`, with `opentelemetry` and `tracing-opentelemetry`:
//!   a message taken over from a replica that died gets a span linked to the one it had where
//!   it arrived (see the `otel` module).
//! - `serde`: `OpsSettings`, the routes' settings as a configuration file holds them, with
//!   durations as text (`refresh = "5s"`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod auth;
#[cfg(feature = "serde")]
mod config;
// Its examples use both features.
#[cfg(all(feature = "prometheus", feature = "opentelemetry"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "prometheus", feature = "opentelemetry"))))]
pub mod guide {
    #![doc = include_str!("../guide.md")]
}
#[cfg(feature = "opentelemetry")]
pub mod otel;
mod page;
#[cfg(feature = "prometheus")]
mod prometheus;
mod routes;
mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use botmesh_core::Bot;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use self::config::OpsSettings;
#[cfg(feature = "opentelemetry")]
pub use self::otel::W3cPropagation;
#[cfg(feature = "prometheus")]
pub use self::prometheus::{
    PrometheusBuilder, PrometheusError, PrometheusHandle, install_prometheus, keep_up,
    prometheus_builder,
};
pub use self::snapshot::Snapshot;

/// The operations routes of one bot; see the [crate documentation](crate).
#[derive(Clone)]
#[must_use = "routes do nothing until served: see `Ops::router` and `Ops::serve`"]
pub struct Ops {
    pub(crate) bot: Bot,
    pub(crate) status_page: bool,
    pub(crate) token: Option<Arc<str>>,
    pub(crate) refresh: Duration,
    #[cfg(feature = "prometheus")]
    pub(crate) metrics: Option<PrometheusHandle>,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: only whether there is one.
        f.debug_struct("Ops")
            .field("status_page", &self.status_page)
            .field("token", &self.token.is_some())
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

impl Ops {
    /// The probes of `bot`; the status page off, no metrics route.
    pub fn new(bot: Bot) -> Self {
        Self {
            bot,
            status_page: false,
            token: None,
            refresh: Duration::from_secs(2),
            #[cfg(feature = "prometheus")]
            metrics: None,
        }
    }

    /// Serves the status page (`/status`, `/status.json`).
    pub fn status_page(mut self) -> Self {
        self.status_page = true;
        self
    }

    /// Requires `token` for the status page and the metrics (the probes stay open, as
    /// Kubernetes calls them without credentials). Compared in constant time; never logged.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Arc::from(token.into()));
        self
    }

    /// How often the status page reloads itself in a browser, in whole seconds (what HTML's
    /// `refresh` takes), at least one. Default: 2 s.
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = Duration::from_secs(every.as_secs_f64().ceil().max(1.0) as u64);
        self
    }

    /// Serves the recorder of `handle` at `/metrics` (see [`install_prometheus`]).
    #[cfg(feature = "prometheus")]
    pub fn metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// The routes, to merge into your own router or to serve.
    pub fn router(&self) -> Router {
        routes::router(self.clone())
    }

    /// Serves the routes on `addr` until the process ends.
    pub async fn serve(self, addr: impl tokio::net::ToSocketAddrs) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        axum::serve(listener, self.router()).await
    }
}

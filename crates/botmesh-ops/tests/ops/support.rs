//! Three replicas of one bot on the in-memory coordination hub, each with an exclusive
//! provider (`wa`) and a shared one (`web`), and its operations routes served on a free port.

#![allow(dead_code, reason = "shared by two test binaries, each using part of it")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::Capabilities;
use botmesh_core::{Bot, BotBuilder, BotError, Durability, MemoryStore};
use botmesh_ops::Ops;
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator, TestProvider};
use tokio::time::Instant;

pub(crate) struct Replica {
    pub(crate) name: &'static str,
    pub(crate) bot: Bot,
    pub(crate) wa: TestProvider,
    pub(crate) web: TestProvider,
    pub(crate) coordinator: Arc<MemoryCoordinator>,
}

/// Replicas `names` of an echo bot with durability, sharing one hub and one store.
pub(crate) async fn replicas(names: &[&'static str], lease: Duration) -> Vec<Replica> {
    replicas_with(names, lease, |_, b| b).await
}

pub(crate) async fn replicas_with(
    names: &[&'static str],
    lease: Duration,
    more: impl Fn(&'static str, BotBuilder) -> BotBuilder,
) -> Vec<Replica> {
    let hub = MemoryCoordinationHub::new();
    let store = Arc::new(MemoryStore::new());
    let mut out = Vec::new();
    for &name in names {
        let wa = TestProvider::with("wa", Capabilities::exclusive());
        let web = TestProvider::with("web", Capabilities::shared());
        let coordinator = Arc::new(MemoryCoordinator::new(hub.clone(), name).with_lease(lease));
        let coordination = CoordinationConfig::new(coordinator.clone()).build();
        let builder = Bot::builder()
            .provider(wa.clone())
            .provider(web.clone())
            .store(store.clone())
            .coordination(coordination)
            .durability(Durability::new())
            .on_message(move |ctx| async move {
                ctx.reply(format!("{name}: {}", ctx.body())).await?;
                Ok::<_, BotError>(())
            });
        let bot = more(name, builder).build().expect("the bot builds");
        bot.start().await.expect("the bot starts");
        out.push(Replica { name, bot, wa, web, coordinator });
    }
    out
}

/// The index of the one replica that runs `wa`, waiting up to `within` for there to be one.
pub(crate) async fn wa_leader(replicas: &[Replica], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let running: Vec<usize> =
            (0..replicas.len()).filter(|&i| replicas[i].bot.runs_transport("wa")).collect();
        if let [one] = running.as_slice() {
            return *one;
        }
        assert!(Instant::now() < deadline, "wa never ran on exactly one replica: {running:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Serves `ops` on a free loopback port.
pub(crate) async fn serve(ops: Ops) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("its address");
    let router = ops.router();
    tokio::spawn(async move { axum_serve(listener, router).await });
    addr
}

async fn axum_serve(listener: tokio::net::TcpListener, router: axum::Router) {
    let _ = axum::serve(listener, router).await;
}

/// `GET http://addr/path`, with a bearer token if given: the status and the body.
pub(crate) async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    // Another crate of a workspace build may turn reqwest's rustls on, without a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new().get(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the route answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

//! Three replicas in one process on a private Redis: each one's page shows the whole cluster
//! with one leader of the exclusive transport, and `/metrics` counts the messages.

use std::future::Future;
use std::time::Duration;

use botmesh_core::Inbound;
use botmesh_ops::Snapshot;
use botmesh_testing::{RedisServer, SECRET_HEADER, WEBHOOK_PATH};
use ops_demo::{Demo, Replica, Settings, WA, WEB};
use serde_json::json;

/// Retries `check` until it gives a value or `what` took too long.
async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, check: impl Fn() -> F) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn get(replica: &Replica, path: &str) -> (u16, String) {
    // Another crate of a workspace build may turn reqwest's rustls on, without a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(format!("http://{}{path}", replica.addr)).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The value of counter `name` for `provider` in a Prometheus scrape.
fn counter(scrape: &str, name: &str, provider: &str) -> Option<f64> {
    let series = format!("{name}{{provider=\"{provider}\"}} ");
    scrape.lines().find_map(|l| l.strip_prefix(&series)).map(|v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_show_one_leader_and_count_their_messages() {
    let redis = RedisServer::start().unwrap();
    let settings = Settings {
        port: 0,
        redis_url: redis.url(),
        // Unique per run, so that runs sharing a server never meet.
        prefix: format!("ops-demo-test-{}", uuid::Uuid::new_v4().simple()),
        lease: Duration::from_secs(3),
        ..Settings::default()
    };
    let metrics = botmesh_ops::install_prometheus().unwrap();
    let demo = Demo::build(&settings, metrics).await.unwrap();
    let replicas = demo.replicas().to_vec();
    assert_eq!(replicas.len(), 3);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(demo.run_until(async {
        let _ = stopped.await;
    }));

    // Replica a's page lists the three replicas alive, and one leader of the exclusive
    // transport, alive, among them.
    let snapshot = eventually("three alive replicas and a leader of wa", || async {
        let (status, body) = get(&replicas[0], "/status.json").await;
        let snapshot: Snapshot = serde_json::from_str(&body).ok()?;
        let cluster = snapshot.cluster.as_ref()?;
        let alive = cluster.replicas.iter().filter(|r| r.alive).count();
        let leaders = cluster.leaders.iter().filter(|l| l.transport == WA && l.alive).count();
        (status == 200 && alive == 3 && leaders == 1).then_some(snapshot)
    })
    .await;
    let cluster = snapshot.cluster.unwrap();
    let mut ids: Vec<_> = cluster.replicas.iter().map(|r| r.replica_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a", "b", "c"]);
    let leader = &cluster.leaders.iter().find(|l| l.transport == WA).unwrap().replica_id;
    let leader = replicas.iter().find(|r| &r.id == leader).unwrap();
    assert!(leader.bot.runs_transport(WA));
    assert_eq!(replicas.iter().filter(|r| r.bot.runs_transport(WA)).count(), 1);
    for replica in &replicas {
        let (status, body) = get(replica, "/readyz").await;
        assert_eq!(status, 200, "replica {} not ready: {body}", replica.id);
    }

    // A message on each replica's webhook, and one on the leader's exclusive transport.
    // Another crate of a workspace build may turn reqwest's rustls on, without a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    for (i, replica) in replicas.iter().enumerate() {
        let body = json!({ "id": format!("m{i}"), "chat": format!("chat-{i}"), "text": "order" });
        let response = client
            .post(format!("http://{}{WEBHOOK_PATH}", replica.addr))
            .header(SECRET_HEADER, &settings.secret)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "replica {} refused it", replica.id);
    }
    assert!(leader.wa.inject(Inbound::text(WA, "w1", "wa-chat", "hello")));
    leader.wa.wait_sent(1).await;

    // Every replica serves the process's one recorder: the counts of all three.
    let scrape = eventually("the messages handled and answered", || async {
        let (_, scrape) = get(&replicas[1], "/metrics").await;
        let handled = |provider| counter(&scrape, "botmesh_messages_handled_total", provider);
        let answered = replicas.iter().map(|r| r.web.sent().len()).sum::<usize>();
        (handled(WEB) == Some(3.0) && handled(WA) == Some(1.0) && answered == 3).then_some(scrape)
    })
    .await;
    assert_eq!(counter(&scrape, "botmesh_messages_received_total", WEB), Some(3.0));
    assert_eq!(counter(&scrape, "botmesh_messages_received_total", WA), Some(1.0));
    assert!(scrape.contains("botmesh_turn_wait_seconds_bucket"), "{scrape}");
    assert!(scrape.contains("botmesh_leader{transport=\"wa\"}"), "{scrape}");

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

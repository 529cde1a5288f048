//! The probes follow the replica's life and its leases; the status page is off by default,
//! behind its token when it has one, and never shows what users wrote.

use std::time::Duration;

use botmesh_core::Inbound;
use botmesh_ops::{Ops, Snapshot};

use crate::support::{get, replicas, serve, wa_leader};

const LEASE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_follow_the_replica_s_life_and_a_replica_whose_leases_lapse_is_not_ready() {
    let replicas = replicas(&["a", "b"], LEASE).await;
    let leader = wa_leader(&replicas, LEASE * 3).await;
    let standby = 1 - leader;
    let at_leader = serve(Ops::new(replicas[leader].bot.clone())).await;
    let at_standby = serve(Ops::new(replicas[standby].bot.clone())).await;
    for addr in [at_leader, at_standby] {
        assert_eq!(get(addr, "/livez", None).await.0, 200);
        // The leader runs wa; the standby would take it over: both ready.
        let (code, body) = get(addr, "/readyz", None).await;
        assert_eq!(code, 200, "{body}");
        // Off by default.
        assert_eq!(get(addr, "/status", None).await.0, 404);
    }

    // The standby's leases can no longer be renewed: not ready once they lapse, still live
    // (its heartbeat loop runs; a restart would not help).
    replicas[standby].coordinator.set_stalled(true);
    tokio::time::sleep(LEASE + LEASE / 2).await;
    let (code, body) = get(at_standby, "/readyz", None).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("lease"), "the reason is given: {body}");
    assert_eq!(get(at_standby, "/livez", None).await.0, 200);
    assert_eq!(get(at_leader, "/readyz", None).await.0, 200);
    // Renewed again: ready again.
    replicas[standby].coordinator.set_stalled(false);
    tokio::time::sleep(LEASE).await;
    let (code, body) = get(at_standby, "/readyz", None).await;
    assert_eq!(code, 200, "{body}");

    // A stopped replica is not ready.
    replicas[leader].bot.stop().await.unwrap();
    let (code, body) = get(at_leader, "/readyz", None).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("not running"), "{body}");
    replicas[standby].bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_needs_its_token_and_never_shows_what_users_wrote() {
    let replicas = replicas(&["a", "b"], LEASE).await;
    let leader = wa_leader(&replicas, LEASE * 3).await;
    let ops = Ops::new(replicas[0].bot.clone()).status_page().token("t0ken");
    let addr = serve(ops).await;
    let secret = "SECRET-BODY-4711";
    let message = Inbound::text("wa", "m1", "user-1", secret);
    assert!(replicas[leader].wa.inject(message));
    replicas[leader].wa.wait_sent(1).await;
    assert!(replicas[leader].wa.texts_to("user-1")[0].contains(secret));
    // Published with the next heartbeat: wait for one.
    tokio::time::sleep(LEASE / 2).await;

    for path in ["/status", "/status.json"] {
        let (code, _) = get(addr, path, None).await;
        assert_eq!(code, 401, "{path} without the token");
        let (code, _) = get(addr, path, Some("t0ken-not")).await;
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let (code, html) = get(addr, "/status", Some("t0ken")).await;
    assert_eq!(code, 200);
    assert!(html.contains("botmesh replicas"));
    let (code, json) = get(addr, "/status.json", Some("t0ken")).await;
    assert_eq!(code, 200);
    for page in [&html, &json] {
        assert!(!page.contains("SECRET-BODY"), "a message body leaked into the page");
        assert!(!page.contains("t0ken"), "the token leaked into the page");
    }
    let snapshot: Snapshot = serde_json::from_str(&json).unwrap();
    let cluster = snapshot.cluster.expect("the cluster was read");
    let ids: Vec<&str> = cluster.replicas.iter().map(|r| r.replica_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(cluster.replicas.iter().all(|r| r.alive && r.status.is_some()));
    let [wa] = cluster.leaders.as_slice() else { panic!("one leader: {:?}", cluster.leaders) };
    assert_eq!((wa.transport.as_str(), wa.replica_id.as_str()), ("wa", replicas[leader].name));
    for r in &replicas {
        r.bot.stop().await.unwrap();
    }
}

//! The status page in a real browser: headless Chromium loads it from a running three-replica
//! bot, finds the leader of the exclusive transport, and sees the new one after that leader
//! crashed, within `lease + lease / 3` plus one reload of the page.

use std::time::Duration;

use botmesh_ops::Ops;
use botmesh_testing::Browser;
use tokio::time::Instant;

use crate::support::{replicas, serve, wa_leader};

const LEASE: Duration = Duration::from_secs(2);
const REFRESH: Duration = Duration::from_secs(1);
/// What the browser adds on top: WebDriver polls every 100 ms, and a reload renders the page
/// in a few milliseconds; half a second covers both on a busy machine.
const SLACK: Duration = Duration::from_millis(500);

const LEADER_CELL: &str = "#leaders tr.leader[data-transport='wa'] td.replica";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_new_leader_in_a_browser_after_the_leader_crashed() {
    let replicas = replicas(&["a", "b", "c"], LEASE).await;
    let leader = wa_leader(&replicas, LEASE * 3).await;
    // The page is served by a replica that stays up.
    let observer = (leader + 1) % 3;
    let ops = Ops::new(replicas[observer].bot.clone()).status_page().refresh(REFRESH);
    let addr = serve(ops).await;
    for n in 0..3 {
        replicas[leader].wa.say(&format!("user-{n}"), "hello");
    }
    replicas[leader].wa.wait_sent(3).await;

    let browser =
        Browser::start().await.expect("chromium runs (apt-get install chromium chromium-driver)");
    browser.goto(&format!("http://{addr}/status")).await.unwrap();
    // The page reloads itself: every read waits for the element, across a reload.
    let title = browser.wait_for_text("h1", LEASE, |t| !t.is_empty()).await.unwrap();
    assert_eq!(title, "botmesh replicas");
    let shown = browser.wait_for_text(LEADER_CELL, LEASE, |t| !t.is_empty()).await.unwrap();
    assert_eq!(shown, replicas[leader].name, "the page names the current leader");
    for r in &replicas {
        let row = format!("#replicas tr.replica[data-replica='{}'] td:nth-child(3)", r.name);
        assert_eq!(browser.wait_for_text(&row, LEASE, |t| t == "alive").await.unwrap(), "alive");
    }

    replicas[leader].coordinator.crash();
    let crashed = Instant::now();
    let bound = LEASE + LEASE / 3 + REFRESH + SLACK;
    let old = replicas[leader].name;
    let new = browser
        .wait_for_text(LEADER_CELL, bound, |t| !t.is_empty() && t != old)
        .await
        .unwrap_or_else(|e| panic!("no new leader on the page within {bound:?}: {e}"));
    let seen_after = crashed.elapsed();
    assert!(seen_after <= bound, "seen after {seen_after:?}");
    let new_at = replicas.iter().position(|r| r.name == new).expect("a replica's name");
    assert_ne!(new_at, leader);
    // The page and the replicas agree: the one it names runs wa now, or is starting it.
    let deadline = Instant::now() + LEASE;
    while !replicas[new_at].bot.runs_transport("wa") {
        assert!(Instant::now() < deadline, "the page named {new}, which does not run wa");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The crashed replica is listed as dead.
    let row = format!("#replicas tr.replica[data-replica='{old}'] td:nth-child(3)");
    browser.wait_for_text(&row, LEASE, |t| t == "dead").await.unwrap();
    browser.wait_for_text("#events", LEASE, |t| t.contains("leader")).await.unwrap();

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    browser.screenshot(&shot).await.unwrap();
    println!("new leader {new} seen after {seen_after:?}; screenshot at {}", shot.display());
    browser.close().await.unwrap();
    for r in &replicas {
        let _ = r.bot.stop().await;
    }
}

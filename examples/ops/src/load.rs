//! A trickle of generated conversations over the replicas (`--load`), so the status page and
//! the metrics move: orders posted to the replicas' webhooks in turn (a chat's messages land on
//! different replicas, so its conversation moves between them), now and then a message
//! delivered twice or a handler that fails, and some chats on the exclusive transport, taken
//! by whichever replica of this process leads it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use botmesh_core::Inbound;
use botmesh_testing::{SECRET_HEADER, TestProvider, WEBHOOK_PATH};
use serde_json::json;
use tokio::time::MissedTickBehavior;

use crate::{Replica, WA};

/// How generated chats start, so their replies are not printed.
const PREFIX: &str = "load-";

/// How many chats take turns.
const CHATS: u64 = 12;

/// Whether `chat` is one of the generated chats.
pub(crate) fn generated(chat: &str) -> bool {
    chat.starts_with(PREFIX)
}

/// Where generated messages go on one replica.
pub(crate) struct Target {
    webhook: String,
    wa: TestProvider,
}

impl Target {
    pub(crate) fn of(replica: &Replica) -> Self {
        let mut addr = replica.addr;
        // Listening on every address: post to loopback.
        if addr.ip().is_unspecified() {
            let loopback = match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            };
            addr = SocketAddr::new(loopback, addr.port());
        }
        Self { webhook: format!("http://{addr}{WEBHOOK_PATH}"), wa: replica.wa.clone() }
    }
}

/// What the user of a chat says at `step` of its script, as message `n`, and the next step.
fn line(step: u64, n: u64) -> (String, u64) {
    const ITEMS: [&str; 3] = ["coffee", "tea", "cake"];
    match step {
        0 if n.is_multiple_of(37) => ("boom".to_owned(), 0),
        0 if n.is_multiple_of(11) => ("hello".to_owned(), 0),
        0 => ("order".to_owned(), 1),
        1 => (ITEMS[usize::try_from(n / CHATS % 3).unwrap_or(0)].to_owned(), 2),
        // Not a number from 1 to 9: asked again.
        _ if n.is_multiple_of(9) => ("lots".to_owned(), 2),
        _ => ((n % 3 + 1).to_string(), 0),
    }
}

/// Posts generated messages to `targets`, `rate` a second, until aborted.
pub(crate) async fn run(targets: Vec<Target>, rate: f64, secret: String) {
    // Another crate of a workspace build may turn reqwest's rustls on, without a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = match reqwest::Client::builder().timeout(Duration::from_secs(10)).build() {
        Ok(client) => client,
        Err(e) => {
            eprintln!("--load: no HTTP client: {e}");
            return;
        }
    };
    let replicas = targets.len() as u64;
    if replicas == 0 {
        return;
    }
    let target = |n: u64| &targets[usize::try_from(n % replicas).unwrap_or(0)];
    // Ids of this run, so a restarted demo's messages are not duplicates of the last run's.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let run = &run[..8];
    let mut steps = [0; CHATS as usize];
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for n in 0_u64.. {
        tick.tick().await;
        let i = usize::try_from(n % CHATS).unwrap_or(0);
        let chat = format!("{PREFIX}{run}-{i}");
        let id = format!("{PREFIX}{run}-{n}");
        let (text, next) = line(steps[i], n);
        if i % 4 == 3 {
            // On the exclusive transport: only the leader's is started.
            let inbound = Inbound::text(WA, id, chat, text);
            if targets.iter().any(|t| t.wa.inject(inbound.clone())) {
                steps[i] = next;
            }
            if n.is_multiple_of(200) {
                // Nobody reads the stand-in's record of sends: keep it from growing.
                targets.iter().for_each(|t| drop(t.wa.take_sent()));
            }
            continue;
        }
        steps[i] = next;
        let body = json!({ "id": id, "chat": chat, "text": text }).to_string();
        let post = |url: &str, delay: Duration| {
            let (client, url, secret, body) =
                (client.clone(), url.to_owned(), secret.clone(), body.clone());
            async move {
                tokio::time::sleep(delay).await;
                let sent = client.post(url).header(SECRET_HEADER, secret).body(body).send().await;
                // A replica that is down or draining answers 503 or not at all: a real platform
                // would deliver again later; the trickle just goes on.
                let _ = sent;
            }
        };
        tokio::spawn(post(&target(n).webhook, Duration::ZERO));
        if n % 10 == 9 {
            // The platform delivers it again, to another replica: dropped as a duplicate.
            tokio::spawn(post(&target(n + 1).webhook, Duration::from_millis(200)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_orders_then_starts_over() {
        let mut step = 0;
        let mut said = Vec::new();
        for n in [1, 13, 25] {
            let (text, next) = line(step, n);
            said.push(text);
            step = next;
        }
        assert_eq!(said, ["order", "tea", "2"]);
        assert_eq!(step, 0);
        assert!(generated("load-1234abcd-3") && !generated("alice"));
    }
}

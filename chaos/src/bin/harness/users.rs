//! The load generator: one user per chat, sending numbered messages one after another.

use std::sync::Arc;
use std::time::Duration;

use botmesh_chaos::check::Acked;
use botmesh_chaos::record::{Delivery, now_ns};
use rand::Rng;
use rand::seq::IndexedRandom;
use tokio::time::{Instant, sleep};

use crate::platform::Platform;

/// What chat `chat` types as its message `seq`: a form now and then, else free text.
fn body(seq: u32) -> &'static str {
    match seq % 6 {
        1 => "form",
        2 => "small",
        3 => "two",
        _ => "hello",
    }
}

/// How one user's messages reach the bot.
#[derive(Clone)]
pub(crate) enum Via {
    /// A webhook behind a load balancer: each delivery goes to a random replica, `(id, url)`,
    /// and is sent again (to another random one) until a replica acknowledges it.
    Webhook { replicas: Arc<Vec<(String, String)>>, client: reqwest::Client },
    /// The polling transport: the platform keeps the message until a poll confirms it.
    Polled,
}

/// One chat's user: sends message after message until `until` (or `messages` of them), the
/// next one shortly after the previous one was taken.
pub(crate) async fn user(
    chat: u32,
    messages: u32,
    until: Instant,
    via: Via,
    platform: Arc<Platform>,
) {
    let mut seq = 0;
    while (messages == 0 || seq < messages) && Instant::now() < until {
        let delivery = Delivery { chat, seq, body: body(seq).to_owned() };
        match &via {
            Via::Webhook { replicas, client } => {
                deliver(&delivery, replicas, client, &platform).await
            }
            Via::Polled => {
                let place = platform.queue(delivery);
                // A message no session ever confirms is not the bot's: it is left at the end.
                let give_up = until + Duration::from_secs(60);
                if !platform.confirmed(place, give_up).await {
                    return;
                }
            }
        }
        seq += 1;
        let gap = rand::rng().random_range(10..150);
        sleep(Duration::from_millis(gap)).await;
    }
}

/// Delivers `delivery` to random replicas until one acknowledges it.
async fn deliver(
    delivery: &Delivery,
    replicas: &[(String, String)],
    client: &reqwest::Client,
    platform: &Platform,
) {
    loop {
        let Some((id, url)) = replicas.choose(&mut rand::rng()).cloned() else { return };
        let ok =
            client.post(&url).json(delivery).send().await.is_ok_and(|r| r.status().is_success());
        if ok {
            let acked = Acked { chat: delivery.chat, seq: delivery.seq, replica: id, t: now_ns() };
            platform.tape().acked.push(acked);
            return;
        }
        platform.tape().refused += 1;
        let backoff = rand::rng().random_range(50..300);
        sleep(Duration::from_millis(backoff)).await;
    }
}

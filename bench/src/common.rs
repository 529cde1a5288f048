//! What the suites share: spreading a load over bots like a load balancer, percentiles, and
//! the bench process's CPU time.

use std::time::Instant;

use botmesh_core::{Bot, Inbound, MessageId};
use botmesh_testing::TestProvider;

/// Chats in a load run.
pub(crate) const CHATS: usize = 1_000;
/// Messages per chat in a load run.
pub(crate) const PER_CHAT: usize = 100;

/// Sends 1,000 chats × 100 messages spread over `replicas` (a fixed pseudo-random pick per
/// message, as a load balancer would), waits until all are answered, stops the bots, and
/// returns messages per second.
pub(crate) async fn spread(
    replicas: &[(Bot, TestProvider)],
) -> Result<f64, Box<dyn std::error::Error>> {
    let chats: Vec<String> = (0..CHATS).map(|c| format!("chat-{c}")).collect();
    let mut pick: u64 = 0x9E37_79B9_7F4A_7C15;
    let started = Instant::now();
    for n in 0..PER_CHAT {
        for (c, chat) in chats.iter().enumerate() {
            pick ^= pick << 13;
            pick ^= pick >> 7;
            pick ^= pick << 17;
            // Ids unique across the replicas, as a platform's are (a shared journal would take
            // equal ids for retries).
            let id = MessageId::from(format!("{n}-{c}"));
            replicas[(pick % replicas.len() as u64) as usize].1.inject(Inbound::text(
                "test",
                id,
                chat.as_str(),
                "hello",
            ));
        }
    }
    for (bot, provider) in replicas {
        provider.settled(bot).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let sent: usize = replicas.iter().map(|(_, p)| p.sent_count()).sum();
    for (bot, _) in replicas {
        bot.stop().await?;
    }
    if sent != CHATS * PER_CHAT {
        return Err(format!("{sent} replies for {} messages", CHATS * PER_CHAT).into());
    }
    Ok((CHATS * PER_CHAT) as f64 / secs)
}

/// The `p` quantile of sorted samples, by nearest rank: the smallest sample with at least a
/// fraction `p` of all samples at or below it. (With 2,000 waits of which 1,000 are at most
/// 120 ms, the p50 is 120 ms, as the w3 load's ideal schedule has it; rounding the index
/// `p × (n − 1)` to the nearest instead would report the 1,001st sample.)
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (sorted.len() as f64 * p).ceil() as usize;
    sorted.get(rank.saturating_sub(1).min(sorted.len().saturating_sub(1))).copied().unwrap_or(0.0)
}

/// The result of a bench step that may fail on its backend.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The median time, in µs, of one message alone on `bot`: from its arrival until the bot is
/// idle again. Messages go one at a time, so nothing batches: every round trip of the
/// message's path is waited for. The first message is not counted.
pub(crate) async fn lone_message_p50_us(bot: &Bot, provider: &TestProvider) -> f64 {
    const MESSAGES: usize = 500;
    provider.say("chat", "warm");
    provider.settled(bot).await;
    let mut took = Vec::with_capacity(MESSAGES);
    for _ in 0..MESSAGES {
        let start = Instant::now();
        provider.say("chat", "x");
        provider.settled(bot).await;
        took.push(start.elapsed().as_secs_f64() * 1e6);
    }
    took.sort_by(f64::total_cmp);
    percentile(&took, 0.5)
}

/// The CPU time this process has used since it started, user and system, all threads, in
/// seconds: `utime` and `stime` of `/proc/self/stat`, in the kernel's fixed 100 ticks a second
/// (`USER_HZ`), so read to 10 ms.
pub(crate) fn process_cpu_s() -> Result<f64, Box<dyn std::error::Error>> {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name, in parentheses, may hold spaces: the fields counted start after it.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).ok_or("/proc/self/stat has no name")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the whole line; `after` starts at field 3.
    let tick = |i: usize| -> Result<f64, Box<dyn std::error::Error>> {
        Ok(fields.get(i).ok_or("/proc/self/stat is too short")?.parse::<f64>()?)
    };
    Ok((tick(11)? + tick(12)?) / USER_HZ)
}

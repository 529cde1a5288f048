//! `docs/config.toml`, the documented settings of one replica, loads with the `toml` crate
//! into the options types of every crate (their `serde` features), with the values it shows.

use std::time::Duration;

use botmesh_coord::{CoordinationConfig, CoordinationSettings, ProviderSession};
use botmesh_core::{Durability, Handover};
use botmesh_email::EmailSettings;
use botmesh_redis_store::RedisOptions;
use botmesh_telegram::{ParseMode, TelegramSettings};
use botmesh_testing::{MemoryCoordinationHub, MemoryCoordinator};
use serde::Deserialize;

const FILE: &str = include_str!("../../docs/config.toml");

/// What a program holds its settings in: the file's tables, one options type each.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    store: RedisOptions,
    coordinator: Coordinator,
    coordination: CoordinationSettings,
    durability: Durability,
    handover: Handover,
    telegram: TelegramSettings,
    email: EmailSettings,
}

/// The program's own table: the lease, which the coordinator takes in code.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Coordinator {
    #[serde(with = "humantime_serde")]
    lease: Duration,
}

#[test]
fn the_documented_config_file_loads_with_its_values() {
    let config: Config = toml::from_str(FILE).unwrap();

    assert_eq!(config.coordinator.lease, Duration::from_secs(15));
    let coordination = config.coordination.clone().apply(CoordinationConfig::new(
        MemoryCoordinator::new(MemoryCoordinationHub::new(), "a")
            .with_lease(config.coordinator.lease),
    ));
    assert_eq!(coordination.get_lease(), Duration::from_secs(15));
    assert_eq!(coordination.get_turn_wait(), Duration::from_secs(120));
    assert_eq!(coordination.get_settle(), Duration::from_secs(60));
    assert_eq!(config.coordination.provider_session, Some(ProviderSession::Auto));
    assert_eq!(config.coordination.step_down_pause, Some(Duration::from_secs(5)));

    // The stores' and the runtime's types keep their fields private: their `Debug` shows them.
    let store = format!("{:?}", config.store);
    for shown in [
        r#"urls: ["redis://***@redis.internal:6379/0"]"#,
        r#"prefix: "shop""#,
        "layout: Standalone",
        "response_timeout: 2s",
        "max_poll: 100ms",
        "idle_keep: 60s",
    ] {
        assert!(store.contains(shown), "{shown} in {store}");
    }
    let durability = format!("{:?}", config.durability);
    for shown in ["retain: 86400s", "mark_within: 20ms", "replay_every: 1s", "max_attempts: 3"] {
        assert!(durability.contains(shown), "{shown} in {durability}");
    }
    let handover = format!("{:?}", config.handover);
    for shown in
        ["flows: Forward", "fallback: Notify", "ttl: Some(600s)", "max_answer_bytes: 16384"]
    {
        assert!(handover.contains(shown), "{shown} in {handover}");
    }

    assert_eq!(config.telegram.parse_mode, Some(ParseMode::Html));
    assert_eq!(config.telegram.poll_timeout, Some(Duration::from_secs(10)));
    assert!(config.telegram.webhook.is_none(), "long polling");
    config.telegram.provider().unwrap();

    assert_eq!(config.email.retention, Some(Duration::from_secs(7 * 24 * 3600)));
    assert_eq!(config.email.imap.as_ref().unwrap().get_mailbox(), "INBOX");
    assert_eq!(config.email.smtp.get_from(), "shop@example.org");
    config.email.provider().unwrap();

    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cret"), "Debug output shows no secret: {shown}");
}

#[test]
fn a_typo_in_the_config_file_fails_loudly() {
    for (good, typo) in [
        ("turn_wait =", "turn_wiat ="),
        ("idle_keep =", "idle_kept ="),
        ("replay_every = \"1s\"", "replay_every = 1"),
        ("ttl = \"10m\"", "ttl = \"ten minutes\""),
        ("[handover]", "[hand_over]"),
    ] {
        assert!(FILE.contains(good), "{good}");
        let text = FILE.replacen(good, typo, 1);
        let error = toml::from_str::<Config>(&text).unwrap_err().to_string();
        assert!(!error.is_empty(), "{typo}");
    }
}

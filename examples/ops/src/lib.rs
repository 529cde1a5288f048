//! Three replicas of one bot on a shared Redis, each serving its status page and `/metrics`:
//! what an operator sees, to open in a browser.
//!
//! Every replica has two providers: `web`, a webhook any replica takes deliveries on (the
//! shared `WebhookTestProvider` of `botmesh-testing`, so a person can post messages with
//! `curl`), and `wa`, an exclusive session that only the elected leader runs (a `TestProvider`
//! standing in for WhatsApp Web). The bot has a persistent `order` flow of two questions, a
//! fallback handler, and a durable task. Each replica serves `botmesh-ops`' routes and the
//! webhook on one port.
//!
//! [`Demo`] builds the replicas of [`Settings`] and runs them; `main.rs` runs it from the
//! command line, and the integration tests drive it against a private Redis.

mod load;
mod replies;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use botmesh_coord::CoordinationConfig;
use botmesh_core::traits::{Capabilities, Store};
use botmesh_core::{Ask, Bot, BotBuilder, BotError, Durability, Flow, Step, TaskOptions, Trigger};
use botmesh_ops::{Ops, PrometheusHandle};
use botmesh_redis_store::RedisStore;
use botmesh_testing::{TestProvider, WebhookTestProvider};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::replies::Replies;

/// A boxed error, for a program's `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The id of the webhook provider every replica serves.
pub const WEB: &str = "web";

/// The id of the exclusive provider only the leader runs (it stands in for WhatsApp Web).
pub const WA: &str = "wa";

/// What `--help` prints.
pub const USAGE: &str = "\
usage: cargo run -p ops-demo --example ops -- [OPTIONS]

Runs replicas of one bot on a shared Redis, each serving /status, /status.json, /metrics,
/livez, /readyz and POST /webhook on its own port.

  (no --replica)      three replicas a, b, c in this process, on ports PORT..PORT+2
  --replica ID        one replica with id ID in this process, on PORT (run one per terminal)
  --replicas N        how many replicas without --replica (default 3)
  --port PORT         the first port (default 9091; 0 picks free ports)
  --bind IP           the address to listen on (default 127.0.0.1)
  --redis URL         the Redis server (default $REDIS_URL, else redis://127.0.0.1:6379/)
  --prefix PREFIX     the key prefix the replicas share (default ops-demo)
  --lease TIME        the replicas' heartbeat lease: the takeover time after a crash, in
                      seconds or as a duration such as 1500ms (default 6)
  --secret SECRET     the webhook's x-botmesh-secret (default demo-secret)
  --load              post a trickle of generated conversations to the replicas
  --rate N            messages per second with --load (default 4)
  -h, --help          this text";

/// How the demo runs: which replicas, where they listen, where they meet.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The replica ids to run in this process, one port each.
    pub replicas: Vec<String>,
    /// The address to listen on.
    pub bind: IpAddr,
    /// The first replica's port; the next ones follow it. `0` picks a free port for each.
    pub port: u16,
    /// The Redis server's URL.
    pub redis_url: String,
    /// The key prefix every replica shares: replicas meet only under the same prefix.
    pub prefix: String,
    /// The heartbeat lease: how long a crashed replica's chats and leadership wait before
    /// another replica takes them over. A replica stopped with Ctrl-C hands over at once.
    pub lease: Duration,
    /// The webhook's shared secret (the `x-botmesh-secret` header).
    pub secret: String,
    /// Generated messages per second over the replicas, if any.
    pub load: Option<f64>,
}

impl Default for Settings {
    /// Three replicas `a`, `b` and `c` on 127.0.0.1:9091..9093, Redis at `$REDIS_URL` or
    /// `redis://127.0.0.1:6379/`, prefix `ops-demo`, a 6 s lease, no load.
    fn default() -> Self {
        Self {
            replicas: ids(3),
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 9091,
            redis_url: std::env::var("REDIS_URL")
                .ok()
                .filter(|url| !url.is_empty())
                .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned()),
            prefix: "ops-demo".to_owned(),
            lease: Duration::from_secs(6),
            secret: "demo-secret".to_owned(),
            load: None,
        }
    }
}

/// Replica ids `a`, `b`, `c`, ... (then `r27`, `r28`, ...).
fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match u8::try_from(i) {
            Ok(i @ 0..26) => char::from(b'a' + i).to_string(),
            _ => format!("r{}", i + 1),
        })
        .collect()
}

impl Settings {
    /// Reads the settings from command-line arguments (without the program's name; see
    /// [`USAGE`]). `None` when they ask for help.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, Error> {
        let mut settings = Self::default();
        let (mut replica, mut count, mut load, mut rate) = (None, 3, false, 4.0);
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--replica" => replica = Some(value()?),
                "--replicas" => count = value()?.parse().map_err(|e| format!("--replicas: {e}"))?,
                "--port" => settings.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
                "--bind" => settings.bind = value()?.parse().map_err(|e| format!("--bind: {e}"))?,
                "--redis" => settings.redis_url = value()?,
                "--prefix" => settings.prefix = value()?,
                "--lease" => {
                    let text = value()?;
                    // Seconds (`6`, `2.5`), or a duration as configuration files write it.
                    let lease = match text.parse::<f64>() {
                        Ok(secs) => Duration::try_from_secs_f64(secs).ok(),
                        Err(_) => Some(
                            humantime::parse_duration(&text)
                                .map_err(|e| format!("--lease: {text}: {e}"))?,
                        ),
                    };
                    settings.lease = lease
                        .filter(|lease| *lease >= Duration::from_secs(1))
                        .ok_or("--lease is at least 1 second")?;
                }
                "--secret" => settings.secret = value()?,
                "--load" => load = true,
                "--rate" => rate = value()?.parse().map_err(|e| format!("--rate: {e}"))?,
                other => return Err(format!("unknown option {other}; see --help").into()),
            }
        }
        settings.replicas = match replica {
            Some(id) => vec![id],
            None if (1..=100).contains(&count) => ids(count),
            None => return Err("--replicas is 1 to 100".into()),
        };
        if load {
            if !(rate > 0.0 && rate <= 1000.0) {
                return Err("--rate is above 0 and at most 1000 messages per second".into());
            }
            settings.load = Some(rate);
        }
        Ok(Some(settings))
    }
}

/// The order flow: what and how many, then a little work under the chat's turn. Persistent,
/// so an order in progress moves to whichever replica takes the chat's next message.
pub fn order_flow() -> Flow {
    Flow::new("order")
        .trigger(Trigger::keyword("order"))
        .interrupts(true)
        .persistent()
        .timeout(Duration::from_secs(10 * 60))
        .ask(
            Ask::new("item", "What would you like? coffee, tea or cake")
                .choices(["coffee", "tea", "cake"]),
        )
        .ask(Ask::new("qty", "How many? (1 to 9)").validate(
            |m| match m.body.trim().parse::<u32>() {
                Ok(n @ 1..=9) => Ok(json!(n)),
                _ => Err("Please send a number from 1 to 9.".to_owned()),
            },
        ))
        .do_step("kitchen", |c| async move {
            let item: String = c.get("item").unwrap_or_default();
            let qty: u32 = c.get("qty").unwrap_or(1);
            // Some work while the chat's turn is held, so held turns and hold times show.
            c.sleep(Duration::from_millis(100 + 50 * u64::from(qty))).await;
            c.send(format!("{qty} x {item} coming up. Send 'order' for more.")).await?;
            Ok::<_, BotError>(Step::Next)
        })
}

/// The bot's definition on `builder`: the order flow, a fallback handler (`boom` makes it
/// fail, to show failures and errors), and a durable task every 15 s that runs on one replica
/// at a time.
pub fn definition(builder: BotBuilder) -> BotBuilder {
    builder
        .flow(order_flow())
        .on_message(|ctx| async move {
            if ctx.body().trim().eq_ignore_ascii_case("boom") {
                return Err(Error::from("the fallback handler failed on purpose"));
            }
            ctx.reply("Hi! Send 'order' to order a coffee, a tea or a cake.").await?;
            Ok(())
        })
        .every_with(Duration::from_secs(15), TaskOptions::durable("tidy-up"), |_job| async {
            Ok::<_, BotError>(())
        })
}

/// One replica: its bot, its providers, and the address of its routes.
#[derive(Debug, Clone)]
pub struct Replica {
    /// Its replica id.
    pub id: String,
    /// The bot.
    pub bot: Bot,
    /// Its webhook provider ([`WEB`]), posted to at `POST /webhook` on [`addr`](Self::addr).
    pub web: WebhookTestProvider,
    /// Its exclusive provider ([`WA`]): started only while this replica leads it.
    pub wa: TestProvider,
    /// Where it serves the operations routes and the webhook.
    pub addr: SocketAddr,
}

impl Replica {
    /// The replica's routes, on one port: the probes, the status page, `/metrics` from
    /// `metrics`, and the webhook.
    pub fn router(&self, metrics: PrometheusHandle) -> axum::Router {
        let ops = Ops::new(self.bot.clone()).status_page().metrics(metrics);
        ops.router().merge(self.web.router())
    }
}

/// The replicas of one process, built and listening, not started yet.
#[derive(Debug)]
pub struct Demo {
    replicas: Vec<Replica>,
    listeners: Vec<TcpListener>,
    metrics: PrometheusHandle,
    load: Option<f64>,
    secret: String,
}

impl Demo {
    /// Builds the replicas of `settings` and binds their ports. `metrics` is the process's
    /// recorder ([`botmesh_ops::install_prometheus`]), installed before this call: the bots
    /// take their metric handles when they are built. Every replica of the process serves the
    /// same recorder, so with several replicas in one process their metrics are summed.
    pub async fn build(settings: &Settings, metrics: PrometheusHandle) -> Result<Self, Error> {
        let mut replicas = Vec::new();
        let mut listeners = Vec::new();
        for (i, id) in settings.replicas.iter().enumerate() {
            let port = match settings.port {
                0 => 0,
                first => u16::try_from(i)
                    .ok()
                    .and_then(|i| first.checked_add(i))
                    .ok_or("the replicas' ports run past 65535")?,
            };
            let listener = TcpListener::bind((settings.bind, port))
                .await
                .map_err(|e| format!("listening on {}:{port}: {e}", settings.bind))?;
            let addr = listener.local_addr()?;
            let web = WebhookTestProvider::new(WEB, &settings.secret);
            let wa = TestProvider::with(WA, Capabilities::exclusive());
            // One connection per replica, as separate processes would have.
            let store = RedisStore::new(&settings.redis_url, &settings.prefix)
                .await
                .map_err(|e| format!("connecting to Redis at {}: {e}", settings.redis_url))?;
            let coordinator = store.coordinator(settings.lease).with_replica_id(id);
            let builder = Bot::builder()
                .provider(Replies::new(web.clone(), id))
                .provider(wa.clone())
                .store(Arc::new(store) as Arc<dyn Store>)
                .coordination(CoordinationConfig::new(coordinator).build())
                .durability(Durability::new());
            let bot = definition(builder).build()?;
            replicas.push(Replica { id: id.clone(), bot, web, wa, addr });
            listeners.push(listener);
        }
        Ok(Self {
            replicas,
            listeners,
            metrics,
            load: settings.load,
            secret: settings.secret.clone(),
        })
    }

    /// The replicas, in the order of the settings.
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// Serves every replica's routes and runs its bot ([`Bot::run_until`]) until `signal`
    /// resolves or a bot ends by itself (it could not start, say), then stops them all: each
    /// drains and hands its chats and leaderships over.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), Error> {
        let (stop, stopped) = watch::channel(false);
        let until_stopped = |mut stopped: watch::Receiver<bool>| async move {
            // An error means the sender is gone: stop then too.
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let mut servers = Vec::new();
        for (replica, listener) in self.replicas.iter().zip(self.listeners) {
            let router = replica.router(self.metrics.clone());
            let serving = axum::serve(listener, router)
                .with_graceful_shutdown(until_stopped(stopped.clone()))
                .into_future();
            servers.push(tokio::spawn(serving));
        }
        let (ended, mut first_end) = mpsc::channel(self.replicas.len());
        let mut bots = Vec::new();
        for replica in &self.replicas {
            let (bot, ended, stop) =
                (replica.bot.clone(), ended.clone(), until_stopped(stopped.clone()));
            bots.push(tokio::spawn(async move {
                let result = bot.run_until(stop).await;
                let _ = ended.send(()).await;
                result
            }));
        }
        let load = self.load.map(|rate| {
            let targets = self.replicas.iter().map(load::Target::of).collect();
            tokio::spawn(load::run(targets, rate, self.secret.clone()))
        });
        tokio::select! {
            () = signal => {}
            _ = first_end.recv() => {}
        }
        if let Some(load) = load {
            load.abort();
        }
        let _ = stop.send(true);
        let mut first_error: Option<Error> = None;
        for bot in bots {
            if let Err(e) = bot.await.map_err(Error::from).and_then(|r| r.map_err(Error::from)) {
                first_error.get_or_insert(e);
            }
        }
        for server in servers {
            if let Err(e) = server.await.map_err(Error::from).and_then(|r| r.map_err(Error::from)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Settings {
        Settings::from_args(args.iter().map(|a| (*a).to_owned())).unwrap().unwrap()
    }

    #[test]
    fn three_replicas_in_one_process_by_default() {
        let s = parse(&[]);
        assert_eq!(s.replicas, ["a", "b", "c"]);
        assert_eq!((s.port, s.load), (9091, None));
    }

    #[test]
    fn one_replica_per_process_with_replica() {
        let s = parse(&["--replica", "b", "--port", "9092", "--load", "--rate", "2"]);
        assert_eq!(s.replicas, ["b"]);
        assert_eq!((s.port, s.load), (9092, Some(2.0)));
    }

    #[test]
    fn the_lease_is_seconds_or_a_duration() {
        assert_eq!(parse(&["--lease", "8"]).lease, Duration::from_secs(8));
        assert_eq!(parse(&["--lease", "2.5"]).lease, Duration::from_millis(2500));
        assert_eq!(parse(&["--lease", "1500ms"]).lease, Duration::from_millis(1500));
        assert_eq!(parse(&["--lease", "1m"]).lease, Duration::from_secs(60));
    }

    #[test]
    fn bad_arguments_are_refused() {
        let bad: [&[&str]; 7] = [
            &["--port"],
            &["--lease", "0.5"],
            &["--lease", "500ms"],
            &["--lease", "soon"],
            &["--lease", "-3"],
            &["--load", "--rate", "0"],
            &["-x"],
        ];
        for args in bad {
            let args = args.iter().map(|a| (*a).to_owned());
            assert!(Settings::from_args(args).is_err());
        }
        assert!(Settings::from_args(["--help".to_owned()]).unwrap().is_none());
        assert_eq!(ids(28)[25..], ["z", "r27", "r28"]);
    }
}

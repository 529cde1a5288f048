//! Replicas of one bot on a shared Redis, each serving its status page and `/metrics`.
//!
//! ```sh
//! cargo run -p ops-demo --example ops                           # a, b, c on 9091..9093
//! cargo run -p ops-demo --example ops -- --load                 # with generated traffic
//! cargo run -p ops-demo --example ops -- --replica a --port 9091  # one per terminal
//! ```
//!
//! Then open <http://127.0.0.1:9091/status>. See the README for what to try.

use ops_demo::{Demo, Error, Settings, USAGE};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let Some(settings) = Settings::from_args(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    // One recorder per process, before any bot is built: bots take their metric handles when
    // they are built. In production one process is one replica; here all of this process's
    // replicas record into it, so their metrics are summed.
    let metrics = botmesh_ops::install_prometheus()?;
    let demo = Demo::build(&settings, metrics).await?;
    for replica in demo.replicas() {
        let addr = replica.addr;
        eprintln!("replica {}: http://{addr}/status  http://{addr}/metrics", replica.id);
    }
    eprintln!(
        "Redis {} under prefix {:?}. Post a message:\n  curl -X POST http://{}/webhook -H 'x-botmesh-secret: {}' -d '{{\"id\":\"m1\",\"chat\":\"alice\",\"text\":\"order\"}}'\nCtrl-C to stop.",
        settings.redis_url,
        settings.prefix,
        demo.replicas().first().map_or_else(String::new, |r| r.addr.to_string()),
        settings.secret,
    );
    demo.run_until(botmesh_core::shutdown_signal()).await
}

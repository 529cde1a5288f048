//! The shop bot over Discord.
//!
//! ```sh
//! DISCORD_TOKEN=... cargo run --example discord                                  # one process
//! DISCORD_TOKEN=... REDIS_URL=redis://127.0.0.1 REPLICA_ID=a cargo run --example discord
//! ```
//!
//! With `REDIS_URL`, run it as many times as you like (a different `REPLICA_ID` each): one
//! replica holds the gateway session and the others stand by; when it dies, a standby connects
//! within the lease and a third. The bot needs the Message Content intent (developer portal,
//! Bot settings) to read guild messages; DMs work without it.

use discord_shop::{Error, Settings, bot};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let settings = Settings::from_env()?;
    let bot = bot(&settings, settings.provider()).await?;
    bot.start().await?;
    eprintln!("Shop bot on the Discord gateway. Ctrl-C to quit.");
    tokio::signal::ctrl_c().await?;
    bot.stop().await?;
    Ok(())
}

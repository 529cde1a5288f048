//! The shop bot over Telegram.
//!
//! ```sh
//! TELEGRAM_TOKEN=123:abc cargo run --example telegram            # long polling, one process
//! TELEGRAM_TOKEN=123:abc REDIS_URL=redis://127.0.0.1 REPLICA_ID=a cargo run --example telegram
//! TELEGRAM_TOKEN=123:abc TELEGRAM_WEBHOOK_URL=https://bot.example/telegram \
//!   TELEGRAM_SECRET=s3cret PORT=8080 cargo run --example telegram  # webhooks
//! ```
//!
//! With `REDIS_URL`, run it as many times as you like (a different `REPLICA_ID` each): with
//! polling one replica polls and the others stand by; with webhooks all of them serve.

use telegram_shop::{Error, Settings, bot};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let settings = Settings::from_env()?;
    let provider = settings.provider();
    let bot = bot(&settings, provider.clone()).await?;
    bot.start().await?;
    let serving = settings.webhook.as_ref().map(|(_, _, addr)| {
        let (provider, addr) = (provider.clone(), *addr);
        eprintln!("Shop bot serving Telegram webhooks on {addr}. Ctrl-C to quit.");
        // Serves until the bot stops its provider.
        tokio::spawn(async move { provider.serve(addr).await })
    });
    match serving {
        Some(mut serving) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                bot.stop().await?;
                serving.await??;
            }
            // The server ended by itself: the port could not be bound, say.
            served = &mut serving => {
                bot.stop().await?;
                served??;
            }
        },
        None => {
            eprintln!("Shop bot polling Telegram. Ctrl-C to quit.");
            tokio::signal::ctrl_c().await?;
            bot.stop().await?;
        }
    }
    Ok(())
}

//! The shop bot on one WhatsApp number.
//!
//! ```sh
//! cargo run --example whatsapp-web                      # one process; scan the QR code
//! WHATSAPP_PHONE=34600000000 cargo run --example whatsapp-web   # pair with a code instead
//! REDIS_URL=redis://127.0.0.1 REPLICA_ID=a WHATSAPP_SESSION_DIR=/shared/wa \
//!   cargo run --example whatsapp-web                    # a replica: run several
//! REDIS_URL=redis://127.0.0.1 REPLICA_ID=a WHATSAPP_SESSION=store \
//!   cargo run --example whatsapp-web                    # a replica, the session in Redis
//! ```
//!
//! With `REDIS_URL`, run it as many times as you like (a different `REPLICA_ID` each, the same
//! session directory on a shared volume, or the session in Redis with `WHATSAPP_SESSION=store`):
//! one replica holds the session, the others stand by and one of them takes over within 20
//! seconds (a 15 s lease and a third) of it dying.

use whatsapp_web_shop::{Error, Settings, bot};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let settings = Settings::from_env();
    let bot = bot(&settings, settings.provider()).await?;
    bot.start().await?;
    let kept = match settings.session().dir() {
        Some(dir) => dir.display().to_string(),
        None => "the session in the bot's store".to_owned(),
    };
    eprintln!("Shop bot on WhatsApp Web ({kept}). Ctrl-C to quit.");
    tokio::signal::ctrl_c().await?;
    bot.stop().await?;
    Ok(())
}

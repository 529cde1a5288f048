//! The shop bot on WhatsApp, Messenger and Instagram at once.
//!
//! ```sh
//! META_TOKEN=… META_APP_SECRET=… META_VERIFY_TOKEN=… WHATSAPP_PHONE_NUMBER_ID=… \
//!   MESSENGER_PAGE_ID=… PORT=8080 cargo run --example meta
//! ```
//!
//! Point each channel's webhook at `https://<your host>/meta/<whatsapp|messenger|instagram>`.
//! With `REDIS_URL` (and a `REPLICA_ID` each), run as many replicas as you like behind your load
//! balancer: every one serves every channel.

use meta_shop::{Error, Settings, app, bot};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let settings = Settings::from_env()?;
    let providers = settings.providers()?;
    let port: u16 = std::env::var("PORT").ok().map_or(Ok(8080), |p| p.parse())?;
    // Bound before the bot starts, so that a port in use fails at once.
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    let bot = bot(&settings, &providers).await?;
    bot.start().await?;
    eprintln!("Shop bot serving Meta webhooks on port {port}. Ctrl-C to quit.");
    let serving = botmesh_traits::webhook::serve_on(listener, app(&providers), async {
        let _ = tokio::signal::ctrl_c().await;
    });
    serving.await?;
    bot.stop().await?;
    Ok(())
}

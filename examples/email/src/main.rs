//! The shop bot by e-mail.
//!
//! ```sh
//! # IMAP in, SMTP out; one process on SQLite:
//! MAIL_FROM=shop@example.org IMAP_HOST=imap.example.org IMAP_PASSWORD=... \
//!   SMTP_HOST=smtp.example.org SMTP_USER=shop@example.org SMTP_PASSWORD=... \
//!   cargo run --example email
//! # The same as a replica on Redis (run several, a different REPLICA_ID each):
//! REDIS_URL=redis://127.0.0.1 REPLICA_ID=a ... cargo run --example email
//! # Ingest: a mail service posts raw mails to :8080/email with X-Botmesh-Secret:
//! MAIL_FROM=shop@example.org INGEST_SECRET=s3cret PORT=8080 SMTP_HOST=... cargo run --example email
//! ```
//!
//! Over IMAP, one replica reads the mailbox and the others stand by; with ingest, all of them
//! serve the endpoint.

use email_shop::{Error, Settings, bot};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let settings = Settings::from_env()?;
    let provider = settings.provider();
    let bot = bot(&settings, provider.clone()).await?;
    bot.start().await?;
    match settings.ingest {
        Some((_, addr)) => {
            eprintln!("Shop bot taking mail on {addr}/email. Ctrl-C to quit.");
            // Serves until the bot stops its provider.
            let mut serving = tokio::spawn(async move { provider.serve(addr).await });
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {
                    bot.stop().await?;
                    serving.await??;
                }
                // The server ended by itself: the port could not be bound, say.
                served = &mut serving => {
                    bot.stop().await?;
                    served??;
                }
            }
        }
        None => {
            eprintln!("Shop bot reading its mailbox. Ctrl-C to quit.");
            tokio::signal::ctrl_c().await?;
            bot.stop().await?;
        }
    }
    Ok(())
}

//! The shop bot in your terminal: `cargo run --example shop`, then type `order`.
//!
//! Piped input works too: `printf 'order\nM\n2\nyes\n' | cargo run --example shop`.
//!
//! Conversations are kept in a SQLite file (`shop.db`, or the path in `SHOP_DB`), so an order
//! in progress survives a restart: quit halfway, run it again, and answer the next question.

use std::sync::Arc;

use botmesh_core::Bot;
use botmesh_sql_store::SqliteStore;
use shop::console::ConsoleProvider;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let path = std::env::var_os("SHOP_DB").unwrap_or_else(|| "shop.db".into());
    let store = Arc::new(SqliteStore::open(&path).await?);
    let bot = shop::bot(Bot::builder().provider(ConsoleProvider::new()).store(store)).build()?;
    bot.start().await?;
    eprintln!("Shop bot ready. Try: order, help, remind. Ctrl-D or Ctrl-C to quit.");
    tokio::select! {
        () = bot.closed() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    bot.wait_idle().await;
    bot.stop().await?;
    Ok(())
}

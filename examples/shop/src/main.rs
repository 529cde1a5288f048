//! The shop bot in your terminal: `cargo run --example shop`, then type `order`.
//!
//! Piped input works too: `printf 'order\nM\n2\nyes\n' | cargo run --example shop`.

use botmesh_core::Bot;
use shop::console::ConsoleProvider;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let bot = shop::bot(Bot::builder().provider(ConsoleProvider::new())).build()?;
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

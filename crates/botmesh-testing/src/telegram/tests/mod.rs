//! The stand-in driven by the real teloxide client, and by raw HTTP where teloxide cannot say
//! what is tested.

use std::time::Duration;

use teloxide::Bot;

use super::TelegramServer;

mod polling;
mod sending;
mod updates;
mod webhook;
mod wire;

/// The token the tests' bot uses; its id is 123.
const TOKEN: &str = "123:abc";

/// How long a test waits for something that should happen at once.
const SOON: Duration = Duration::from_secs(5);

/// A server and a teloxide bot pointed at it.
async fn start() -> (TelegramServer, Bot) {
    let server = TelegramServer::start().await.unwrap();
    let bot = bot(&server);
    (server, bot)
}

fn bot(server: &TelegramServer) -> Bot {
    Bot::new(TOKEN).set_api_url(server.api_url().parse().unwrap())
}

//! What handling a message holds in memory: the futures a message's handling boxes.

use std::sync::{Arc, Mutex};

use botmesh_core::BotError;

use crate::support::builder;

/// The most a reply's future may weigh. A handler's future holds its reply's, and is boxed
/// for every message; the system allocator serves a box of up to 1,032 bytes from its
/// per-thread cache, so a handler that keeps its context and a line of text beside a reply
/// stays in it. Each async layer between a reply and the provider once kept its own copy of
/// the outgoing message, and a reply's future weighed 1,344 bytes.
const MOST: usize = 900;

#[tokio::test]
async fn a_reply_s_future_holds_one_copy_of_its_message() {
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let log = Arc::clone(&sizes);
    let (b, provider, _) = builder();
    let bot = b
        .on_message(move |ctx| {
            let log = Arc::clone(&log);
            async move {
                let reply = ctx.reply(ctx.body().to_owned());
                log.lock().unwrap().push(size_of_val(&reply));
                reply.await?;
                Ok::<_, BotError>(())
            }
        })
        .build()
        .unwrap();
    bot.start().await.unwrap();
    provider.say("c", "hello");
    provider.settled(&bot).await;
    assert_eq!(provider.texts_to("c"), ["hello"], "the measured reply went out");
    let sizes = sizes.lock().unwrap().clone();
    assert!(sizes.len() == 1 && sizes[0] <= MOST, "a reply's future weighs {sizes:?} bytes");
    bot.stop().await.unwrap();
}

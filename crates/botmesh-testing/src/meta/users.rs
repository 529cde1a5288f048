//! Acting as the users: what they send is queued for the bot's webhook, and what they write
//! opens WhatsApp's customer service window.

use serde_json::Value;
use tokio::time::Instant;

use super::bodies::{self, Context};
use super::channel::Channel;
use super::inbound::Inbound;
use super::server::GraphServer;
use super::state::Inner;

impl GraphServer {
    /// Queues one item for the bot's webhook, in a body of its own; returns its
    /// [id](Inbound::id).
    pub fn deliver(&self, item: Inbound) -> String {
        let id = item.id.clone();
        self.deliver_batch([item]);
        id
    }

    /// Queues several items, possibly of several users, in ONE webhook body (one per channel,
    /// when they are of several), so that a test can check that the bot acknowledges a body
    /// only once every item in it is safe. Returns their ids in order.
    ///
    /// The body waits until every older body concerning any of its users has been taken.
    pub fn deliver_batch(&self, items: impl IntoIterator<Item = Inbound>) -> Vec<String> {
        let items: Vec<Inbound> = items.into_iter().collect();
        let ids = items.iter().map(|i| i.id.clone()).collect();
        let shared = &self.shared;
        shared.update_outbox(|inner| {
            for item in &items {
                note(inner, item);
            }
            let mut channels: Vec<Channel> = Vec::new();
            for item in &items {
                if !channels.contains(&item.channel) {
                    channels.push(item.channel);
                }
            }
            for channel in channels {
                let group: Vec<&Inbound> = items.iter().filter(|i| i.channel == channel).collect();
                let cx = Context { config: &shared.config, base_url: &shared.base_url, inner };
                let body = bodies::render(&cx, channel, &group).to_string();
                let mut users = Vec::new();
                for item in &group {
                    let key = (channel, item.user.clone());
                    if !users.contains(&key) {
                        users.push(key);
                    }
                }
                let ids = group.iter().map(|i| i.id.clone()).collect();
                inner.enqueue(channel, users, ids, body);
            }
        });
        ids
    }

    /// A WhatsApp user (`wa_id`, digits only) sends a text; returns its `wamid.…`.
    pub fn whatsapp_text(&self, from: &str, text: &str) -> String {
        self.deliver(Inbound::text(Channel::WhatsApp, from, text))
    }

    /// A WhatsApp user sends any message: `message`'s fields (`type` and its object,
    /// `context`, ...) are added to `from`, a fresh `id` and `timestamp`. Returns its id.
    ///
    /// # Panics
    ///
    /// If `message` is not a JSON object.
    pub fn whatsapp_message(&self, from: &str, message: Value) -> String {
        self.deliver(Inbound::whatsapp(from, message))
    }

    /// A Messenger user (PSID) sends a text; returns its `m_…` mid.
    pub fn messenger_text(&self, psid: &str, text: &str) -> String {
        self.deliver(Inbound::text(Channel::Messenger, psid, text))
    }

    /// An Instagram user (IGSID) sends a text; returns its mid.
    pub fn instagram_text(&self, igsid: &str, text: &str) -> String {
        self.deliver(Inbound::text(Channel::Instagram, igsid, text))
    }

    /// A user sends media: the bytes are [registered](Self::register_media) and delivered as
    /// [`Inbound::media`] of `kind` (`"image"`, `"audio"`, `"voice"`, `"video"`,
    /// `"document"`, `"sticker"`). Returns the message's id.
    pub fn send_media(
        &self,
        channel: Channel,
        user: &str,
        kind: &str,
        bytes: impl Into<Vec<u8>>,
        mime_type: &str,
        caption: Option<&str>,
    ) -> String {
        let media_id = self.register_media(bytes, mime_type);
        self.deliver(Inbound::media(channel, user, kind, &media_id, caption))
    }

    /// Stores bytes as media and returns the media id: `GET /{media_id}` describes them and
    /// their `url` serves them (with the token), for [`Inbound::media`] or messages built by
    /// hand.
    pub fn register_media(&self, bytes: impl Into<Vec<u8>>, mime_type: &str) -> String {
        let bytes = bytes.into();
        self.shared.update(|inner| inner.store_media(bytes, mime_type))
    }

    /// Puts a WhatsApp user outside the 24-hour customer service window, as if they last
    /// wrote more than a day ago: every send to them but a `template` is refused with code
    /// `131047` until they write again (or [`open_window`](Self::open_window)).
    pub fn outside_window(&self, wa_id: &str) {
        self.shared.update(|inner| inner.last_inbound.remove(wa_id));
    }

    /// Opens a WhatsApp user's customer service window, as if they had just written.
    pub fn open_window(&self, wa_id: &str) {
        self.shared.update(|inner| inner.last_inbound.insert(wa_id.to_owned(), Instant::now()));
    }
}

/// What a user's item changes besides the outbox: something they wrote opens WhatsApp's
/// window, names them as the author of a WhatsApp message, and marks them as known on the
/// channel.
fn note(inner: &mut Inner, item: &Inbound) {
    if !item.is_user_message() {
        return;
    }
    inner.wrote.insert((item.channel, item.user.clone()));
    if item.channel == Channel::WhatsApp {
        inner.last_inbound.insert(item.user.clone(), Instant::now());
        inner.authors.insert(item.id.clone(), item.user.clone());
    }
}

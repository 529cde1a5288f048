//! What a replica writes down in its history, as the bot and its transports go.

use std::sync::Arc;

use botmesh_chaos::record::{
    History, Record, Reply, chat_of_key, now_ns, parse_chat_id, parse_message_id,
};
use botmesh_core::Event;

/// What the bot's handlers need to write their history.
#[derive(Clone)]
pub(crate) struct Log {
    pub(crate) history: Arc<History>,
    pub(crate) replica: String,
}

impl Log {
    /// Writes down what the bot reported about a chat, when it is worth reading afterwards.
    pub(crate) fn note(&self, event: &Event) {
        let key = match event {
            Event::TakenOver { key, .. }
            | Event::Duplicate { key, .. }
            | Event::LeaseLost { key, .. } => Some(key.to_string()),
            Event::SendSkipped { chat, .. } => Some(chat.to_string()),
            Event::Error { key, .. } => key.as_ref().map(ToString::to_string),
            _ => return,
        };
        let chat = key.as_deref().and_then(chat_of_key);
        self.history.write(&Record::Note {
            chat,
            replica: self.replica.clone(),
            text: format!("{event:?}"),
            t: now_ns(),
        });
    }

    /// Writes down that the reply with `text` to `chat` is handed to the HTTP client now.
    pub(crate) fn sending(&self, chat: &str, text: &str) {
        let (Some(chat), Some(reply)) = (parse_chat_id(chat), Reply::parse(text)) else {
            return;
        };
        self.history.write(&Record::Sending {
            chat,
            seq: reply.seq,
            kind: reply.kind,
            fence: reply.fence,
            replica: self.replica.clone(),
            t: now_ns(),
        });
    }

    /// Writes down that delivery `seq` of `chat` was taken, at `t`.
    pub(crate) fn accepted(&self, chat: u32, seq: u32, t: u64) {
        self.history.write(&Record::Accepted { chat, seq, replica: self.replica.clone(), t });
    }

    /// Writes down that message `id` was taken as `kind` under `fence`, and returns its number.
    pub(crate) fn handled(&self, id: &str, kind: &str, fence: Option<u64>) -> Option<u32> {
        let (chat, seq) = parse_message_id(id)?;
        self.history.write(&Record::Handled {
            chat,
            seq,
            kind: kind.to_owned(),
            replica: self.replica.clone(),
            fence: fence.unwrap_or(0),
            t: now_ns(),
        });
        Some(seq)
    }
}

//! Acknowledged inbound: how a webhook provider hands a message to the bot and learns whether
//! it may answer its platform `200`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{Inbound, Store};

/// What became of a message handed in through an [`Intake`], and so what the provider answers
/// the platform that delivered it.
///
/// A platform that retries (Telegram webhooks, Meta, an e-mail ingest service) must get its
/// `200` only once the message is safe here: then a crash after the answer loses nothing, and a
/// crash before it is covered by the platform's retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Taken: queued on its chat (journaled, with durability, and holding its place in the
    /// chat's queue, under coordination). Answer `200`.
    Queued,
    /// Seen before and taken then: answer `200` so the platform stops delivering it.
    Duplicate,
    /// Not taken, through no fault of the message: the journal or the chat's queue could not
    /// be written, this replica's leases lapsed, or the bot is not running. Answer `503` so
    /// the platform delivers it again, to this replica or another.
    Unavailable,
    /// Larger than the bot accepts. Answer `413`; delivering it again does not help.
    TooLarge,
    /// Not a message the bot can take (it names no chat, say). Answer `400`.
    Invalid,
}

impl Verdict {
    /// The HTTP status a webhook answers with: `200`, `200`, `503`, `413` or `400`.
    pub const fn status(self) -> u16 {
        match self {
            Self::Queued | Self::Duplicate => 200,
            Self::Unavailable => 503,
            Self::TooLarge => 413,
            Self::Invalid => 400,
        }
    }

    /// Whether the platform may forget the message: it was taken now or before.
    pub const fn is_taken(self) -> bool {
        matches!(self, Self::Queued | Self::Duplicate)
    }

    /// The verdict as a short lowercase word, as it appears in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Duplicate => "duplicate",
            Self::Unavailable => "unavailable",
            Self::TooLarge => "too_large",
            Self::Invalid => "invalid",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What takes messages in on the bot's side of an [`Intake`]. The bot implements it; a
/// provider only ever holds an [`Intake`].
#[async_trait]
pub trait Admit: Send + Sync + 'static {
    /// Queues `message` and answers once its sender may acknowledge it, or why not.
    async fn admit(&self, message: Inbound) -> Verdict;

    /// Whether the transport may still act here (see [`Intake::holds_transport`]). `true`
    /// unless the implementation knows better.
    fn holds_transport(&self) -> bool {
        true
    }
}

/// The handle through which a provider hands messages to the bot and waits for the
/// [`Verdict`] to answer its platform with.
///
/// The bot gives one to [`Provider::start`](crate::Provider::start). Cheap to clone; a
/// webhook handler keeps a clone. Messages a provider yields on its inbound stream instead
/// (polling loops, gateways) need no acknowledgement and keep working as they are.
#[derive(Clone)]
pub struct Intake {
    provider: Arc<str>,
    admit: Arc<dyn Admit>,
    store: Option<Arc<dyn Store>>,
}

impl fmt::Debug for Intake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intake").field("provider", &self.provider).finish_non_exhaustive()
    }
}

impl Intake {
    /// An intake for provider `provider` that hands messages to `admit`.
    pub fn new(provider: impl Into<Arc<str>>, admit: Arc<dyn Admit>) -> Self {
        Self { provider: provider.into(), admit, store: None }
    }

    /// Lends the provider the bot's store (see [`Intake::store`]).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The bot's store, shared by its replicas, for what a provider keeps across them: a
    /// poller's offset, so that the replica that takes an exclusive transport over resumes
    /// where the last one stopped. Keep such rows under keys that start with
    /// `botmesh:provider:<id>:`. `None` outside a bot.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.store.as_ref()
    }

    /// An intake that takes nothing: every message is answered [`Verdict::Unavailable`].
    /// For running a provider outside a bot, as its conformance tests do.
    pub fn closed(provider: impl Into<Arc<str>>) -> Self {
        struct Closed;
        #[async_trait]
        impl Admit for Closed {
            async fn admit(&self, _: Inbound) -> Verdict {
                Verdict::Unavailable
            }

            fn holds_transport(&self) -> bool {
                false
            }
        }
        Self::new(provider, Arc::new(Closed))
    }

    /// The id of the provider this intake belongs to.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Whether the transport may still act on its platform session from here: `false` once
    /// it was moved to another replica, once this replica's leases lapsed (a long pause, a lost
    /// backend: another replica may have taken the transport over), or once it stopped here.
    /// A provider whose platform allows one session at a time (a poller, a gateway) asks right
    /// before each request it makes on the session, and makes none while it is `false`: the
    /// bot stops the transport soon after. Answered from memory, without a round trip.
    pub fn holds_transport(&self) -> bool {
        self.admit.holds_transport()
    }

    /// Hands `message` to the bot and waits until it is safe here, or refused. The message is
    /// stamped with this intake's provider id, so that its chat key and its replies belong to
    /// the provider that received it.
    pub async fn accept(&self, mut message: Inbound) -> Verdict {
        if *message.provider != *self.provider {
            message.provider = self.provider.to_string();
        }
        self.admit.admit(message).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<Inbound>>);

    #[async_trait]
    impl Admit for Seen {
        async fn admit(&self, message: Inbound) -> Verdict {
            let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let verdict = match seen.iter().any(|m| m.id == message.id) {
                true => Verdict::Duplicate,
                false => Verdict::Queued,
            };
            seen.push(message);
            verdict
        }
    }

    #[tokio::test]
    async fn an_intake_stamps_its_provider_and_passes_the_verdict_on() {
        let seen = Arc::new(Seen::default());
        let intake = Intake::new("tg", Arc::clone(&seen) as Arc<dyn Admit>);
        assert_eq!(intake.accept(Inbound::text("other", "1", "c", "hi")).await, Verdict::Queued);
        assert_eq!(intake.accept(Inbound::text("tg", "1", "c", "hi")).await, Verdict::Duplicate);
        let seen = seen.0.lock().unwrap();
        assert!(seen.iter().all(|m| m.provider == "tg"));
    }

    #[tokio::test]
    async fn a_closed_intake_asks_for_the_message_again() {
        let verdict = Intake::closed("tg").accept(Inbound::text("tg", "1", "c", "hi")).await;
        assert_eq!(
            (verdict, verdict.status(), verdict.is_taken()),
            (Verdict::Unavailable, 503, false)
        );
    }

    #[test]
    fn each_verdict_maps_to_the_status_its_platform_understands() {
        let statuses: Vec<u16> = [
            Verdict::Queued,
            Verdict::Duplicate,
            Verdict::Unavailable,
            Verdict::TooLarge,
            Verdict::Invalid,
        ]
        .map(Verdict::status)
        .to_vec();
        assert_eq!(statuses, [200, 200, 503, 413, 400]);
    }
}

//! The bot's providers: which one a send goes out through, and which transports this process
//! runs now.

use std::sync::{Arc, Mutex};

use botmesh_traits::{Error, Provider};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::catch_up::CatchUp;

/// One provider of the bot and whether this process runs its transport.
pub(crate) struct Transport {
    pub(crate) provider: Arc<dyn Provider>,
    /// The provider's id, read once.
    pub(crate) id: Arc<str>,
    /// Whether its platform never delivers a refused message again, read once (see
    /// [`Capabilities::delivers_once`](botmesh_traits::Capabilities)).
    pub(crate) delivers_once: bool,
    /// Its position in [`Providers`], and in the `up` list.
    index: usize,
    /// Serializes starting and stopping this transport, so a stop never overtakes the start it
    /// follows; other transports start and stop meanwhile.
    pub(crate) serial: tokio::sync::Mutex<()>,
    /// The task reading its inbound stream while it runs here, and how a stop asks it to
    /// catch up (see `transport.rs`).
    pub(crate) reader: Mutex<Option<(JoinHandle<()>, Arc<CatchUp>)>>,
}

/// The providers of a bot, in the order they were added; ids are unique.
pub(crate) struct Providers {
    list: Vec<Transport>,
    /// Per provider, in order: whether this process runs its transport now.
    up: watch::Sender<Vec<bool>>,
}

impl Providers {
    /// The providers, or the id two of them share.
    pub(crate) fn new(providers: Vec<Arc<dyn Provider>>) -> Result<Self, String> {
        let mut list: Vec<Transport> = Vec::with_capacity(providers.len());
        for (index, provider) in providers.into_iter().enumerate() {
            let id: Arc<str> = Arc::from(provider.id());
            if list.iter().any(|t| t.id == id) {
                return Err(id.to_string());
            }
            list.push(Transport {
                delivers_once: provider.capabilities().delivers_once,
                provider,
                id,
                index,
                serial: tokio::sync::Mutex::new(()),
                reader: Mutex::new(None),
            });
        }
        let up = watch::channel(vec![false; list.len()]).0;
        Ok(Self { list, up })
    }

    /// Every provider, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Transport> {
        self.list.iter()
    }

    /// The provider `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Transport> {
        self.list.iter().find(|t| &*t.id == id)
    }

    /// The provider a send goes out through: the one it names, else `fallback` (the provider
    /// of the chat it answers; a message handed to [`Bot::accept`](crate::Bot::accept) may name
    /// one the bot does not have), else the bot's only provider.
    pub(crate) fn route(
        &self,
        named: Option<&str>,
        fallback: Option<&str>,
    ) -> Result<&Transport, Error> {
        let missing = |id: &str| Error::NoSuchProvider { provider: id.to_owned() };
        if let Some(id) = named {
            return self.get(id).ok_or_else(|| missing(id));
        }
        if let Some(found) = fallback.and_then(|id| self.get(id)) {
            return Ok(found);
        }
        match self.list.as_slice() {
            [only] => Ok(only),
            _ => Err(missing(fallback.unwrap_or_default())),
        }
    }

    /// Whether this process runs `transport` now.
    pub(crate) fn is_up(&self, transport: &Transport) -> bool {
        self.up.borrow().get(transport.index).copied().unwrap_or(false)
    }

    /// Whether a message journaled under `journal_id` (its provider's id, a colon, its own
    /// id: see `durable::journal_id`) came through an exclusive transport that another replica
    /// runs now: only that replica can answer it. The longest matching provider id decides,
    /// since ids may hold colons themselves.
    pub(crate) fn led_elsewhere(&self, journal_id: &str) -> bool {
        let names = |t: &&Transport| {
            journal_id.strip_prefix(&*t.id).is_some_and(|rest| rest.starts_with(':'))
        };
        self.list
            .iter()
            .filter(names)
            .max_by_key(|t| t.id.len())
            .is_some_and(|t| t.provider.capabilities().exclusive_session && !self.is_up(t))
    }

    /// Whether this process runs any transport now.
    pub(crate) fn any_up(&self) -> bool {
        self.up.borrow().iter().any(|up| *up)
    }

    /// Records whether this process runs `transport`.
    pub(crate) fn set_up(&self, transport: &Transport, up: bool) {
        self.up.send_if_modified(|list| match list.get_mut(transport.index) {
            Some(slot) if *slot != up => {
                *slot = up;
                true
            }
            _ => false,
        });
    }

    /// Waits until this process runs a transport: any of them, or provider `id`'s.
    pub(crate) async fn wait_up(&self, id: Option<&str>) {
        let index = match id {
            Some(id) => match self.get(id) {
                Some(t) => Some(t.index),
                // No such provider: it never comes up.
                None => return std::future::pending().await,
            },
            None => None,
        };
        let mut rx = self.up.subscribe();
        let _ = rx
            .wait_for(|list| match index {
                Some(i) => list.get(i).copied().unwrap_or(false),
                None => list.iter().any(|up| *up),
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use botmesh_traits::{
        Capabilities, InboundStream, Intake, Outbound, Result, SendReceipt, TransportStatus,
        async_trait,
    };

    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl Provider for Named {
        fn id(&self) -> &str {
            self.0
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::shared()
        }
        async fn start(&self, _: Intake) -> Result<InboundStream> {
            Err(Error::Unsupported { op: "start" })
        }
        async fn stop(&self) -> Result<()> {
            Ok(())
        }
        async fn send(&self, _: &Outbound) -> Result<SendReceipt> {
            Ok(SendReceipt::new(None))
        }
        fn status(&self) -> TransportStatus {
            TransportStatus::Closed
        }
    }

    fn providers(ids: &[&'static str]) -> Providers {
        let list = ids.iter().map(|id| Arc::new(Named(id)) as Arc<dyn Provider>).collect();
        Providers::new(list).unwrap()
    }

    #[test]
    fn a_send_goes_through_the_provider_it_names_else_its_chat_s_else_the_only_one() {
        let one = providers(&["tg"]);
        assert_eq!(&*one.route(None, None).unwrap().id, "tg");
        let two = providers(&["tg", "mail"]);
        assert_eq!(&*two.route(Some("mail"), Some("tg")).unwrap().id, "mail");
        assert_eq!(&*two.route(None, Some("mail")).unwrap().id, "mail");
        let ambiguous = two.route(None, None).err().unwrap();
        assert!(matches!(ambiguous, Error::NoSuchProvider { provider } if provider.is_empty()));
        assert!(matches!(two.route(Some("wa"), None), Err(Error::NoSuchProvider { .. })));
        // A message handed in under an id the bot does not know answers through its only one.
        assert_eq!(&*one.route(None, Some("webhook")).unwrap().id, "tg");
        assert!(two.route(None, Some("webhook")).is_err());
    }

    #[test]
    fn two_providers_with_one_id_are_refused() {
        let list = vec![Arc::new(Named("tg")) as Arc<dyn Provider>, Arc::new(Named("tg"))];
        assert_eq!(Providers::new(list).err().as_deref(), Some("tg"));
    }

    #[test]
    fn each_transport_is_up_on_its_own() {
        let two = providers(&["tg", "mail"]);
        let mail = two.get("mail").unwrap();
        two.set_up(mail, true);
        assert!(two.is_up(mail) && two.any_up());
        assert!(!two.is_up(two.get("tg").unwrap()));
    }
}

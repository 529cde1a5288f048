//! What the phone network holds: the bot number's linked devices, the session connected now,
//! the offline queue of messages not yet acknowledged, and everything a test reads back.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use botmesh_traits::Bytes;
use botmesh_whatsapp_web::seam::{WaEvent, WaIncoming, WaOutgoing};
use tokio::sync::{Notify, mpsc};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code that can panic runs under this lock.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A message the bot sent, as the network recorded it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SentMessage {
    /// The stanza id the network gave it.
    pub id: String,
    /// The message.
    pub message: WaOutgoing,
}

/// An open session, connected or not.
pub(crate) struct Session {
    pub(crate) place: super::session::Place,
    pub(crate) tx: mpsc::UnboundedSender<WaEvent>,
}

/// The session connected now: the one WhatsApp delivers to.
pub(crate) struct Live {
    pub(crate) serial: u64,
    pub(crate) device: String,
    pub(crate) tx: mpsc::UnboundedSender<WaEvent>,
    pub(crate) wake: Arc<Notify>,
    /// A batch was refused: nothing more is delivered until the session connects again.
    pub(crate) blocked: bool,
}

/// Everything the network holds.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) next: u64,
    pub(crate) auto_link: bool,
    pub(crate) linked: HashSet<String>,
    pub(crate) sessions: HashMap<u64, Session>,
    pub(crate) live: Option<Live>,
    /// The session showing pairing codes, waiting to be linked.
    pub(crate) waiting: Option<u64>,
    pub(crate) opened: usize,
    /// Open sessions per place they keep their device in (a directory, or a store prefix).
    pub(crate) openers: HashMap<String, usize>,
    pub(crate) max_openers: HashMap<String, usize>,
    pub(crate) codes_shown: usize,
    pub(crate) pending: VecDeque<WaIncoming>,
    pub(crate) acknowledged: Vec<String>,
    pub(crate) deliveries: usize,
    pub(crate) refusals: usize,
    pub(crate) sent: Vec<SentMessage>,
    pub(crate) media: HashMap<String, Bytes>,
    pub(crate) throttle: Option<Duration>,
}

impl State {
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

//! What the provider tells its operator: pairing codes, the session's fate, status updates.
//!
//! These are the provider's own events, beside the bot's: a handler given to
//! [`WhatsAppWebProvider::on_event`](crate::WhatsAppWebProvider::on_event) sees each one. A QR
//! code also goes to the QR handler, which prints it to the terminal unless replaced
//! ([`WhatsAppWebProvider::on_qr`](crate::WhatsAppWebProvider::on_qr)). A logged-out session
//! is reported to the bot as well, as an error event telling the operator to pair again.

use std::fmt;
use std::sync::Arc;

use botmesh_traits::Content;

/// Something the WhatsApp Web session went through.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WhatsAppEvent {
    /// The session is not linked: show this QR code to the phone (WhatsApp > Linked devices >
    /// Link a device). Codes rotate until one is scanned.
    Qr {
        /// The QR payload.
        code: String,
    },
    /// The session is not linked: type this code on the phone (Link with phone number).
    PairCode {
        /// The code.
        code: String,
    },
    /// The phone linked the session.
    Paired {
        /// The bot's own JID.
        me: String,
    },
    /// Connected: messages flow.
    Connected,
    /// WhatsApp logged the linked device out. The session is over: pair the device again
    /// (remove the session, restart, scan the new QR code).
    LoggedOut {
        /// Why, as WhatsApp said.
        reason: String,
    },
    /// Another client opened the same session and WhatsApp closed this one.
    Replaced,
    /// The connection dropped and the client gave up reconnecting.
    GaveUp,
    /// A contact posted a status update. Status updates are events, never messages: they wake
    /// no conversation.
    Status {
        /// Its message id.
        id: String,
        /// The poster's JID.
        from: String,
        /// The poster's push name.
        sender_name: Option<String>,
        /// What it shows.
        content: Content,
    },
}

pub(crate) type Handler = Arc<dyn Fn(&WhatsAppEvent) + Send + Sync>;
pub(crate) type QrHandler = Arc<dyn Fn(&str) + Send + Sync>;

/// Who hears the provider's events.
#[derive(Clone)]
pub(crate) struct Listeners {
    pub(crate) events: Vec<Handler>,
    pub(crate) qr: QrHandler,
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listeners").field("events", &self.events.len()).finish_non_exhaustive()
    }
}

impl Default for Listeners {
    fn default() -> Self {
        Self { events: Vec::new(), qr: Arc::new(print_qr) }
    }
}

impl Listeners {
    pub(crate) fn emit(&self, provider: &str, event: &WhatsAppEvent) {
        match event {
            WhatsAppEvent::Qr { code } => (self.qr)(code),
            WhatsAppEvent::PairCode { code } => {
                tracing::warn!(target: "botmesh", provider, code, "type this pairing code on the phone: WhatsApp > Linked devices > Link with phone number");
            }
            WhatsAppEvent::LoggedOut { reason } => {
                tracing::error!(target: "botmesh", provider, reason, "the WhatsApp Web session was logged out; pair the device again");
            }
            _ => tracing::debug!(target: "botmesh", provider, ?event, "whatsapp web"),
        }
        for handler in &self.events {
            handler(event);
        }
    }
}

/// The default QR handler: draws the code in the terminal, with how to use it and its
/// payload.
fn print_qr(code: &str) {
    use std::io::Write;
    let drawn = draw_qr(code).unwrap_or_default();
    let mut err = std::io::stderr().lock();
    // Best effort: a terminal that cannot be written to has nobody to scan the code anyway.
    let _ = writeln!(
        err,
        "WhatsApp Web: link this bot (WhatsApp > Linked devices > Link a device) by scanning this QR code:\n{drawn}\nits payload: {code}"
    );
}

/// QR code `payload` drawn with Unicode half blocks (two rows of modules per line of text),
/// light on dark as a terminal shows it, with its quiet zone; `None` when the payload is too
/// long for a QR code. What the default QR handler prints; a handler of its own
/// ([`WhatsAppWebProvider::on_qr`](crate::WhatsAppWebProvider::on_qr)) may use it too.
pub fn draw_qr(payload: &str) -> Option<String> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(payload.as_bytes()).ok()?;
    Some(
        code.render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qr_code_is_drawn_in_half_blocks_two_modules_rows_per_line() {
        // The shape of a WhatsApp Web payload: ref, noise key, identity key, secret.
        let payload = format!(
            "2@{},{},{},{}",
            "A".repeat(80),
            "B".repeat(44),
            "C".repeat(44),
            "D".repeat(24)
        );
        let drawn = draw_qr(&payload).unwrap_or_default();
        let lines: Vec<&str> = drawn.lines().collect();
        let width = lines.first().map_or(0, |l| l.chars().count());
        // A QR code of version v has 17 + 4v modules a side, and 4 of quiet zone each way.
        let modules = width - 8;
        assert!(modules >= 21 && (modules - 17).is_multiple_of(4), "{modules} modules a side");
        assert_eq!(lines.len(), width.div_ceil(2), "two rows of modules per line");
        assert!(lines.iter().all(|l| l.chars().count() == width), "a square");
        assert!(drawn.contains('▀') && drawn.contains('▄'), "drawn with half blocks");
        assert!(draw_qr(&"x".repeat(8000)).is_none(), "too long for a QR code");
    }
}

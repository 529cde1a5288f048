//! Sending: an outbound message as a mail, threaded under the mail it answers, through SMTP
//! (lettre, rustls only).
//!
//! Every mail gets a `Message-ID`, returned as the send's receipt id. When the bot gives the
//! send an idempotency key (its outbox key, with durability), the `Message-ID` is derived from
//! it, so a send repeated after a crash carries the same `Message-ID`. SMTP does not
//! deduplicate: the recipient gets both copies, and only some clients show them once.
//!
//! SMTP errors are typed: a temporary refusal (`4xx`) is `RateLimited` (the bot waits the
//! configured time and sends again), a mailbox that does not exist (`550`, `551`, `553`)
//! `RecipientGone`, a mail too large (`552`) `TooLarge`, a refused login `Unauthorized`, any
//! other permanent refusal `InvalidInput`; a server that cannot be reached is a retryable
//! provider error.

use botmesh_traits::{Error, MediaSource, Outbound, OutboundContent};
use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use sha2::{Digest, Sha256};

use crate::archive::Kept;
use crate::config::{Security, SmtpConfig};
use crate::parse::address_of;

/// An SMTP client and the sender it writes as.
pub(crate) struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    domain: String,
}

impl Smtp {
    /// A client for `config`; the reason when the configuration is wrong.
    pub(crate) fn new(config: &SmtpConfig) -> Result<Self, String> {
        let from: Mailbox = match &config.from_name {
            Some(name) => format!("{name} <{}>", config.from),
            None => config.from.clone(),
        }
        .parse()
        .map_err(|e| format!("the sender address {:?} is not valid: {e}", config.from))?;
        let domain = config.from.rsplit_once('@').map_or("botmesh.local", |(_, d)| d).to_owned();
        let builder = match config.security {
            Security::Plain => {
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(config.host.as_str())
            }
            Security::StartTls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&config.host)
                    .map_err(|e| format!("SMTP TLS settings for {}: {e}", config.host))?
            }
            Security::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&config.host)
                .map_err(|e| format!("SMTP TLS settings for {}: {e}", config.host))?,
        };
        let mut builder = builder.port(config.port).timeout(Some(config.timeout));
        if let Some((user, password)) = &config.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.to_string()));
        }
        Ok(Self { transport: builder.build(), from, domain })
    }

    /// The `Message-ID` of a send, without angle brackets.
    fn message_id(&self, message: &Outbound) -> String {
        let local = match &message.idempotency_key {
            Some(key) => {
                let hash = Sha256::digest(key.as_bytes());
                hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
            }
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        format!("{local}@{}", self.domain)
    }

    /// Sends `message`, answering `parent` when it is set; returns the `Message-ID`.
    pub(crate) async fn send(
        &self,
        provider: &str,
        config: &SmtpConfig,
        message: &Outbound,
        parent: Option<&Kept>,
    ) -> Result<String, Error> {
        let to_address = address_of(message.chat.as_str());
        let to: Mailbox = to_address.parse().map_err(|e| Error::InvalidInput {
            reason: format!("{to_address:?} is not an e-mail address: {e}"),
        })?;
        let id = self.message_id(message);
        let subject = match parent.and_then(|p| p.subject.as_deref()) {
            Some(s) => reply_subject(s),
            None => config.subject.clone(),
        };
        let mut builder = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .message_id(Some(format!("<{id}>")))
            .date_now();
        if let Some(parent) = parent {
            builder = builder.in_reply_to(format!("<{}>", parent.id));
            let chain: Vec<String> = parent
                .references
                .iter()
                .chain(std::iter::once(&parent.id))
                .map(|r| format!("<{r}>"))
                .collect();
            builder = builder.references(chain.join(" "));
        }
        let mail = body(builder, &message.content)?;
        match self.transport.send(mail).await {
            Ok(_) => Ok(id),
            Err(e) => Err(typed(provider, config, message.chat.as_str(), &e)),
        }
    }
}

/// The subject of a reply to a mail titled `subject`: `Re: subject`, unless it starts with
/// `Re:` already (any case). Compared on bytes: a subject is the sender's text, in any script,
/// and its third byte may fall inside a character.
fn reply_subject(subject: &str) -> String {
    let replied = subject.as_bytes().get(..3).is_some_and(|p| p.eq_ignore_ascii_case(b"re:"));
    if replied { subject.to_owned() } else { format!("Re: {subject}") }
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::InvalidInput { reason: format!("the mail could not be built: {e}") }
}

/// The mail's body for `content`.
fn body(
    builder: lettre::message::MessageBuilder,
    content: &OutboundContent,
) -> Result<Message, Error> {
    let text =
        |body: String| builder.clone().header(ContentType::TEXT_PLAIN).body(body).map_err(invalid);
    match content {
        OutboundContent::Text { body } => text(body.clone()),
        OutboundContent::Buttons { body, buttons } => {
            let mut out = body.clone();
            for (i, b) in buttons.iter().enumerate() {
                out.push_str(&format!("\n{}. {}", i + 1, b.title));
            }
            text(out)
        }
        OutboundContent::Location { latitude, longitude, name } => {
            let place = name.as_deref().map(|n| format!("{n}\n")).unwrap_or_default();
            text(format!("{place}https://www.openstreetmap.org/?mlat={latitude}&mlon={longitude}"))
        }
        OutboundContent::Media { source: MediaSource::Url { url }, caption, .. } => {
            let caption = caption.as_deref().map(|c| format!("{c}\n")).unwrap_or_default();
            text(format!("{caption}{url}"))
        }
        OutboundContent::Media {
            source: MediaSource::Bytes { data, file_name, mime },
            caption,
            ..
        } => {
            let kind = mime.as_deref().unwrap_or("application/octet-stream");
            let kind = ContentType::parse(kind).map_err(invalid)?;
            let name = file_name.clone().unwrap_or_else(|| "attachment".to_owned());
            let parts = MultiPart::mixed()
                .singlepart(SinglePart::plain(caption.clone().unwrap_or_default()))
                .singlepart(Attachment::new(name).body(data.to_vec(), kind));
            builder.multipart(parts).map_err(invalid)
        }
        OutboundContent::Template { .. } => Err(Error::Unsupported { op: "template" }),
        OutboundContent::Reaction { .. } => Err(Error::Unsupported { op: "reaction" }),
        _ => Err(Error::Unsupported { op: "this content" }),
    }
}

/// The typed error for an SMTP failure.
fn typed(
    provider: &str,
    config: &SmtpConfig,
    chat: &str,
    e: &lettre::transport::smtp::Error,
) -> Error {
    let code = e.status().map(u16::from);
    let refused =
        || Error::InvalidInput { reason: format!("the SMTP server refused the mail: {e}") };
    match code {
        Some(400..=499) => Error::RateLimited { retry_after: config.temporary_retry },
        Some(550 | 551 | 553) => {
            Error::RecipientGone { provider: provider.to_owned(), chat: chat.to_owned() }
        }
        Some(552) => Error::TooLarge { what: "the mail".to_owned(), size: 0, limit: 0 },
        Some(530 | 534 | 535) => Error::Unauthorized { provider: provider.to_owned() },
        Some(_) => refused(),
        None if e.is_permanent() => refused(),
        None => Error::provider(provider, "send", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_subject_takes_re_once_whatever_the_script() {
        assert_eq!(reply_subject("Привет"), "Re: Привет");
        assert_eq!(reply_subject("Été"), "Re: Été");
        assert_eq!(reply_subject("é"), "Re: é");
        assert_eq!(reply_subject("RE: Order"), "RE: Order");
        assert_eq!(reply_subject("re:Привет"), "re:Привет");
        assert_eq!(reply_subject(""), "Re: ");
    }
}

//! The settings of the two sides of a mailbox: IMAP in, SMTP out, and how mails make chats.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How a connection to a mail server is protected.
///
/// In a configuration file (`serde` feature): `"tls"`, `"starttls"` or `"plain"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Security {
    /// TLS from the first byte (IMAPS on 993, SMTPS on 465), certificates checked against the
    /// web's root certificates.
    Tls,
    /// SMTP only: plain, then `STARTTLS` before anything else (submission on 587).
    StartTls,
    /// No TLS: for a server on loopback or a private network only. Passwords cross in clear.
    Plain,
}

/// How mails are grouped into chats (each chat is one conversation, one queue).
///
/// In a configuration file (`serde` feature): `"correspondent"` or `"thread"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Threading {
    /// One chat per correspondent: the sender's address, lowercased. The default.
    #[default]
    Correspondent,
    /// One chat per thread: the sender's address and the first `Message-ID` of the mail's
    /// `References` (else its `In-Reply-To`, else its own `Message-ID`), as
    /// `address#root-id`. A correspondent with two threads has two conversations.
    Thread,
}

/// Where a mailbox with no recorded progress starts.
///
/// In a configuration file (`serde` feature): `"unseen"` or `"skip"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum Backlog {
    /// With the mails not flagged `\Seen`, oldest first. The default.
    #[default]
    Unseen,
    /// With the mails that arrive from now on; what the mailbox holds is left alone.
    Skip,
}

/// The IMAP side of [`EmailProvider::imap`](crate::EmailProvider::imap).
///
/// Built by value from [`ImapConfig::new`]. The password never appears in `Debug` output.
///
/// With the `serde` feature it reads from a configuration file: `host`, `user`, `password`,
/// and optionally each setter's name (`port`, `security`, `mailbox`, `idle_timeout`,
/// `poll_interval`, `down_after`, `max_backoff`, `command_timeout`, `stall_timeout`,
/// `max_mail_bytes`, `quarantine`, `backlog`), durations as text (`"10m"`); unknown keys are
/// refused. Extra root certificates are given in code.
#[derive(Clone)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(from = "text::ImapConfigText"))]
pub struct ImapConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) security: Security,
    pub(crate) user: String,
    pub(crate) password: Arc<str>,
    pub(crate) mailbox: String,
    pub(crate) idle_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) down_after: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) stall_timeout: Duration,
    pub(crate) max_mail_bytes: u32,
    pub(crate) quarantine: Option<String>,
    pub(crate) backlog: Backlog,
    /// Extra trusted roots (DER), besides the web's.
    pub(crate) roots: Vec<Vec<u8>>,
}

impl fmt::Debug for ImapConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImapConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("user", &self.user)
            .field("mailbox", &self.mailbox)
            .finish_non_exhaustive()
    }
}

impl ImapConfig {
    /// The mailbox of `user` on `host`, over TLS on port 993, reading `INBOX`.
    ///
    /// Defaults: IDLE renewed every 10 minutes (servers drop an IDLE after 30), a server that
    /// stops answering during IDLE noticed within 60 seconds, a poll every 30 seconds on
    /// servers without IDLE, reconnects backing off up to 30 seconds, the transport reported
    /// closed after 60 seconds without a connection, 30 seconds for each IMAP command, mails
    /// over 25 MiB not downloaded, malformed mails left in place (unseen), and a first start
    /// with the unseen mails.
    pub fn new(host: impl Into<String>, user: impl Into<String>, password: &str) -> Self {
        Self {
            host: host.into(),
            port: 993,
            security: Security::Tls,
            user: user.into(),
            password: Arc::from(password),
            mailbox: "INBOX".to_owned(),
            idle_timeout: Duration::from_secs(600),
            poll_interval: Duration::from_secs(30),
            down_after: Duration::from_secs(60),
            max_backoff: Duration::from_secs(30),
            command_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(60),
            max_mail_bytes: 25 * 1024 * 1024,
            quarantine: None,
            backlog: Backlog::Unseen,
            roots: Vec::new(),
        }
    }

    /// The port (993 by default).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// TLS ([`Security::Tls`], the default) or [`Security::Plain`] for a local server.
    /// `StartTls` is taken as `Tls`.
    #[must_use]
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// The mailbox (folder) to read, `INBOX` by default.
    #[must_use]
    pub fn mailbox(mut self, mailbox: impl Into<String>) -> Self {
        self.mailbox = mailbox.into();
        self
    }

    /// How long one IDLE waits before it is renewed (10 minutes by default). The session also
    /// leaves IDLE every half [`stall_timeout`](Self::stall_timeout) to check that the server
    /// answers, so a value above that half changes nothing.
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How often a server without IDLE is asked for new mail (30 seconds by default).
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long the connection may stay lost before the transport is reported closed, so
    /// that a leader steps down and a standby tries (60 seconds by default).
    #[must_use]
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// The longest pause between two reconnection attempts (30 seconds by default).
    #[must_use]
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// How long connecting, logging in and each IMAP command (`SELECT`, `SEARCH`, `FETCH`,
    /// `STORE`, `NOOP`, `LOGOUT`) may take (30 seconds by default). A command that takes
    /// longer counts as a lost connection: the session is dropped and made again, and a server
    /// that stays that way gets the transport reported closed after
    /// [`down_after`](Self::down_after). A server that stops answering during IDLE is noticed
    /// within [`stall_timeout`](Self::stall_timeout), and a dead network also by TCP keepalive
    /// (probes after 30 seconds of silence, the connection dropped after about a minute
    /// without an answer).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How soon a server that stops answering while the session waits in IDLE is noticed (60
    /// seconds by default): the session leaves IDLE every half of it (renewing it), and the
    /// server must answer within the other half (and within
    /// [`command_timeout`](Self::command_timeout)). One that does not counts as a lost
    /// connection: the session is made again. Each half is at least 100 ms.
    #[must_use]
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// The largest mail downloaded, in bytes (25 MiB by default). The size the server reports
    /// (`RFC822.SIZE`) is read first; a larger mail is not downloaded: it is reported as a
    /// `Rejected` event, left unseen (or moved to the [`quarantine`](Self::quarantine) folder)
    /// and the session goes on past it, as with a malformed mail.
    #[must_use]
    pub fn max_mail_bytes(mut self, bytes: u32) -> Self {
        self.max_mail_bytes = bytes;
        self
    }

    /// Moves malformed and too large mails to `folder` (which must exist) instead of leaving
    /// them unseen in the mailbox read.
    #[must_use]
    pub fn quarantine(mut self, folder: impl Into<Option<String>>) -> Self {
        self.quarantine = folder.into();
        self
    }

    /// Where a mailbox with no recorded progress starts ([`Backlog::Unseen`] by default).
    #[must_use]
    pub fn backlog(mut self, backlog: Backlog) -> Self {
        self.backlog = backlog;
        self
    }

    /// Also trusts the certificates of `pem` (a private CA's, say) when connecting with TLS.
    /// Fails with the reason when `pem` holds no certificate.
    pub fn root_certificates_pem(mut self, pem: &[u8]) -> Result<Self, String> {
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem)
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("not PEM certificates: {e}"))?;
        if certs.is_empty() {
            return Err("no certificate in the PEM".to_owned());
        }
        self.roots.extend(certs);
        Ok(self)
    }

    /// The mailbox read.
    pub fn get_mailbox(&self) -> &str {
        &self.mailbox
    }
}

/// The SMTP side: where replies are sent from.
///
/// Built by value from [`SmtpConfig::new`]. The password never appears in `Debug` output.
///
/// With the `serde` feature it reads from a configuration file: `host`, `from`, and
/// optionally `port`, `security`, `user` and `password` (together), `from_name`, `subject`,
/// `temporary_retry` and `timeout`, durations as text (`"30s"`); unknown keys are refused.
#[derive(Clone)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize), serde(try_from = "text::SmtpConfigText"))]
pub struct SmtpConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) security: Security,
    pub(crate) credentials: Option<(String, Arc<str>)>,
    pub(crate) from: String,
    pub(crate) from_name: Option<String>,
    pub(crate) subject: String,
    pub(crate) temporary_retry: Duration,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

impl SmtpConfig {
    /// Sends through `host` (submission with `STARTTLS` on port 587) as `from`.
    ///
    /// Defaults: no login, the subject `Message` when the bot writes first, a temporary
    /// refusal (`4xx`) waited out for 30 seconds before the bot sends again, 30 seconds per
    /// send.
    pub fn new(host: impl Into<String>, from: impl Into<String>) -> Self {
        Self {
            host: host.into(),
            port: 587,
            security: Security::StartTls,
            credentials: None,
            from: from.into(),
            from_name: None,
            subject: "Message".to_owned(),
            temporary_retry: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
        }
    }

    /// The port (587 by default).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// [`Security::StartTls`] (the default), [`Security::Tls`], or [`Security::Plain`] for a
    /// local relay.
    #[must_use]
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Logs in as `user` with `password`.
    #[must_use]
    pub fn credentials(mut self, user: impl Into<String>, password: &str) -> Self {
        self.credentials = Some((user.into(), Arc::from(password)));
        self
    }

    /// The display name of the sender (`Support <help@example.org>`).
    #[must_use]
    pub fn from_name(mut self, name: impl Into<String>) -> Self {
        self.from_name = Some(name.into());
        self
    }

    /// The subject of a mail that answers no mail (`Message` by default).
    #[must_use]
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = subject.into();
        self
    }

    /// How long the bot waits before sending again after a temporary refusal (a `4xx` reply:
    /// greylisting, a full queue), 30 seconds by default. SMTP says no more than "later".
    #[must_use]
    pub fn temporary_retry(mut self, wait: Duration) -> Self {
        self.temporary_retry = wait;
        self
    }

    /// How long one send may take (30 seconds by default).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The sender's address.
    pub fn get_from(&self) -> &str {
        &self.from
    }
}

/// The text forms [`ImapConfig`] and [`SmtpConfig`] read from (the `serde` feature): through
/// their builders, so the defaults stay those of their constructors.
#[cfg(feature = "serde")]
mod text {
    use std::time::Duration;

    use serde::Deserialize;

    use super::{Backlog, ImapConfig, Security, SmtpConfig};

    /// [`ImapConfig`] as a configuration file writes it.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct ImapConfigText {
        host: String,
        user: String,
        password: String,
        port: Option<u16>,
        security: Option<Security>,
        mailbox: Option<String>,
        #[serde(default, with = "humantime_serde")]
        idle_timeout: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        poll_interval: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        down_after: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        max_backoff: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        command_timeout: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        stall_timeout: Option<Duration>,
        max_mail_bytes: Option<u32>,
        quarantine: Option<String>,
        backlog: Option<Backlog>,
    }

    impl From<ImapConfigText> for ImapConfig {
        fn from(t: ImapConfigText) -> Self {
            let mut c = Self::new(t.host, t.user, &t.password);
            if let Some(v) = t.port {
                c = c.port(v);
            }
            if let Some(v) = t.security {
                c = c.security(v);
            }
            if let Some(v) = t.mailbox {
                c = c.mailbox(v);
            }
            if let Some(v) = t.idle_timeout {
                c = c.idle_timeout(v);
            }
            if let Some(v) = t.poll_interval {
                c = c.poll_interval(v);
            }
            if let Some(v) = t.down_after {
                c = c.down_after(v);
            }
            if let Some(v) = t.max_backoff {
                c = c.max_backoff(v);
            }
            if let Some(v) = t.command_timeout {
                c = c.command_timeout(v);
            }
            if let Some(v) = t.stall_timeout {
                c = c.stall_timeout(v);
            }
            if let Some(v) = t.max_mail_bytes {
                c = c.max_mail_bytes(v);
            }
            if let Some(v) = t.quarantine {
                c = c.quarantine(v);
            }
            if let Some(v) = t.backlog {
                c = c.backlog(v);
            }
            c
        }
    }

    /// [`SmtpConfig`] as a configuration file writes it: `user` and `password` together, or
    /// neither.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct SmtpConfigText {
        host: String,
        from: String,
        port: Option<u16>,
        security: Option<Security>,
        user: Option<String>,
        password: Option<String>,
        from_name: Option<String>,
        subject: Option<String>,
        #[serde(default, with = "humantime_serde")]
        temporary_retry: Option<Duration>,
        #[serde(default, with = "humantime_serde")]
        timeout: Option<Duration>,
    }

    impl TryFrom<SmtpConfigText> for SmtpConfig {
        type Error = &'static str;

        fn try_from(t: SmtpConfigText) -> Result<Self, Self::Error> {
            let mut c = Self::new(t.host, t.from);
            match (t.user, t.password) {
                (Some(user), Some(password)) => c = c.credentials(user, &password),
                (None, None) => {}
                _ => return Err("give the SMTP `user` and `password` together"),
            }
            if let Some(v) = t.port {
                c = c.port(v);
            }
            if let Some(v) = t.security {
                c = c.security(v);
            }
            if let Some(v) = t.from_name {
                c = c.from_name(v);
            }
            if let Some(v) = t.subject {
                c = c.subject(v);
            }
            if let Some(v) = t.temporary_retry {
                c = c.temporary_retry(v);
            }
            if let Some(v) = t.timeout {
                c = c.timeout(v);
            }
            Ok(c)
        }
    }
}

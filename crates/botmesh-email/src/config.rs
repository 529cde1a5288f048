//! The settings of the two sides of a mailbox: IMAP in, SMTP out, and how mails make chats.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How a connection to a mail server is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Clone)]
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
    /// Defaults: IDLE renewed every 10 minutes (servers drop an IDLE after 30), a poll every
    /// 30 seconds on servers without IDLE, reconnects backing off up to 30 seconds, the
    /// transport reported closed after 60 seconds without a connection, 30 seconds for each
    /// IMAP command, mails over 25 MiB not downloaded, malformed mails left in place (unseen),
    /// and a first start with the unseen mails.
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

    /// How long one IDLE waits before it is renewed (10 minutes by default).
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
    /// `STORE`, `NOOP`, leaving IDLE, `LOGOUT`) may take (30 seconds by default). A command
    /// that takes longer counts as a lost connection: the session is dropped and made again,
    /// and a server that stays that way gets the transport reported closed after
    /// [`down_after`](Self::down_after). A server that stops answering during IDLE is noticed
    /// when the IDLE is renewed ([`idle_timeout`](Self::idle_timeout)), and a dead network by
    /// TCP keepalive (probes after 30 seconds of silence, the connection dropped after about a
    /// minute without an answer).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
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
#[derive(Clone)]
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

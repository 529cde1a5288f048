//! Connecting and logging in: plain TCP or TLS (rustls with ring, the web's root
//! certificates).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_imap::{Client, Session};
use botmesh_traits::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::config::{ImapConfig, Security};

/// The byte stream under an IMAP session, and whether it ended.
///
/// `async-imap`'s `SELECT` takes the end of the stream for the end of its answer: over a closed
/// connection it succeeds, empty. So the stream remembers that it ended (or failed), and the
/// session asks after a `SELECT` (see [`closed`]). The other commands the session sends read
/// their tagged answer themselves (see `client.rs`).
pub(crate) struct Conn {
    stream: Stream,
    ended: AtomicBool,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    fn new(stream: Stream) -> Self {
        Self { stream, ended: AtomicBool::new(false) }
    }
}

/// Whether the connection under `session` ended or failed.
pub(crate) fn closed(session: &ImapSession) -> bool {
    session.get_ref().ended.load(Ordering::Relaxed)
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.stream {
            Stream::Plain(_) => "Conn::Plain",
            Stream::Tls(_) => "Conn::Tls",
        })
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let read = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        let ended = match &read {
            Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            this.ended.store(true, Ordering::Relaxed);
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        if matches!(written, Poll::Ready(Err(_))) {
            this.ended.store(true, Ordering::Relaxed);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A logged-in IMAP session.
pub(crate) type ImapSession = Session<Conn>;

/// TCP keepalive on the IMAP socket: the first probe after this long without traffic, ...
const KEEPALIVE_TIME: Duration = Duration::from_secs(30);
/// ... the next ones this far apart, ...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ... and the connection dropped after this many probes without an answer: a dead network or
/// peer under a session in IDLE is noticed in about a minute, not after hours.
const KEEPALIVE_RETRIES: u32 = 3;

/// Turns on TCP keepalive on `tcp` as the constants above say; `false` when the system
/// refused.
pub(crate) fn keepalive(tcp: &TcpStream) -> bool {
    let probes = socket2::TcpKeepalive::new().with_time(KEEPALIVE_TIME);
    #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
    let probes = probes.with_interval(KEEPALIVE_INTERVAL).with_retries(KEEPALIVE_RETRIES);
    socket2::SockRef::from(tcp).set_tcp_keepalive(&probes).is_ok()
}

fn tls(extra: &[Vec<u8>]) -> TlsConnector {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for der in extra {
        // Checked when the configuration was made; one the store refuses is left out.
        let _ = roots.add(CertificateDer::from(der.clone()));
    }
    let provider = Arc::new(ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth());
    match config {
        Ok(config) => TlsConnector::from(Arc::new(config)),
        // ring supports the default protocol versions; this branch is never taken.
        Err(_) => TlsConnector::from(Arc::new(
            ClientConfig::builder()
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        )),
    }
}

/// Connects and logs in as `config` says, each step within the configured command timeout. A refused login is [`Error::Unauthorized`]; anything
/// else (the server unreachable, a TLS failure) is [`Error::Provider`].
pub(crate) async fn login(provider: &str, config: &ImapConfig) -> Result<ImapSession, Error> {
    let failed =
        |e: Box<dyn std::error::Error + Send + Sync>| Error::provider(provider, "connect", e);
    let limit = config.command_timeout;
    let connected = tokio::time::timeout(limit, async {
        let tcp = TcpStream::connect((config.host.as_str(), config.port)).await?;
        let _ = tcp.set_nodelay(true);
        if !keepalive(&tcp) {
            tracing::debug!(target: "botmesh", provider, "TCP keepalive could not be set on the IMAP socket");
        }
        let conn = match config.security {
            Security::Plain => Conn::new(Stream::Plain(tcp)),
            Security::Tls | Security::StartTls => {
                let name = ServerName::try_from(config.host.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                Conn::new(Stream::Tls(Box::new(tls(&config.roots).connect(name, tcp).await?)))
            }
        };
        let mut client = Client::new(conn);
        // The server's greeting.
        client.read_response().await?;
        Ok::<_, io::Error>(client)
    })
    .await;
    let client = match connected {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(failed(Box::new(e))),
        Err(elapsed) => return Err(failed(Box::new(elapsed))),
    };
    let logged = tokio::time::timeout(limit, client.login(&config.user, &*config.password)).await;
    match logged {
        Ok(Ok(session)) => Ok(session),
        Ok(Err((async_imap::error::Error::No(_), _))) => {
            Err(Error::Unauthorized { provider: provider.to_owned() })
        }
        Ok(Err((e, _))) => Err(failed(Box::new(e))),
        Err(elapsed) => Err(failed(Box::new(elapsed))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_imap_socket_has_keepalive_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        assert!(keepalive(&tcp));
        let sock = socket2::SockRef::from(&tcp);
        assert!(sock.keepalive().unwrap());
        #[cfg(target_os = "linux")]
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE_TIME);
    }
}

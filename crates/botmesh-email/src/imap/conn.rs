//! Connecting and logging in: plain TCP or TLS (rustls with ring, the web's root
//! certificates).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
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

/// The byte stream under an IMAP session.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Plain(_) => "Conn::Plain",
            Self::Tls(_) => "Conn::Tls",
        })
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A logged-in IMAP session.
pub(crate) type ImapSession = Session<Conn>;

/// How long connecting and logging in may take.
const CONNECT: Duration = Duration::from_secs(20);

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

/// Connects and logs in as `config` says. A refused login is [`Error::Unauthorized`]; anything
/// else (the server unreachable, a TLS failure) is [`Error::Provider`].
pub(crate) async fn login(provider: &str, config: &ImapConfig) -> Result<ImapSession, Error> {
    let failed =
        |e: Box<dyn std::error::Error + Send + Sync>| Error::provider(provider, "connect", e);
    let connected = tokio::time::timeout(CONNECT, async {
        let tcp = TcpStream::connect((config.host.as_str(), config.port)).await?;
        let _ = tcp.set_nodelay(true);
        let conn = match config.security {
            Security::Plain => Conn::Plain(tcp),
            Security::Tls | Security::StartTls => {
                let name = ServerName::try_from(config.host.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                Conn::Tls(Box::new(tls(&config.roots).connect(name, tcp).await?))
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
    let logged = tokio::time::timeout(CONNECT, client.login(&config.user, &*config.password)).await;
    match logged {
        Ok(Ok(session)) => Ok(session),
        Ok(Err((async_imap::error::Error::No(_), _))) => {
            Err(Error::Unauthorized { provider: provider.to_owned() })
        }
        Ok(Err((e, _))) => Err(failed(Box::new(e))),
        Err(elapsed) => Err(failed(Box::new(elapsed))),
    }
}

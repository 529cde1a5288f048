//! Running a webhook's router until its provider stops.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;

/// Binds `addr` and serves `router` on it until `shutdown` resolves; see [`serve_on`].
///
/// Fails when the address cannot be bound (in use, not permitted).
pub async fn serve(
    router: Router,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_on(listener, router, shutdown).await
}

/// Serves `router` on an already bound `listener` until `shutdown` resolves, such as
/// [`IntakeSlot::closed`](super::IntakeSlot::closed).
///
/// Shutdown is graceful: no new connection is taken, idle ones are closed, and requests in
/// flight are answered before this returns. [`harden`](super::harden)'s timeout bounds how long
/// that takes.
pub async fn serve_on(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;
    use tokio::time::timeout;

    use super::*;
    use crate::Intake;
    use crate::webhook::IntakeSlot;

    /// Generous: each step takes milliseconds on a loopback socket; the bound only keeps a
    /// broken server from hanging the test run.
    const BOUND: Duration = Duration::from_secs(10);

    fn ping() -> Router {
        Router::new().route("/ping", get(|| async { "pong" }))
    }

    /// Sends `GET /ping` on a fresh connection and reads the whole answer.
    async fn get_ping(addr: SocketAddr) -> io::Result<String> {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /ping HTTP/1.1\r\nHost: botmesh\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    #[tokio::test]
    async fn serve_on_answers_until_its_shutdown_resolves() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve_on(listener, ping(), async move {
            let _ = stopped.await;
        }));

        let answer = timeout(BOUND, get_ping(addr)).await.unwrap().unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\npong"), "{answer}");
        assert!(!server.is_finished());

        stop.send(()).unwrap();
        timeout(BOUND, server).await.unwrap().unwrap().unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed");
    }

    #[tokio::test]
    async fn serve_stops_when_its_slot_is_closed() {
        let slot = IntakeSlot::new();
        slot.open(Intake::closed("tg"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_on(listener, ping(), slot.closed()));
        assert!(timeout(BOUND, get_ping(addr)).await.unwrap().unwrap().ends_with("pong"));

        slot.close();
        timeout(BOUND, server).await.unwrap().unwrap().unwrap();
    }

    #[tokio::test]
    async fn serve_fails_on_an_address_in_use() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let error = serve(ping(), addr, std::future::pending()).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
    }
}

//! The websocket gateway: `HELLO`, then the client's `IDENTIFY` or `RESUME`, heartbeats and
//! their acknowledgements, and the dispatches the test makes, each connection served by one
//! task that writes its frames in order.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use serde_json::json;
use tokio::sync::mpsc;

use super::state::{Frame, Shared};

/// Serves one gateway connection until either side closes it.
pub(crate) async fn serve(mut ws: WebSocket, shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let conn = shared.connect(tx);
    let interval = u64::try_from(shared.config.heartbeat.as_millis()).unwrap_or(u64::MAX);
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}, "s": null, "t": null});
    let stopped = shared.stopped();
    tokio::pin!(stopped);
    if ws.send(Message::Text(hello.to_string().into())).await.is_ok() {
        loop {
            tokio::select! {
                incoming = ws.recv() => match incoming {
                    Some(Ok(Message::Text(text))) => shared.on_frame(conn, text.as_str()),
                    Some(Ok(Message::Close(_))) => {
                        // The session ends when the client closes it; the close is answered
                        // after, so that the client sees its shutdown finish.
                        shared.disconnect(conn);
                        let _ = ws.send(Message::Close(None)).await;
                        break;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                },
                out = rx.recv() => match out {
                    Some(Frame::Text(text)) => {
                        if ws.send(Message::Text(text.into())).await.is_err() {
                            break;
                        }
                    }
                    Some(Frame::Close(code, reason)) => {
                        let frame = CloseFrame { code, reason: reason.into() };
                        let _ = ws.send(Message::Close(Some(frame))).await;
                        break;
                    }
                    None => break,
                },
                () = &mut stopped => break,
            }
        }
    }
    shared.disconnect(conn);
}

//! The harness's platform API as the replica's transports reach it: where replies go, each
//! written down as it is let go.

use botmesh_chaos::record::PlatformSend;
use botmesh_core::{Error, Outbound, SendReceipt};

use crate::log::Log;

/// The platform's address, the HTTP client, and the replica's history.
#[derive(Clone)]
pub(crate) struct Platform {
    pub(crate) url: String,
    pub(crate) client: reqwest::Client,
    pub(crate) log: Log,
}

impl Platform {
    /// The URL of the platform's endpoint `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.url)
    }

    /// Sends a reply through provider `provider`: written down as let go, then posted with its
    /// idempotency key, if any.
    pub(crate) async fn send(
        &self,
        provider: &'static str,
        message: &Outbound,
    ) -> botmesh_core::traits::Result<SendReceipt> {
        let body = PlatformSend {
            replica: self.log.replica.clone(),
            chat: message.chat.as_str().to_owned(),
            text: message.text_body().unwrap_or_default().to_owned(),
        };
        self.log.sending(&body.chat, &body.text);
        let mut request = self.client.post(self.url("send")).json(&body);
        if let Some(key) = &message.idempotency_key {
            request = request.header("idempotency-key", key);
        }
        request
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| Error::provider(provider, "send", e))?;
        Ok(SendReceipt::new(None))
    }
}

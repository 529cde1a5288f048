//! The linked device itself, and the secrets of the bot's messages that replies to them
//! (reactions, edits, poll votes) are decrypted with.

use std::sync::Arc;

use botmesh_traits::async_trait;
use serde::{Deserialize, Serialize};
use whatsapp_rust::wacore::client_profile::ClientProfile;
use whatsapp_rust::wacore::store::Device;
use whatsapp_rust::wacore::store::device::DEVICE_PROPS;
use whatsapp_rust::wacore::store::error::{Result, StoreError};
use whatsapp_rust::wacore::store::traits::{
    DeviceStore, MsgSecretEntry, MsgSecretStore, merge_msg_secret_expiry,
    merge_msg_secret_message_ts,
};

use super::StoreBackend;
use super::rows::{b64, id, unb64};

/// One row: the device, as JSON.
const DEVICE: &str = "device";
/// Per chat, sender and message (indexed by when it expires, if it does).
pub(super) const SECRET: &str = "secret";

/// A message secret as kept.
#[derive(Serialize, Deserialize)]
struct Secret {
    secret: String,
    expires_at: i64,
    message_ts: i64,
}

#[async_trait]
impl DeviceStore for StoreBackend {
    async fn save(&self, device: &Device) -> Result<()> {
        self.rows.put(DEVICE, "self", device).await
    }

    async fn load(&self) -> Result<Option<Device>> {
        let device: Option<Device> = self.rows.get(DEVICE, "self").await?;
        Ok(device.map(|mut device| {
            // What is not serialized is set at every start, as the library's own stores do.
            device.device_props = Arc::new(DEVICE_PROPS.clone());
            device.client_profile = ClientProfile::web();
            device
        }))
    }

    async fn exists(&self) -> Result<bool> {
        Ok(self.rows.get_text(DEVICE, "self").await?.is_some())
    }

    async fn create(&self) -> Result<i32> {
        // One device per session: created once, its id is always 1.
        if !self.exists().await? {
            self.save(&Device::new()).await?;
        }
        Ok(1)
    }

    async fn resource_report(&self) -> whatsapp_rust::wacore::stats::StorageResourceReport {
        whatsapp_rust::wacore::stats::StorageResourceReport::default()
    }
}

fn secret_id(chat: &str, sender: &str, msg_id: &str) -> String {
    id(&[chat, sender, msg_id])
}

#[async_trait]
impl MsgSecretStore for StoreBackend {
    async fn put_msg_secrets(&self, entries: Vec<MsgSecretEntry>) -> Result<usize> {
        let stored = entries.len();
        let _one = self.merge.lock().await;
        let mut rows = Vec::with_capacity(stored);
        let (mut indexed, mut unindexed) = (Vec::new(), Vec::new());
        for entry in entries {
            let key = secret_id(&entry.chat, &entry.sender, &entry.msg_id);
            let old: Option<Secret> = self.rows.get(SECRET, &key).await?;
            let was_indexed = old.as_ref().is_some_and(|old| old.expires_at != 0);
            let (expires_at, message_ts) = match old {
                Some(old) => (
                    merge_msg_secret_expiry(old.expires_at, entry.expires_at),
                    merge_msg_secret_message_ts(old.message_ts, entry.message_ts),
                ),
                None => (entry.expires_at, entry.message_ts),
            };
            // Only what a sweep deletes one day is indexed: a secret that never expires
            // would only make the index longer.
            if expires_at != 0 {
                indexed.push((key.clone(), expires_at));
            } else if was_indexed {
                unindexed.push(key.clone());
            }
            rows.push((key, Secret { secret: b64(&entry.secret), expires_at, message_ts }));
        }
        // The index first: a row is never left out of it, so the sweep finds every one.
        self.rows.index_add(SECRET, &indexed).await?;
        for (key, row) in &rows {
            self.rows.put(SECRET, key, row).await?;
        }
        self.rows.index_remove(SECRET, &unindexed).await?;
        Ok(stored)
    }

    async fn get_msg_secret(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(self.get_msg_secret_with_ts(chat, sender, msg_id).await?.map(|(secret, _)| secret))
    }

    async fn get_msg_secret_with_ts(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<(Vec<u8>, i64)>> {
        let row: Option<Secret> = self.rows.get(SECRET, &secret_id(chat, sender, msg_id)).await?;
        let Some(row) = row else { return Ok(None) };
        let secret = unb64(&row.secret)?;
        if secret.is_empty() {
            return Err(StoreError::Validation("an empty message secret".to_owned()));
        }
        Ok(Some((secret, row.message_ts)))
    }

    async fn delete_expired_msg_secrets(&self, cutoff_timestamp: i64) -> Result<u32> {
        let _one = self.merge.lock().await;
        self.rows
            .sweep(SECRET, |expires_at| expires_at != 0 && expires_at <= cutoff_timestamp)
            .await
    }
}

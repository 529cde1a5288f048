//! Signal's store: identities, sessions, pre-keys, signed pre-keys and sender keys.

use std::sync::Arc;

use botmesh_traits::{Bytes, async_trait};
use whatsapp_rust::wacore::store::error::{Result, StoreError};
use whatsapp_rust::wacore::store::traits::SignalStore;

use super::StoreBackend;

const IDENTITY: &str = "identity";
const SESSION: &str = "session";
const PREKEY: &str = "prekey";
/// One row: the highest pre-key id ever stored.
const PREKEY_MAX: &str = "prekey-max";
const SIGNED_PREKEY: &str = "signed-prekey";
const SENDER_KEY: &str = "sender-key";

impl StoreBackend {
    async fn raise_prekey_max(&self, id: u32) -> Result<()> {
        let _one = self.merge.lock().await;
        let max: Option<u32> = self.rows.get(PREKEY_MAX, "max").await?;
        if max.is_none_or(|max| id > max) {
            self.rows.put(PREKEY_MAX, "max", &id).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl SignalStore for StoreBackend {
    async fn put_identity(&self, address: &str, key: [u8; 32]) -> Result<()> {
        self.rows.put_bytes(IDENTITY, address, &key).await
    }

    async fn load_identity(&self, address: &str) -> Result<Option<[u8; 32]>> {
        let Some(bytes) = self.rows.get_bytes(IDENTITY, address).await? else { return Ok(None) };
        let key = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
            StoreError::Validation(format!("identity of {address} is not 32 bytes"))
        })?;
        Ok(Some(key))
    }

    async fn delete_identity(&self, address: &str) -> Result<()> {
        self.rows.delete(IDENTITY, address).await
    }

    async fn get_session(&self, address: &str) -> Result<Option<Bytes>> {
        Ok(self.rows.get_bytes(SESSION, address).await?.map(Bytes::from))
    }

    async fn put_session(&self, address: &str, session: &[u8]) -> Result<()> {
        self.rows.put_bytes(SESSION, address, session).await
    }

    async fn delete_session(&self, address: &str) -> Result<()> {
        self.rows.delete(SESSION, address).await
    }

    async fn store_prekey(&self, id: u32, record: &[u8], _uploaded: bool) -> Result<()> {
        self.rows.put_bytes(PREKEY, &id.to_string(), record).await?;
        self.raise_prekey_max(id).await
    }

    async fn store_prekeys_batch(&self, keys: &[(u32, Bytes)], _uploaded: bool) -> Result<()> {
        for (id, record) in keys {
            self.rows.put_bytes(PREKEY, &id.to_string(), record).await?;
        }
        match keys.iter().map(|(id, _)| *id).max() {
            Some(max) => self.raise_prekey_max(max).await,
            None => Ok(()),
        }
    }

    async fn load_prekey(&self, id: u32) -> Result<Option<Bytes>> {
        Ok(self.rows.get_bytes(PREKEY, &id.to_string()).await?.map(Bytes::from))
    }

    async fn mark_prekeys_uploaded(&self, _ids: &[u32]) -> Result<()> {
        // The upload flag is not kept (the device's watermark says what was uploaded); what
        // matters is never bringing a consumed key back, which doing nothing ensures.
        Ok(())
    }

    async fn remove_prekey(&self, id: u32) -> Result<()> {
        self.rows.delete(PREKEY, &id.to_string()).await
    }

    async fn get_max_prekey_id(&self) -> Result<u32> {
        // The highest id ever stored: never below the highest stored now, so ids are not
        // given out twice.
        Ok(self.rows.get(PREKEY_MAX, "max").await?.unwrap_or(0))
    }

    async fn store_signed_prekey(&self, id: u32, record: &[u8]) -> Result<()> {
        self.rows.index_add(SIGNED_PREKEY, &[(id.to_string(), 0)]).await?;
        self.rows.put_bytes(SIGNED_PREKEY, &id.to_string(), record).await
    }

    async fn load_signed_prekey(&self, id: u32) -> Result<Option<Vec<u8>>> {
        self.rows.get_bytes(SIGNED_PREKEY, &id.to_string()).await
    }

    async fn load_all_signed_prekeys(&self) -> Result<Vec<(u32, Vec<u8>)>> {
        let mut all = Vec::new();
        for key in self.rows.index(SIGNED_PREKEY).await?.into_keys() {
            let Ok(id) = key.parse::<u32>() else { continue };
            if let Some(record) = self.rows.get_bytes(SIGNED_PREKEY, &key).await? {
                all.push((id, record));
            }
        }
        Ok(all)
    }

    async fn remove_signed_prekey(&self, id: u32) -> Result<()> {
        self.rows.delete(SIGNED_PREKEY, &id.to_string()).await?;
        self.rows.index_remove(SIGNED_PREKEY, &[id.to_string()]).await
    }

    async fn put_sender_key(&self, address: &str, record: &[u8]) -> Result<()> {
        self.rows.put_bytes(SENDER_KEY, address, record).await
    }

    async fn put_sender_keys_batch(&self, sender_keys: &[(Arc<str>, Bytes)]) -> Result<()> {
        for (address, record) in sender_keys {
            self.rows.put_bytes(SENDER_KEY, address, record).await?;
        }
        Ok(())
    }

    async fn get_sender_key(&self, address: &str) -> Result<Option<Vec<u8>>> {
        self.rows.get_bytes(SENDER_KEY, address).await
    }

    async fn delete_sender_key(&self, address: &str) -> Result<()> {
        self.rows.delete(SENDER_KEY, address).await
    }
}

//! The protocol's tables: who has the bot's sender key in each group, LID and phone number
//! mappings, base keys, device lists, group metadata, trusted-contact tokens and sent
//! messages kept for retries, and the buffer of decrypted messages waiting for the bot.

use std::collections::BTreeMap;

use botmesh_traits::async_trait;
use serde::{Deserialize, Serialize};
use whatsapp_rust::wacore::store::error::Result;
use whatsapp_rust::wacore::store::traits::{
    DeviceListRecord, LidPnMappingEntry, PendingInboundKey, PendingInboundRow, ProtocolStore,
    TcTokenEntry,
};

use super::StoreBackend;
use super::rows::{b64, id, now_secs, unb64};

/// Per group (indexed): each device's JID and whether it has the sender key.
const SENDER_KEY_DEVICES: &str = "skd";
/// Per LID (indexed): its mapping.
const LID: &str = "lid";
/// Per phone number: its LID.
const PN: &str = "pn";
/// Per address and message: a session's base key.
pub(super) const BASE_KEY: &str = "base-key";
const DEVICES: &str = "devices";
const GROUP: &str = "group";
/// Per JID (indexed): its token.
const TC_TOKEN: &str = "tc";
/// Per chat and message (indexed by when it was sent).
pub(super) const SENT: &str = "sent";
/// Per chat, sender and message (indexed by when it was stored): decrypted messages waiting
/// for the bot.
pub(super) const PENDING: &str = "pending";

type Holders = BTreeMap<String, bool>;

/// A sent message kept for retries.
#[derive(Serialize, Deserialize)]
struct Sent {
    payload: String,
    at: i64,
}

#[async_trait]
impl ProtocolStore for StoreBackend {
    async fn get_sender_key_devices(&self, group_jid: &str) -> Result<Vec<(String, bool)>> {
        let holders: Option<Holders> = self.rows.get(SENDER_KEY_DEVICES, group_jid).await?;
        Ok(holders.unwrap_or_default().into_iter().collect())
    }

    async fn set_sender_key_status(&self, group_jid: &str, entries: &[(&str, bool)]) -> Result<()> {
        let _one = self.merge.lock().await;
        let mut holders: Holders =
            self.rows.get(SENDER_KEY_DEVICES, group_jid).await?.unwrap_or_default();
        for (device, has_key) in entries {
            holders.insert((*device).to_owned(), *has_key);
        }
        self.rows.index_add(SENDER_KEY_DEVICES, &[(group_jid.to_owned(), 0)]).await?;
        self.rows.put(SENDER_KEY_DEVICES, group_jid, &holders).await
    }

    async fn clear_sender_key_devices(&self, group_jid: &str) -> Result<()> {
        let _one = self.merge.lock().await;
        self.rows.delete(SENDER_KEY_DEVICES, group_jid).await?;
        self.rows.index_remove(SENDER_KEY_DEVICES, &[group_jid.to_owned()]).await
    }

    async fn delete_sender_key_device_rows(&self, device_jids: &[&str]) -> Result<()> {
        if device_jids.is_empty() {
            return Ok(());
        }
        let _one = self.merge.lock().await;
        for group in self.rows.index(SENDER_KEY_DEVICES).await?.into_keys() {
            let holders: Option<Holders> = self.rows.get(SENDER_KEY_DEVICES, &group).await?;
            let Some(mut holders) = holders else { continue };
            let before = holders.len();
            holders.retain(|jid, _| !device_jids.contains(&jid.as_str()));
            if holders.len() != before {
                self.rows.put(SENDER_KEY_DEVICES, &group, &holders).await?;
            }
        }
        Ok(())
    }

    async fn clear_all_sender_key_devices(&self) -> Result<()> {
        let _one = self.merge.lock().await;
        self.rows.sweep(SENDER_KEY_DEVICES, |_| true).await.map(|_| ())
    }

    async fn get_lid_mapping(&self, lid: &str) -> Result<Option<LidPnMappingEntry>> {
        self.rows.get(LID, lid).await
    }

    async fn get_pn_mapping(&self, phone: &str) -> Result<Option<LidPnMappingEntry>> {
        match self.rows.get_text(PN, phone).await? {
            Some(lid) => self.rows.get(LID, &lid).await,
            None => Ok(None),
        }
    }

    async fn put_lid_mapping(&self, entry: &LidPnMappingEntry) -> Result<()> {
        let _one = self.merge.lock().await;
        let old: Option<LidPnMappingEntry> = self.rows.get(LID, &entry.lid).await?;
        if let Some(old) = old.filter(|old| old.phone_number != entry.phone_number) {
            // The LID moved to another number: its old number no longer maps to it.
            if self.rows.get_text(PN, &old.phone_number).await?.as_deref() == Some(&entry.lid) {
                self.rows.delete(PN, &old.phone_number).await?;
            }
        }
        self.rows.index_add(LID, &[(entry.lid.clone(), 0)]).await?;
        self.rows.put(LID, &entry.lid, entry).await?;
        self.rows.put_text(PN, &entry.phone_number, entry.lid.clone()).await
    }

    async fn get_all_lid_mappings(&self) -> Result<Vec<LidPnMappingEntry>> {
        let mut all = Vec::new();
        for lid in self.rows.index(LID).await?.into_keys() {
            if let Some(entry) = self.rows.get(LID, &lid).await? {
                all.push(entry);
            }
        }
        Ok(all)
    }

    async fn save_base_key(&self, address: &str, message_id: &str, base_key: &[u8]) -> Result<()> {
        self.rows.put_bytes(BASE_KEY, &id(&[address, message_id]), base_key).await
    }

    async fn has_same_base_key(
        &self,
        address: &str,
        message_id: &str,
        current_base_key: &[u8],
    ) -> Result<bool> {
        let saved = self.rows.get_bytes(BASE_KEY, &id(&[address, message_id])).await?;
        Ok(saved.is_some_and(|saved| saved == current_base_key))
    }

    async fn delete_base_key(&self, address: &str, message_id: &str) -> Result<()> {
        self.rows.delete(BASE_KEY, &id(&[address, message_id])).await
    }

    async fn update_device_list(&self, record: DeviceListRecord) -> Result<()> {
        self.rows.put(DEVICES, &record.user, &record).await
    }

    async fn get_devices(&self, user: &str) -> Result<Option<DeviceListRecord>> {
        self.rows.get(DEVICES, user).await
    }

    async fn delete_devices(&self, user: &str) -> Result<()> {
        self.rows.delete(DEVICES, user).await
    }

    async fn get_group_metadata(&self, group_jid: &str) -> Result<Option<Vec<u8>>> {
        self.rows.get_bytes(GROUP, group_jid).await
    }

    async fn put_group_metadata(&self, group_jid: &str, blob: &[u8]) -> Result<()> {
        self.rows.put_bytes(GROUP, group_jid, blob).await
    }

    async fn delete_group_metadata(&self, group_jid: &str) -> Result<()> {
        self.rows.delete(GROUP, group_jid).await
    }

    async fn get_tc_token(&self, jid: &str) -> Result<Option<TcTokenEntry>> {
        self.rows.get(TC_TOKEN, jid).await
    }

    async fn put_tc_token(&self, jid: &str, entry: &TcTokenEntry) -> Result<()> {
        self.rows.index_add(TC_TOKEN, &[(jid.to_owned(), 0)]).await?;
        self.rows.put(TC_TOKEN, jid, entry).await
    }

    async fn delete_tc_token(&self, jid: &str) -> Result<()> {
        self.rows.delete(TC_TOKEN, jid).await?;
        self.rows.index_remove(TC_TOKEN, &[jid.to_owned()]).await
    }

    async fn get_all_tc_token_jids(&self) -> Result<Vec<String>> {
        Ok(self.rows.index(TC_TOKEN).await?.into_keys().collect())
    }

    async fn delete_expired_tc_tokens(&self, token_cutoff: i64, sender_cutoff: i64) -> Result<u32> {
        let mut gone = Vec::new();
        for jid in self.rows.index(TC_TOKEN).await?.into_keys() {
            let entry: Option<TcTokenEntry> = self.rows.get(TC_TOKEN, &jid).await?;
            let live = entry.is_some_and(|e| {
                let token_live = !e.token.is_empty() && e.token_timestamp >= token_cutoff;
                token_live || e.sender_timestamp.is_some_and(|ts| ts >= sender_cutoff)
            });
            if !live {
                self.rows.delete(TC_TOKEN, &jid).await?;
                gone.push(jid);
            }
        }
        self.rows.index_remove(TC_TOKEN, &gone).await?;
        Ok(u32::try_from(gone.len()).unwrap_or(u32::MAX))
    }

    async fn touch_tc_token_sender_timestamp(
        &self,
        jid: &str,
        sender_timestamp: i64,
    ) -> Result<()> {
        let _one = self.merge.lock().await;
        let entry = match self.rows.get::<TcTokenEntry>(TC_TOKEN, jid).await? {
            Some(mut e) => {
                e.sender_timestamp =
                    Some(e.sender_timestamp.map_or(sender_timestamp, |s| s.max(sender_timestamp)));
                e
            }
            None => TcTokenEntry {
                token: Vec::new(),
                token_timestamp: sender_timestamp,
                sender_timestamp: Some(sender_timestamp),
            },
        };
        self.put_tc_token(jid, &entry).await
    }

    async fn store_received_tc_token(
        &self,
        jid: &str,
        token: &[u8],
        token_timestamp: i64,
    ) -> Result<()> {
        let _one = self.merge.lock().await;
        let existing: Option<TcTokenEntry> = self.rows.get(TC_TOKEN, jid).await?;
        if existing
            .as_ref()
            .is_some_and(|e| !e.token.is_empty() && token_timestamp < e.token_timestamp)
        {
            // Newer wins: a stale token does not replace a fresher one.
            return Ok(());
        }
        let sender_timestamp = existing.and_then(|e| e.sender_timestamp);
        let entry = TcTokenEntry { token: token.to_vec(), token_timestamp, sender_timestamp };
        self.put_tc_token(jid, &entry).await
    }

    async fn store_sent_message(
        &self,
        chat_jid: &str,
        message_id: &str,
        payload: &[u8],
    ) -> Result<()> {
        let key = id(&[chat_jid, message_id]);
        let at = now_secs();
        // The index first: a row is never left out of it, so the sweep finds every one.
        self.rows.index_add(SENT, &[(key.clone(), at)]).await?;
        self.rows.put(SENT, &key, &Sent { payload: b64(payload), at }).await
    }

    async fn take_sent_message(&self, chat_jid: &str, message_id: &str) -> Result<Option<Vec<u8>>> {
        let key = id(&[chat_jid, message_id]);
        let _one = self.merge.lock().await;
        let Some(sent) = self.rows.get::<Sent>(SENT, &key).await? else { return Ok(None) };
        self.rows.delete(SENT, &key).await?;
        self.rows.index_remove(SENT, &[key]).await?;
        unb64(&sent.payload).map(Some)
    }

    async fn delete_expired_sent_messages(&self, cutoff_timestamp: i64) -> Result<u32> {
        self.rows.sweep(SENT, |at| at < cutoff_timestamp).await
    }

    async fn store_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        msg: &str,
        message: &[u8],
    ) -> Result<()> {
        let key = id(&[chat, sender, msg]);
        self.rows.index_add(PENDING, &[(key.clone(), now_secs())]).await?;
        self.rows.put_bytes(PENDING, &key, message).await
    }

    async fn get_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        msg: &str,
    ) -> Result<Option<Vec<u8>>> {
        self.rows.get_bytes(PENDING, &id(&[chat, sender, msg])).await
    }

    async fn delete_pending_inbound(&self, chat: &str, sender: &str, msg: &str) -> Result<()> {
        let key = id(&[chat, sender, msg]);
        self.rows.delete(PENDING, &key).await?;
        self.rows.index_remove(PENDING, &[key]).await
    }

    async fn delete_expired_pending_inbound(&self, cutoff_timestamp: i64) -> Result<u32> {
        self.rows.sweep(PENDING, |at| at < cutoff_timestamp).await
    }

    async fn store_pending_inbound_batch(&self, rows: &[PendingInboundRow<'_>]) -> Result<()> {
        // A row per message, one index write for the batch.
        let now = now_secs();
        let keys: Vec<(String, i64)> =
            rows.iter().map(|row| (id(&[row.chat, row.sender, row.id]), now)).collect();
        self.rows.index_add(PENDING, &keys).await?;
        for (row, (key, _)) in rows.iter().zip(&keys) {
            self.rows.put_bytes(PENDING, key, row.message).await?;
        }
        Ok(())
    }

    async fn delete_pending_inbound_batch(&self, keys: &[PendingInboundKey<'_>]) -> Result<()> {
        let mut gone = Vec::with_capacity(keys.len());
        for key in keys {
            let key = id(&[key.chat, key.sender, key.id]);
            self.rows.delete(PENDING, &key).await?;
            gone.push(key);
        }
        self.rows.index_remove(PENDING, &gone).await
    }
}

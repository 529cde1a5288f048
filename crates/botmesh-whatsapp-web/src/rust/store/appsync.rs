//! App-state sync: its keys, each collection's version, and the mutation MACs.

use botmesh_traits::async_trait;
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::error::Result;
use whatsapp_rust::wacore::store::traits::{AppStateSyncKey, AppSyncStore};

use super::StoreBackend;
use super::rows::{hex, unhex};

const SYNC_KEY: &str = "sync-key";
/// One row: the id of the sync key stored last, in hexadecimal.
const SYNC_KEY_LATEST: &str = "sync-key-latest";
const VERSION: &str = "version";

/// The table of a collection's mutation MACs, indexed by their index MAC.
fn macs(name: &str) -> String {
    format!("mac:{name}")
}

#[async_trait]
impl AppSyncStore for StoreBackend {
    async fn get_sync_key(&self, key_id: &[u8]) -> Result<Option<AppStateSyncKey>> {
        self.rows.get(SYNC_KEY, &hex(key_id)).await
    }

    async fn set_sync_key(&self, key_id: &[u8], key: AppStateSyncKey) -> Result<()> {
        self.rows.put(SYNC_KEY, &hex(key_id), &key).await?;
        self.rows.put_text(SYNC_KEY_LATEST, "id", hex(key_id)).await
    }

    async fn get_version(&self, name: &str) -> Result<HashState> {
        Ok(self.rows.get(VERSION, name).await?.unwrap_or_default())
    }

    async fn set_version(&self, name: &str, state: HashState) -> Result<()> {
        self.rows.put(VERSION, name, &state).await
    }

    async fn put_mutation_macs(
        &self,
        name: &str,
        _version: u64,
        mutations: &[AppStateMutationMAC],
    ) -> Result<()> {
        let table = macs(name);
        let ids: Vec<(String, i64)> = mutations.iter().map(|m| (hex(&m.index_mac), 0)).collect();
        // The index first: a row is never left out of it, so clearing finds every one.
        self.rows.index_add(&table, &ids).await?;
        for (m, (id, _)) in mutations.iter().zip(&ids) {
            self.rows.put_bytes(&table, id, &m.value_mac).await?;
        }
        Ok(())
    }

    async fn get_mutation_mac(&self, name: &str, index_mac: &[u8]) -> Result<Option<Vec<u8>>> {
        self.rows.get_bytes(&macs(name), &hex(index_mac)).await
    }

    async fn delete_mutation_macs(&self, name: &str, index_macs: &[Vec<u8>]) -> Result<()> {
        let table = macs(name);
        let ids: Vec<String> = index_macs.iter().map(|m| hex(m)).collect();
        for id in &ids {
            self.rows.delete(&table, id).await?;
        }
        self.rows.index_remove(&table, &ids).await
    }

    async fn clear_mutation_macs(&self, name: &str) -> Result<()> {
        self.rows.sweep(&macs(name), |_| true).await.map(|_| ())
    }

    async fn get_latest_sync_key_id(&self) -> Result<Option<Vec<u8>>> {
        let latest = self.rows.get_text(SYNC_KEY_LATEST, "id").await?;
        Ok(latest.and_then(|id| unhex(&id)))
    }
}

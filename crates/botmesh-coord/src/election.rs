//! The election of each exclusive transport: one campaign per provider, under
//! `provider:<id>`, spread over the replicas when several are free.
//!
//! A replica that leads no transport campaigns for a vacant one every `lease / 6`; one that
//! already leads another transport only every `lease / 3`, and never on its first pass. So when a transport falls vacant, a free replica usually wins it, and at
//! start a replica takes one transport at a time while others join; either way a vacant
//! transport is taken within `lease / 3` of its lease running out. Campaigns of one replica
//! take turns (`State::campaign`), so two of its loops never both count it as free.

use std::sync::Arc;
use std::time::Duration;

use botmesh_core::coordination::Host;
use botmesh_core::traits::{Leadership, TransportStatus};
use botmesh_core::{Event, FollowReason};
use tokio::time::Instant;

use crate::state::{State, lock};

/// Campaigns for `provider:<provider>` and runs its transport while elected.
pub(crate) async fn campaign(
    state: Arc<State>,
    host: Arc<dyn Host>,
    provider: String,
    provider_down: Duration,
    step_down_pause: Duration,
) {
    let name = format!("provider:{provider}");
    let period = state.lease / 3;
    let mut announced_standby = false;
    let mut down_since: Option<Instant> = None;
    let mut pass: u64 = 0;
    loop {
        if state.is_stopping() {
            return;
        }
        pass += 1;
        let unresigned = lock(&state.unresigned).remove(&provider);
        if let Some(lead) = unresigned {
            // Our leadership lives as long as our heartbeat: campaigning before the
            // resignation lands would only win it back.
            if state.coordinator.resign(&lead).await.is_err() {
                lock(&state.unresigned).insert(provider.clone(), lead);
                tokio::time::sleep(period).await;
                continue;
            }
        }
        let was_leading = lock(&state.leading).get(&provider).cloned();
        let turn = state.campaign.lock().await;
        // Busy: this replica leads another transport (its other campaigns wait for this turn).
        let busy = lock(&state.leading).keys().any(|p| *p != provider);
        if was_leading.is_none() && busy && pass % 2 == 1 {
            drop(turn);
            tokio::time::sleep(period / 2).await;
            continue;
        }
        let tried = state.coordinator.try_lead(&name, state.lease).await;
        match tried {
            Ok(Some(lead)) if !state.stalled() => {
                let fresh = was_leading.as_ref().is_none_or(|l| l.fence != lead.fence);
                if fresh {
                    lock(&state.leading).insert(provider.clone(), lead.clone());
                }
                drop(turn);
                if fresh {
                    state.emit(Event::Leader { name: name.clone(), fence: lead.fence });
                    announced_standby = false;
                    down_since = None;
                    let serial = state.transport_lock(&provider);
                    let _serial = serial.lock().await;
                    // Given up meanwhile (a stall): its stop ran or waits behind this lock.
                    if state.leads(&provider, &lead)
                        && let Err(e) = host.start_transport(&provider).await
                    {
                        tracing::warn!(target: "botmesh", provider, error = %e, "starting the transport failed");
                    }
                }
                if host.transport_status(&provider) == TransportStatus::Closed {
                    let since = *down_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= provider_down {
                        step_down(&state, &host, &provider, &lead, FollowReason::ProviderDown)
                            .await;
                        down_since = None;
                        tokio::time::sleep(step_down_pause).await;
                        continue;
                    }
                } else {
                    down_since = None;
                }
            }
            Ok(Some(_)) => drop(turn),
            Ok(None) => {
                drop(turn);
                let lost = lock(&state.leading).remove(&provider);
                if lost.is_some() {
                    state.emit(Event::Follower { name: name.clone(), reason: FollowReason::Lost });
                    let serial = state.transport_lock(&provider);
                    let _serial = serial.lock().await;
                    if let Err(e) = host.stop_transport(&provider).await {
                        tracing::warn!(target: "botmesh", provider, error = %e, "stopping the transport failed");
                    }
                } else if !announced_standby {
                    state.emit(Event::Follower {
                        name: name.clone(),
                        reason: FollowReason::Standby,
                    });
                }
                announced_standby = true;
            }
            Err(e) => {
                drop(turn);
                tracing::warn!(target: "botmesh", provider, error = %e, "campaign failed");
            }
        }
        // A leader confirms its lease once a period; a standby looks twice as often, so that
        // with its every-other-pass rule a busy replica still tries once a period.
        let leading = lock(&state.leading).contains_key(&provider);
        tokio::time::sleep(if leading { period } else { period / 2 }).await;
    }
}

/// Stops the transport, says this replica follows, then gives the leadership up.
async fn step_down(
    state: &Arc<State>,
    host: &Arc<dyn Host>,
    provider: &str,
    lead: &Leadership,
    reason: FollowReason,
) {
    lock(&state.leading).remove(provider);
    let serial = state.transport_lock(provider);
    let stopped = serial.lock().await;
    if let Err(e) = host.stop_transport(provider).await {
        tracing::warn!(target: "botmesh", provider, error = %e, "stopping the transport failed");
    }
    drop(stopped);
    // Announced before the resignation lands, so whoever wins the lease next can
    // only do so after this replica has said it follows.
    state.emit(Event::Follower { name: lead.name.clone(), reason });
    if let Err(e) = state.coordinator.resign(lead).await {
        tracing::warn!(target: "botmesh", provider, error = %e, "resigning failed; retrying before campaigning again");
        lock(&state.unresigned).insert(provider.to_owned(), lead.clone());
    }
}

//! Waiting for replicas ([`RedisOptions::wait_for_replicas`](crate::RedisOptions)): a grant
//! counts only once enough replicas have it.
//!
//! Replication is asynchronous: a grant (a turn, a leadership, a fenced lock, a lease, a
//! task's occurrence, a heartbeat that keeps them) written on the master just before a
//! failover may be missing on the replica promoted in its place, which then grants it again.
//! With this setting, every call that grants or renews something its caller will act on, and
//! every store write a message's safety rests on, is sent in one pipeline with two more
//! commands, so it costs no extra round trip:
//!
//! 1. the call itself (a script, or the heartbeat's `SET`);
//! 2. `PUBLISH botmesh:replicated ""`, a barrier: a write that goes to the replicas and moves
//!    this connection's replication offset to the master's current one. A script that only
//!    reads what another call granted (a waiter finding its turn handed over, a leader
//!    campaigning again) writes nothing; `WAIT` then waits for the barrier, which comes after
//!    everything the script read;
//! 3. `WAIT count timeout`: blocks until `count` replicas acknowledged everything up to the
//!    barrier, or the timeout.
//!
//! Fewer acknowledgements are an error ([`is_refused`] says so), which the callers report as
//! a retryable [`Error::CoordinationUnavailable`]: the grant stays on the master, but nobody
//! acts on it. What the retry does with it is safe in every case (see each caller):
//!
//! - a **take** of tickets (`turns.lua`) withdraws the tickets the lost call took, as for a
//!   lost reply (`coordinator::take`): a turn granted with them is given back unused, and
//!   the next message takes a new ticket;
//! - a **waiter** (`try_turn.lua`) looks again: the turn is recorded as its own, and the next
//!   look reports it once replicated; a turn handed over to another replica through the wake
//!   channel is never taken from the message (`Waiters::confirm`), only from such a look;
//! - a **release** is reported failed after it landed: the turn is given up either way, and
//!   the next holder learns of its turn only through a look of its own;
//! - a **campaign** (`try_lead.lua`) and a **lease** (`acquire_lease.lua`) are re-entrant for
//!   their holder: the next try gets the same grant back once replicated, and until then
//!   nobody else gets it;
//! - a **fenced lock** (`acquire_lock.lua`) is released again by its token, which never
//!   reached the caller, so that the next try can take it;
//! - a **renewal** (locks, leases, heartbeats) reported failed leaves the holder going by the
//!   last renewal that was replicated, which is what a promoted replica has;
//! - a **task claim** reported failed skips the occurrence here, as a lost reply does;
//! - a **store write** a message's safety rests on (journal appends, acknowledgements and
//!   claims, outbox marks, checkpoint writes and clears) reported failed is one the caller
//!   does again or gives up as for any store error: an append is refused to the platform,
//!   which delivers again (and finds it journaled once replicated); a checkpoint write ends
//!   the conversation as a lost turn does.
//!
//! A refusal by the master itself (`NOREPLICAS`, under `min-replicas-to-write`) is reported
//! the same way.
//!
//! [`Error::CoordinationUnavailable`]: botmesh_traits::Error::CoordinationUnavailable

use botmesh_traits::Error;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

use crate::Replicas;
use crate::call::ScriptCall;
use crate::conn::{Conn, ms};

/// The channel of the barrier write; nobody subscribes to it.
const BARRIER: &str = "botmesh:replicated";

/// What a shortfall's error starts with.
const SHORTFALL: &str = "not acknowledged by enough replicas";

/// Sends script call `call`, followed by the barrier and `WAIT` when `replicas` is set.
pub(crate) async fn script<T: FromRedisValue>(
    call: &ScriptCall<'_>,
    conn: &mut Conn,
    replicas: Option<Replicas>,
) -> RedisResult<T> {
    let Some(replicas) = replicas else { return call.invoke(conn).await };
    let reply = match waiting(call.cmd(), conn, replicas).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            call.load(conn).await?;
            waiting(call.cmd(), conn, replicas).await?
        }
        reply => reply?,
    };
    Ok(T::from_redis_value(reply)?)
}

/// Sends command `cmd`, followed by the barrier and `WAIT` when `replicas` is set.
pub(crate) async fn command<T: FromRedisValue>(
    cmd: &Cmd,
    conn: &mut Conn,
    replicas: Option<Replicas>,
) -> RedisResult<T> {
    match replicas {
        None => cmd.query_async(conn).await,
        Some(replicas) => Ok(T::from_redis_value(waiting(cmd, conn, replicas).await?)?),
    }
}

/// `cmd`, the barrier and `WAIT`, in one pipeline: `cmd`'s reply once enough replicas
/// acknowledged it.
async fn waiting(cmd: &Cmd, conn: &mut Conn, replicas: Replicas) -> RedisResult<Value> {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone())
        .cmd("PUBLISH")
        .arg(BARRIER)
        .arg("")
        .cmd("WAIT")
        .arg(replicas.count)
        .arg(ms(replicas.timeout));
    let replies = conn.req_packed_commands(&pipe, 0, 3).await?;
    let Ok([reply, _, acked]) = <[Value; 3]>::try_from(replies) else {
        return Err(RedisError::from((ErrorKind::Parse, "a WAIT pipeline's reply is short")));
    };
    // The call's own error (a script's, or NOREPLICAS) comes first.
    let reply = reply.extract_error()?;
    let acked = i64::from_redis_value(acked.extract_error()?)?;
    if acked < i64::from(replicas.count) {
        return Err(RedisError::from((
            ErrorKind::Client,
            SHORTFALL,
            format!("{acked} of {} within {:?}", replicas.count, replicas.timeout),
        )));
    }
    Ok(reply)
}

/// Whether `e` says the replicas did not acknowledge a grant in time, or the master refused
/// it for want of replicas (`NOREPLICAS`, under `min-replicas-to-write`).
/// A write refused inside a script reaches us as the script's error, its message naming it.
pub(crate) fn is_refused(e: &RedisError) -> bool {
    let text = e.to_string();
    e.code() == Some("NOREPLICAS") || text.starts_with(SHORTFALL) || text.contains("NOREPLICAS")
}

/// The store's error for `op` failing with `e`: [`Error::CoordinationUnavailable`] when the
/// replicas refused it (see [`is_refused`]), else [`Error::Store`].
pub(crate) fn store_error<E>(op: &'static str, e: E) -> Error
where
    E: std::borrow::Borrow<RedisError> + Into<botmesh_traits::BoxError>,
{
    if is_refused(e.borrow()) {
        Error::CoordinationUnavailable {
            reason: format!("{op}: not replicated to enough replicas"),
            source: Some(e.into()),
        }
    } else {
        Error::store(op, e)
    }
}

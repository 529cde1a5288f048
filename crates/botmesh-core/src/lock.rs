//! Locking the crate's own mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, whether or not a holder panicked: every critical section on the crate's
/// mutexes is a few collection operations without user code, so a poisoned one still holds
/// consistent data.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

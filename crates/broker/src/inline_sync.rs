//! Where a claimed lone transaction ([`jobyard_storage::Claim`]) may be synced: on the
//! committing thread only when blocking it for an fsync stalls nobody else.

use jobyard_storage::Claim;
use tokio::runtime::{Handle, RuntimeFlavor};

/// Writes and syncs a claimed transaction on this thread when that is safe, else hands it
/// to the log writer thread (by dropping the claim).
///
/// On a multi-threaded runtime the worker's other tasks move to another thread for the
/// fsync (`block_in_place`). On a current-thread runtime blocking would stall every task
/// on it, so the writer thread syncs, as for any other commit. Outside a runtime (tests,
/// plain threads) blocking is what the caller expects anyway.
pub(crate) fn sync_claimed(claim: Claim<'_>) {
    if !claim.is_claimed() {
        return;
    }
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => {
            tokio::task::block_in_place(|| claim.sync());
        }
        Ok(_) => drop(claim),
        Err(_) => {
            claim.sync();
        }
    }
}

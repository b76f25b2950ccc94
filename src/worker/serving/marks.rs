//! The purge marks as this worker sees them: written by every purge (the API's, a mutation's,
//! another Envoy's through the log: [`mark`] is the one path), reread when the purge epoch moves,
//! and asked of an entry's bytes. Shared by every side that may hand out a stored entry (a
//! request's lookup, the root's stale-instead-of-error, an L2 hit) and by every side that purges,
//! so it sits above them all.

use crate::cache::entry::Entry;
use crate::effects::host::Host;
use crate::effects::store::StoreError;
use crate::invalidate::marks::{Target, Verdict};
use crate::worker::ctx::Ctx;
use crate::worker::state::Worker;

/// The bit that marks an epoch read from the purge signal.
const SIGNAL_EPOCH: u64 = 1 << 63;

/// Rereads the purge marks if the epoch moved since this worker last read them.
pub fn refresh_marks(cx: &mut Ctx<'_, impl Host>) {
    // The signal moves after the marks are written, so a new value always comes with them.
    // Signal values are kept apart from shared-data epochs (the top bit), so a host whose signal
    // fails for a moment can never make an old epoch look current.
    let (plugin, host) = (cx.plugin(), cx.host());
    let epoch = host
        .purge_signal()
        .map(|s| s | SIGNAL_EPOCH)
        .unwrap_or_else(|| plugin.purges.epoch(host) & !SIGNAL_EPOCH);
    if epoch == cx.worker(|w| w.purges.epoch) {
        return;
    }
    let view = plugin.purges.view(cx.host(), epoch);
    cx.worker(|w| w.purges = view);
}

/// What the marks (as `worker` last read them) say of an entry.
pub fn verdict(worker: &Worker, bytes: &[u8]) -> Verdict {
    match Entry::decode(bytes) {
        Ok(e) => worker
            .purges
            .verdict(e.born_us, e.tag_hashes.iter().copied()),
        // Not decodable: `serving::lookup::serve` refuses it anyway.
        Err(_) => Verdict::Fresh,
    }
}

/// Whether a purge made since `bytes` (an entry) was asked for covers it: an entry a fetch made
/// and hands over directly (a prefetch's, a wake-up's), not through a lookup, is checked here.
pub fn overtaken(cx: &mut Ctx<'_, impl Host>, bytes: &[u8]) -> bool {
    refresh_marks(cx);
    cx.worker(|w| verdict(w, bytes)) == Verdict::Purged
}

/// Whether any purge (hard) was made at or after `born_us`, whatever its target: for an answer
/// whose tags are not known (not stored, or an entity batch split later), the only safe reading.
pub fn purged_since(cx: &mut Ctx<'_, impl Host>, born_us: u64) -> bool {
    refresh_marks(cx);
    cx.worker(|w| w.purges.latest_hard_us() >= born_us)
}

/// The one way a purge reaches this Envoy, whoever made it (the API, a mutation, another Envoy
/// through the purge log): each target marked at its instant, then every worker told (the purge
/// signal) and this worker's marks read back, so its copies go at once.
pub fn mark(cx: &mut Ctx<'_, impl Host>, timed: &[(Target, bool, u64)]) -> Result<(), StoreError> {
    if !timed.is_empty() && cx.plugin().purges.apply_at(cx.host(), timed)? {
        cx.host().raise_purge_signal();
        refresh_marks(cx);
    }
    Ok(())
}

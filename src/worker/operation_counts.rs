//! Counting for one operation (`operation_stats`): a request adds to its operation's bucket in the
//! worker's memory; the root's timer adds those counts to Envoy's stats, defining a stat the first
//! time this worker adds to it. A stat the host refuses is skipped from then on.

use crate::effects::host::Host;
use crate::effects::operation_stats::{OpCounter, Operation, StatId};
use crate::invalidate::tags::OperationTags;
use crate::worker::ctx::Ctx;

/// One count: a counter, its reason (for counters by reason), and how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub counter: OpCounter,
    pub reason: Option<&'static str>,
    pub amount: u64,
}

impl Tally {
    pub fn one(counter: OpCounter) -> Tally {
        Tally {
            counter,
            reason: None,
            amount: 1,
        }
    }

    pub fn because(counter: OpCounter, reason: &'static str) -> Tally {
        Tally {
            counter,
            reason: Some(reason),
            amount: 1,
        }
    }
}

/// How a request's operation is counted: by the name it was read with, if it was read.
pub fn operation_of(tags: Option<&OperationTags>) -> Operation<'_> {
    match tags {
        None => Operation::Unread,
        Some(OperationTags { name: None, .. }) => Operation::Anonymous,
        Some(OperationTags { name: Some(n), .. }) => Operation::Named(n),
    }
}

/// Counts `tallies` for `operation`; Envoy's stats get them at the next [`flush`]. Returns the
/// bucket they went to (`None`: the counters are off).
pub fn count_operation<H: Host>(
    cx: &mut Ctx<'_, H>,
    operation: Operation<'_>,
    tallies: &[Tally],
) -> Option<u16> {
    if !cx.config().operation_stats.on() {
        return None;
    }
    let bucket = cx.worker_and_shared(|w, shared| {
        let bucket = w.operations.bucket(shared, operation);
        for t in tallies.iter().filter(|t| t.amount > 0) {
            w.operations.add(bucket, t.counter, t.reason, t.amount);
        }
        bucket
    });
    Some(bucket)
}

/// Root, on its timer: adds what was counted since the last flush to Envoy's stats, defining a
/// stat the first time this worker adds to it.
pub fn flush<H: Host>(cx: &mut Ctx<'_, H>) {
    if !cx.config().operation_stats.on() {
        return;
    }
    for (bucket, counter, reason, amount) in cx.worker(|w| w.operations.take_pending()) {
        let known = cx.worker(|w| w.operations.known(bucket, counter, reason));
        let id = match known {
            StatId::Id(id) => id,
            StatId::Refused => continue,
            StatId::Undefined => {
                let name = cx.worker(|w| w.operations.name_of(bucket, counter, reason));
                let id = cx.host().define_counter(&name);
                cx.worker(|w| w.operations.defined(bucket, counter, reason, id));
                match id {
                    Some(id) => id,
                    None => continue,
                }
            }
        };
        cx.host().add_to_counter(id, amount);
    }
}

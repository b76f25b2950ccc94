//! The what-if route (`what_if_path`, the purge API's token): given a candidate configuration
//! fragment, the recent traffic every worker recorded (`serving::recent`) replayed under the
//! configuration in force and under the candidate (`whatif`), per operation. Read-only: nothing
//! in the cache changes, nothing is forwarded. Bounded: at most `what_if_records` records per
//! worker, each replayed twice.

use crate::effects::host::RequestHost;
use crate::effects::operation_stats::{bucket_names, REGISTRY_KEY};
use crate::effects::store::SharedStore;
use crate::invalidate::purge_request::Refusal;
use crate::whatif::candidate::{candidate, Settings};
use crate::whatif::report;
use crate::whatif::ring::{chunk_key, decode_chunk, decode_workers, Record, WORKERS_KEY};
use crate::worker::admin::purge::{json_headers, refuse};
use crate::worker::ctx::Ctx;
use crate::worker::serving::recent;

/// Answers an authorized what-if request whose whole body is `body`.
pub fn what_if(cx: &mut Ctx<'_, impl RequestHost>, body: &[u8]) {
    let now = Settings::of(cx.config());
    let refused = |message: String| Refusal {
        status: 400,
        message,
    };
    let next = match candidate(&now, body) {
        Ok(next) => next,
        Err(why) => return refuse(cx.host(), &refused(why.0)),
    };
    let chunks = cx.worker(|w| w.recent.chunks());
    if chunks == 0 {
        let off = "what_if_records is 0: no traffic is recorded".to_string();
        return refuse(cx.host(), &refused(off));
    }
    // This worker's newest records too, not only those its timer copied.
    recent::flush(cx);
    let host = cx.host();
    let mut records = recorded(host, chunks);
    let names = bucket_names(&host.get(REGISTRY_KEY).unwrap_or_default());
    let answer = report(&mut records, &now, &next, &names);
    host.respond(200, json_headers(), answer.to_string().as_bytes());
}

/// Every listed worker's records, in no order.
fn recorded(store: &impl SharedStore, chunks: usize) -> Vec<Record> {
    let workers = decode_workers(&store.get(WORKERS_KEY).unwrap_or_default());
    let mut out = Vec::new();
    for worker in workers {
        for chunk in 0..chunks {
            if let Some(value) = store.get(&chunk_key(worker, chunk)) {
                out.extend(decode_chunk(&value));
            }
        }
    }
    out
}

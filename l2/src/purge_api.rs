//! The purge log's verbs (`POST /v1/purge`, `GET /v1/purges`, `POST`/`GET /v1/marks`; see
//! docs/fleet.md "Purges"). The log fans every purge out to every Envoy's follower, numbered and
//! trimmed by age; the snapshot beside it keeps the newest mark of each target for as long as an
//! entry it purges can live, so a new Envoy, or one that finds a gap in the log, catches up
//! without purging everything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use l2_proto::limits::{
    valid_cursor, valid_generation, MAX_GEN_BYTES, MAX_PURGE_BYTES, PURGES_PER_ANSWER,
};
use l2_proto::marks::{
    valid_scan_cursor, MarksAdded, MarksBatch, MarksPage, MAX_MARKS_BODY_BYTES,
    MAX_MARKS_PAGE_BYTES,
};
use l2_proto::purges::{PurgeAdded, PurgeEntry, PurgesAnswer};
use l2_proto::route::param;

use crate::app::{bad, body_within, failed, json, text, wait_permit, App, Query};
use crate::metrics::{Outcome, PollVerb, Shed};
use crate::purgelog::Purges;

/// The body is opaque (the filter signs it): only its size is checked.
pub(crate) async fn purge(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match body_within(
        &app,
        req,
        MAX_PURGE_BYTES,
        "purge body",
        Outcome::PurgeTooLarge,
        Outcome::PurgeError,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    match app.backend.purge(&body, &app.purge_log).await {
        Ok((id, generation)) => {
            app.metrics.count(Outcome::PurgeAdded);
            json(PurgeAdded { id, generation }.encode())
        }
        Err(f) => failed(&app, Outcome::PurgeError, &f),
    }
}

fn purges_page(app: &App, p: &Purges) -> Response {
    app.metrics.count(if p.entries.is_empty() {
        Outcome::PurgesEmpty
    } else {
        Outcome::PurgesEntries
    });
    let answer = PurgesAnswer {
        generation: Some(p.gen.clone()),
        last: p.last.clone(),
        gap: p.gap,
        // A reader that did not send its number gets the answer it always got.
        entries: p
            .entries
            .iter()
            .map(|e| match (p.n, e.n) {
                (Some(_), Some(n)) => PurgeEntry::numbered(e.id.as_str(), &e.data, n),
                _ => PurgeEntry::new(e.id.as_str(), &e.data),
            })
            .collect(),
        n: p.n,
    };
    json(answer.encode())
}

struct PurgesQuery {
    after: String,
    /// Empty: the reader knows no generation yet.
    gen: String,
    /// The number of the last entry the reader applied: numbered reads.
    n: Option<u64>,
    wait: Duration,
}

fn purges_query(app: &App, uri: &Uri) -> Result<PurgesQuery, String> {
    let q = Query::parse(uri)?;
    let after = q.0.get(param::AFTER).map(String::as_str).unwrap_or("0");
    if !valid_cursor(after) {
        return Err(format!(
            "bad parameter `{}`: expected a stream id (MS-SEQ), `0` or `$`, got `{after}`",
            param::AFTER
        ));
    }
    let gen = q.0.get(param::GEN).map(String::as_str).unwrap_or("");
    if !gen.is_empty() && !valid_generation(gen) {
        return Err(format!(
            "bad parameter `{}`: expected up to {MAX_GEN_BYTES} letters and digits",
            param::GEN
        ));
    }
    let n = if q.0.contains_key(param::N) {
        Some(q.number(param::N, 0, u64::MAX, None)?)
    } else {
        None
    };
    Ok(PurgesQuery {
        after: after.to_string(),
        gen: gen.to_string(),
        n,
        wait: q.wait(app.max_wait)?,
    })
}

/// One read when it starts; if there is nothing yet, it waits on the purge-log follower (no Redis
/// command while waiting) and reads once more each time the follower reports a new record.
pub(crate) async fn purges(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let PurgesQuery {
        after,
        gen,
        n,
        wait,
    } = match purges_query(&app, &uri) {
        Ok(p) => p,
        Err(msg) => return bad(&app, Outcome::PurgesBadRequest, msg),
    };
    let deadline = Instant::now() + wait;
    // Subscribed before the first read, so a record landing between the read and the wait wakes it.
    let mut news = app.feed.subscribe();
    let mut permit = None;
    loop {
        news.borrow_and_update();
        let p = match app.backend.purges(&after, &gen, n, PURGES_PER_ANSWER).await {
            Ok(p) => p,
            Err(f) => return failed(&app, Outcome::PurgesError, &f),
        };
        let now = Instant::now();
        if !p.entries.is_empty() || p.gap || after == "$" || now >= deadline {
            return purges_page(&app, &p);
        }
        if permit.is_none() {
            permit = wait_permit(&app, PollVerb::Purges);
            if permit.is_none() {
                // A page answered at once would be re-asked at once: 429 makes the caller back off.
                app.metrics.shed(Shed::PurgesWait);
                return text(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many long-polls waiting (--max-long-polls)",
                );
            }
        }
        match tokio::time::timeout(deadline - now, news.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => return purges_page(&app, &p),
        }
    }
}

/// A batch of marks: every one into the log, the newest of each target into the snapshot. The
/// marks are sealed by the filter; the service reads their clear part to name and order them.
pub(crate) async fn add_marks(State(app): State<Arc<App>>, req: Request) -> Response {
    let body = match body_within(
        &app,
        req,
        MAX_MARKS_BODY_BYTES,
        "marks body",
        Outcome::MarksTooLarge,
        Outcome::MarksBadRequest,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    let batch = match MarksBatch::decode(&body) {
        Ok(b) => b,
        Err(e) => return bad(&app, Outcome::MarksBadRequest, format!("marks body: {e}")),
    };
    // The operator's floor: a batch cannot make the snapshot forget a purge sooner than it.
    let keep_ms = batch.keep_ms.max(app.purge_log.min_keep_ms);
    match app
        .backend
        .add_marks(&batch.marks, keep_ms, &app.purge_log)
        .await
    {
        Ok(a) => {
            app.metrics.count(Outcome::MarksAdded);
            let answer = MarksAdded {
                generation: a.gen,
                last: a.last,
                n: a.n,
            };
            json(answer.encode())
        }
        Err(f) => failed(&app, Outcome::MarksError, &f),
    }
}

/// `cursor`: an HSCAN cursor, `0` (the default) for the first page.
fn snapshot_cursor(uri: &Uri) -> Result<u64, String> {
    let q = Query::parse(uri)?;
    let raw = q.0.get(param::CURSOR).map(String::as_str).unwrap_or("0");
    match raw.parse::<u64>() {
        Ok(c) if valid_scan_cursor(raw) => Ok(c),
        _ => Err(format!(
            "bad parameter `{}`: expected a cursor from an earlier page (decimal digits), got `{raw}`",
            param::CURSOR
        )),
    }
}

/// One page of the snapshot. The page is HSCAN's, never cut here: its cursor is past every field
/// it answered, so a cut would lose fields for good. A page over the contract's byte limit is a
/// 424 rather than a page the reader would refuse; only a Redis keeping thousands of long fields
/// in a listpack could give one (with the default `hash-max-listpack-value` our values make the
/// hash a hashtable, and a scan of COUNT buckets answers about COUNT fields).
pub(crate) async fn marks_page(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let cursor = match snapshot_cursor(&uri) {
        Ok(c) => c,
        Err(msg) => return bad(&app, Outcome::SnapshotBadRequest, msg),
    };
    let page = match app.backend.marks_page(cursor).await {
        Ok(p) => p,
        Err(f) => return failed(&app, Outcome::SnapshotError, &f),
    };
    let body = MarksPage {
        generation: page.gen,
        cursor: page.cursor,
        tip: page.tip,
        n: page.n,
        entries: page
            .marks
            .iter()
            .map(|(id, sealed)| PurgeEntry::new(id.as_str(), sealed))
            .collect(),
    }
    .encode();
    if body.len() > MAX_MARKS_PAGE_BYTES {
        app.metrics.count(Outcome::SnapshotError);
        return text(
            StatusCode::FAILED_DEPENDENCY,
            format!(
                "snapshot page larger than {MAX_MARKS_PAGE_BYTES} bytes (hash-max-listpack-*?)"
            ),
        );
    }
    app.metrics.count(Outcome::SnapshotPage);
    json(body)
}

//! A worker's lead on flights, from the claim until the root holds their fetch. The lead is
//! handed over with [`LeadPermit::hand_to_root`]; a permit dropped before that (no fetch could
//! be built, the root could not be asked, an early return) gives its flights up on its own: they
//! end with no answer, and the workers that watch them go upstream at once, as a dropped write
//! permit of pingora's cache lock releases its readers. So no code path gives a flight up by hand,
//! and none can forget to.
//!
//! This worker's own record of the flights (its `waiters`) is started only once the root holds
//! the fetch, so a permit given up leaves nothing here to clean.

use crate::coalesce::upstream::SharedFetch;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::ctx::{Ctx, SharedOnly};
use crate::worker::flights::wake::wake_by;
use crate::worker::state::Plugin;
use crate::worker::to_root::request_dispatch;

/// What this worker records for the flights once the root holds their fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Led {
    /// A miss leads: request `context` waits for the answer.
    Miss { context: u32 },
    /// A background refresh: nobody here waits; later requests see it running.
    Refresh,
}

/// This worker's lead on the flights of `keys` (one for a whole answer; an entity fetch holds
/// one per entity). Must be handed to the root; dropped, it gives them up.
#[must_use = "a lead permit dropped unhanded gives its flights up"]
pub struct LeadPermit<'a, H: Host> {
    keys: Vec<CacheKey>,
    led: Led,
    now_ms: u64,
    me: u64,
    plugin: &'a Plugin,
    host: SharedOnly<'a, H>,
}

impl<'a, H: Host> LeadPermit<'a, H> {
    /// A permit for flights this worker (`me`) has just won, none yet: see [`LeadPermit::add`].
    pub fn new(cx: &Ctx<'a, H>, me: u64, led: Led, now_ms: u64) -> Self {
        LeadPermit {
            keys: Vec::new(),
            led,
            now_ms,
            me,
            plugin: cx.plugin(),
            host: cx.quiet(),
        }
    }

    /// The flight of `key`, just won.
    pub fn add(&mut self, key: CacheKey) {
        self.keys.push(key);
    }

    pub fn keys(&self) -> &[CacheKey] {
        &self.keys
    }

    pub fn holds(&self, key: &CacheKey) -> bool {
        self.keys.contains(key)
    }

    /// Queues `fetch` for the root and asks the root to send it: the lead is the root's then,
    /// and this worker records its flights (`true`). `false`: nothing would send it; the fetch
    /// is taken back and the permit, dropped, gives the flights up.
    pub fn hand_to_root(self, cx: &mut Ctx<'_, H>, fetch: SharedFetch) -> bool {
        let key = fetch.key;
        cx.worker(|w| w.flights.queue(fetch));
        if !request_dispatch(cx) {
            cx.worker(|w| w.flights.unqueue(&key));
            return false;
        }
        let (led, now_ms) = (self.led, self.now_ms);
        let keys = self.done();
        cx.worker(|w| {
            for key in keys {
                match led {
                    Led::Miss { context } => w.flights.lead(key, context, now_ms),
                    Led::Refresh => w.flights.refresh(key, now_ms),
                }
            }
        });
        true
    }

    /// The keys, no longer this permit's to give up.
    fn done(mut self) -> Vec<CacheKey> {
        std::mem::take(&mut self.keys)
    }
}

impl<H: Host> Drop for LeadPermit<'_, H> {
    fn drop(&mut self) {
        for key in std::mem::take(&mut self.keys) {
            give_up(self.plugin, &self.host, self.me, &key);
        }
    }
}

/// Ends the flight of `key`, led by worker `me`, with no answer: its watchers go upstream on
/// their own. (A flight whose slot holds another key's record is left alone: not ours.)
pub fn give_up<H: Host>(plugin: &Plugin, host: &SharedOnly<'_, H>, me: u64, key: &CacheKey) {
    let watchers = plugin.flights.complete(host, key, me, None, host.now_ms());
    wake_by(
        |queue, message| host.enqueue(queue, message),
        &watchers,
        key,
        None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::storable::Asked;
    use crate::coalesce::flights::{Claim, Join, JoinMode};
    use crate::coalesce::liveness::Alive;
    use crate::coalesce::upstream::L2Role;
    use crate::coalesce::wakeup::Message;
    use crate::config::Lifetimes;
    use crate::effects::fake::FakeHost;
    use crate::effects::host::Callout;
    use crate::worker::state::Worker;
    use std::cell::RefCell;

    const ME: u64 = 1;
    const WATCHER_QUEUE: u32 = 7;

    fn key(n: u8) -> CacheKey {
        CacheKey { digest: [n; 32] }
    }

    fn claim(key: CacheKey, me: u64, queue: u32, mode: JoinMode) -> Claim {
        Claim {
            key,
            me,
            queue,
            now_ms: 1000,
            lease_ms: 10_000,
            mode,
        }
    }

    fn fetch(key: CacheKey) -> SharedFetch {
        SharedFetch {
            key,
            request: Callout {
                cluster: "origin".into(),
                headers: Vec::new(),
                body: None,
            },
            asked: Asked {
                lifetimes: Lifetimes::default(),
                born_us: 0,
                operation: Default::default(),
            },
            dispatched_ms: 0,
            key_names_caller: false,
            l2: L2Role::Off,
            entities: None,
            trigger: None,
        }
    }

    /// Worker `ME` leads `key`'s flight and another worker (queue 7) watches it.
    fn led_and_watched(plugin: &Plugin, host: &FakeHost, key: CacheKey) {
        let everyone = Alive::everyone();
        let lead = claim(key, ME, 3, JoinMode::MayLead);
        assert_eq!(plugin.flights.join(host, &lead, &everyone), Join::Lead);
        let watch = claim(key, 2, WATCHER_QUEUE, JoinMode::MayLead);
        assert_eq!(plugin.flights.join(host, &watch, &everyone), Join::Follow);
    }

    fn woken_without_answer(host: &FakeHost, key: CacheKey) -> bool {
        host.queues.drain(WATCHER_QUEUE).iter().any(|m| {
            matches!(Message::decode(m), Some(Message::Wake { key: k, answer: None }) if k == key)
        })
    }

    #[test]
    fn a_permit_dropped_unhanded_gives_its_flights_up_and_wakes_their_watchers() {
        let (plugin, host) = (Plugin::default(), FakeHost::new());
        let worker = RefCell::new(Worker::new(ME, &plugin.config));
        led_and_watched(&plugin, &host, key(1));
        {
            let cx = Ctx::new(&plugin, &worker, &host);
            let mut permit = LeadPermit::new(&cx, ME, Led::Refresh, 1000);
            permit.add(key(1));
        }
        assert!(
            woken_without_answer(&host, key(1)),
            "the watcher goes its own way"
        );
        let again = claim(key(1), 2, WATCHER_QUEUE, JoinMode::MayLead);
        let joined = plugin.flights.join(&host, &again, &Alive::everyone());
        assert_eq!(joined, Join::Lead, "the flight is free to lead again");
        assert!(
            !worker.borrow().flights.has(&key(1)),
            "nothing recorded here"
        );
    }

    #[test]
    fn a_permit_the_root_cannot_be_asked_for_gives_its_flights_up() {
        let (plugin, host) = (Plugin::default(), FakeHost::new());
        // No wake-up queue: the root cannot be asked to send.
        let worker = RefCell::new(Worker::new(ME, &plugin.config));
        led_and_watched(&plugin, &host, key(2));
        let mut cx = Ctx::new(&plugin, &worker, &host);
        let mut permit = LeadPermit::new(&cx, ME, Led::Miss { context: 5 }, 1000);
        permit.add(key(2));
        assert!(!permit.hand_to_root(&mut cx, fetch(key(2))));
        assert!(woken_without_answer(&host, key(2)));
        let w = worker.borrow();
        assert!(
            w.flights.first_queued().is_none(),
            "the fetch is taken back"
        );
        assert!(!w.flights.has(&key(2)));
    }

    #[test]
    fn a_permit_handed_to_the_root_keeps_its_flights_and_records_them_here() {
        let (plugin, host) = (Plugin::default(), FakeHost::new());
        let worker = RefCell::new(Worker::new(ME, &plugin.config));
        worker.borrow_mut().queue = Some(3);
        led_and_watched(&plugin, &host, key(3));
        let mut cx = Ctx::new(&plugin, &worker, &host);
        let mut permit = LeadPermit::new(&cx, ME, Led::Miss { context: 5 }, 1000);
        permit.add(key(3));
        assert!(permit.hand_to_root(&mut cx, fetch(key(3))));
        assert!(host.queues.drain(WATCHER_QUEUE).is_empty(), "nobody woken");
        assert!(matches!(
            host.queues
                .drain(3)
                .first()
                .and_then(|m| Message::decode(m)),
            Some(Message::Dispatch)
        ));
        let w = worker.borrow();
        assert_eq!(w.flights.first_queued().map(|f| f.key), Some(key(3)));
        assert_eq!(w.flights.leading_since(&key(3)), Some(1000));
    }
}

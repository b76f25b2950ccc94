//! What runs in the root context (callouts, timers, configuration): the root outlives any one
//! request, so shared fetches, wake-ups and letting paused requests go are done from here.

pub mod answer;
pub mod callouts;
pub mod configure;
pub mod dispatch;
pub mod entity_fetch;
pub mod entity_flights;
pub mod followers;
pub mod prefetch;
pub mod shared_fetch;
pub mod stale;
pub mod tick;
pub mod timer;

//! The root context's own callbacks, each routed to the wing it is for: `callouts` (a callout
//! came back: the origin's answer, an L2 call's), `dispatch` (sending what requests queued), `queue` (messages on the wake-up queue),
//! `tick` (the timer's periodic work), `configure` (a configuration loaded). The root outlives
//! any one request, so shared fetches, wake-ups and letting paused requests go are done from it.

pub mod callouts;
pub mod configure;
pub mod dispatch;
pub mod queue;
pub mod tick;

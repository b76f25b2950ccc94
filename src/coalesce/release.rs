//! Why a paused request was let go to fetch upstream on its own (`x-cache-reason` on its `MISS`).

/// Why a waiting request went upstream by itself instead of being answered from a shared fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The shared answer may not go to followers (credentials, `Vary`, `Set-Cookie`, ...).
    NotShareable,
    /// The worker leading the fetch went away.
    LeaderGone,
    /// Envoy did not deliver the held request's body in time.
    BodyNotDelivered,
    /// The wait outlasted its deadline.
    WaitTimeout,
    /// The shared fetch this request waited for is lost.
    FetchLost,
    /// The origin's answer exceeded the relay limit.
    TooLarge,
    /// The origin's answer could not be relayed as a local reply.
    NotRelayable,
    /// Envoy itself answered the request while it waited (e.g. its own timeout).
    EnvoyReply,
    /// The prefetch an entity batch waited for did not bring every entity it asks for.
    PrefetchIncomplete,
    /// A purge overtook the fetch this request joined: its answer may be older than the purge.
    Overtaken,
}

impl Release {
    pub fn as_str(self) -> &'static str {
        match self {
            Release::NotShareable => "not-shareable",
            Release::LeaderGone => "leader-gone",
            Release::BodyNotDelivered => "body-not-delivered",
            Release::WaitTimeout => "wait-timeout",
            Release::FetchLost => "fetch-lost",
            Release::TooLarge => "too-large",
            Release::NotRelayable => "not-relayable",
            Release::EnvoyReply => "envoy-reply",
            Release::PrefetchIncomplete => "prefetch-incomplete",
            Release::Overtaken => "overtaken-by-purge",
        }
    }
}

//! What a request was answered with: the `x-cache` vocabulary (also the access log's `status`,
//! the explain endpoint's `x_cache` and the per-operation counters' key). [`CacheStatus::as_str`]
//! is the one place its words are spelled.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// From a fresh entry (this Envoy's, or the fleet's L2).
    Hit,
    /// From an entry past its freshness, within a stale window.
    Stale,
    /// From the origin (or a subgraph), fetched for this request.
    Miss,
    /// From a fetch another request led (on this Envoy, or another through the L2).
    Coalesced,
    /// Entity mode: some entities from entries, the rest fetched.
    Partial,
    /// Not cached at all (a rule, a mutation, a request the filter does not read).
    Bypass,
    /// Shadow mode: sent upstream as it was; what the cache would have said is only logged.
    Shadow,
}

impl CacheStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Stale => "STALE",
            CacheStatus::Miss => "MISS",
            CacheStatus::Coalesced => "COALESCED",
            CacheStatus::Partial => "PARTIAL",
            CacheStatus::Bypass => "BYPASS",
            CacheStatus::Shadow => "SHADOW",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_word() {
        let all = [
            CacheStatus::Hit,
            CacheStatus::Stale,
            CacheStatus::Miss,
            CacheStatus::Coalesced,
            CacheStatus::Partial,
            CacheStatus::Bypass,
            CacheStatus::Shadow,
        ];
        let words: std::collections::HashSet<_> = all.iter().map(|s| s.as_str()).collect();
        assert_eq!(words.len(), all.len());
        assert!(words
            .iter()
            .all(|w| w.bytes().all(|b| b.is_ascii_uppercase())));
    }
}

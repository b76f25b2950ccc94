//! The request and its key, free of host calls: GraphQL over HTTP (`http`), strict JSON for the
//! key (`json`), canonical printing (`canonical`), per-operation policy (`rules`), the key
//! (`key`), the whole decision from request head and body to key or bypass (`classify`, with its
//! per-worker memos: `memo` of whole requests, `operations` of canonical operations), why a
//! request passes through (`bypass`), what the matched route says (`route_metadata`), and what the what-if keeps of a key to replay
//! other `vary_headers` (`variant`).
//!
//! It reads the configuration's types (rules, limits) from `config`, never the other way round.

pub mod apq;
pub mod bypass;
pub mod canonical;
pub mod classify;
pub mod explain;
pub mod http;
pub mod key;
pub mod memo;
pub mod operations;
pub mod route_metadata;
pub mod rules;
pub mod variant;

//! A bounded per-worker memo of canonical operations, by query text and operation name. A
//! gateway (or any client with a fixed set of operations) sends the same operation text with new
//! variables on every request: the whole-request memo (`memo`) misses, but the operation need not
//! be parsed and printed again. The text is compared in full, as in `memo`.

use crate::request::canonical::{canonicalize, CanonicalError, CanonicalOperation, Limits};
use crate::request::memo::{Memo, MemoInput};
use std::rc::Rc;

/// An operation as classification reads it (shared: the memo keeps one copy).
pub type ReadOperation = Result<Rc<CanonicalOperation>, CanonicalError>;

#[derive(Debug)]
pub struct Operations(Memo<ReadOperation>);

impl Operations {
    /// At most `capacity` operations of texts up to `max_input` bytes (0: nothing kept).
    pub fn new(capacity: usize, max_input: usize) -> Self {
        Operations(Memo::new(capacity, max_input))
    }

    /// The operation `operation_name` of `query`, canonical, read once per worker while kept.
    /// The limits are the configuration's: a new configuration starts a new memo.
    pub fn read(
        &mut self,
        query: &str,
        operation_name: Option<&str>,
        limits: Limits,
    ) -> ReadOperation {
        let mut input = MemoInput::with_capacity(query.len() + 16);
        input.field(query.as_bytes());
        input.optional(operation_name.map(str::as_bytes));
        if let Some(known) = self.0.get(&input) {
            return known;
        }
        let read = canonicalize(query, operation_name, limits).map(Rc::new);
        self.0.insert(input, read.clone());
        read
    }

    /// How many operations are kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Default for Operations {
    fn default() -> Self {
        Operations::new(0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_is_read_once_and_told_apart_by_text_and_name() {
        let limits = crate::config::Config::default().limits();
        let mut ops = Operations::new(4, 1024);
        let q = "query A { a } query B { b }";
        let a = ops.read(q, Some("A"), limits).unwrap();
        assert!(
            Rc::ptr_eq(&a, &ops.read(q, Some("A"), limits).unwrap()),
            "kept"
        );
        assert_eq!(a.text, canonicalize(q, Some("A"), limits).unwrap().text);
        let b = ops.read(q, Some("B"), limits).unwrap();
        assert_ne!(a.text, b.text);
        assert_eq!(
            ops.read(q, None, limits),
            Err(CanonicalError::UnknownOperation)
        );
        assert_eq!(
            ops.read(q, None, limits),
            Err(CanonicalError::UnknownOperation),
            "kept too"
        );
        assert_ne!(ops.read("{ a }", None, limits).unwrap().text, a.text);
    }

    #[test]
    fn bounded_and_off_at_zero() {
        let limits = crate::config::Config::default().limits();
        let mut ops = Operations::new(2, 16);
        let long = format!("{{ {} }}", "a".repeat(64));
        let first = ops.read(&long, None, limits).unwrap();
        assert!(
            !Rc::ptr_eq(&first, &ops.read(&long, None, limits).unwrap()),
            "too long to keep"
        );
        for q in ["{ a }", "{ b }", "{ c }"] {
            ops.read(q, None, limits).unwrap();
        }
        assert_eq!(ops.len(), 2);
        let mut off = Operations::default();
        let x = off.read("{ a }", None, limits).unwrap();
        assert!(!Rc::ptr_eq(&x, &off.read("{ a }", None, limits).unwrap()));
    }
}

//! A bounded per-worker memo from the raw bytes of a request to its classification, so that a
//! request identical to a recent one is not parsed and printed again (the hit path's main cost).
//!
//! The memo is keyed by a hash of *everything* classification reads, and every entry keeps those
//! bytes and compares them in full: a hash collision costs a parse, never a wrong key.

use crate::fast_hash::{Keyed, PreHashedMap};
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// The exact inputs of one classification, as one byte string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoInput {
    bytes: Vec<u8>,
}

impl MemoInput {
    pub fn with_capacity(n: usize) -> Self {
        MemoInput {
            bytes: Vec::with_capacity(n),
        }
    }

    /// Appends one input; length-prefixed so that field boundaries cannot shift.
    pub fn field(&mut self, value: &[u8]) {
        self.bytes
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(value);
    }

    /// Appends an optional input; absent and empty differ.
    pub fn optional(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.bytes.push(1);
                self.field(v);
            }
            None => self.bytes.push(0),
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn hash64(&self, keyed: &Keyed) -> u64 {
        keyed.hash_one(&self.bytes)
    }
}

/// A bounded map, oldest entry evicted first.
#[derive(Debug)]
pub struct Memo<V> {
    capacity: usize,
    max_input: usize,
    /// By a keyed hash of the input (the input is compared in full too).
    map: PreHashedMap<(MemoInput, V)>,
    order: VecDeque<u64>,
    keyed: Keyed,
}

impl<V: Clone> Memo<V> {
    /// `capacity` entries of inputs up to `max_input` bytes each: at most their product in memory.
    pub fn new(capacity: usize, max_input: usize) -> Self {
        Memo {
            capacity,
            max_input,
            map: PreHashedMap::with_capacity_and_hasher(capacity.min(4096), Default::default()),
            order: VecDeque::with_capacity(capacity.min(4096)),
            keyed: Keyed::default(),
        }
    }

    pub fn get(&self, input: &MemoInput) -> Option<V> {
        if self.capacity == 0 {
            return None;
        }
        match self.map.get(&input.hash64(&self.keyed)) {
            Some((stored, value)) if stored == input => Some(value.clone()),
            _ => None,
        }
    }

    pub fn insert(&mut self, input: MemoInput, value: V) {
        if self.capacity == 0 || input.len() > self.max_input {
            return;
        }
        let h = input.hash64(&self.keyed);
        if self.map.insert(h, (input, value)).is_none() {
            self.order.push_back(h);
        }
        while self.map.len() > self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(parts: &[&[u8]]) -> MemoInput {
        let mut i = MemoInput::default();
        for p in parts {
            i.field(p);
        }
        i
    }

    #[test]
    fn remembers_exact_inputs_only() {
        let mut m = Memo::new(4, 1024);
        m.insert(input(&[b"POST", b"{}"]), 1);
        assert_eq!(m.get(&input(&[b"POST", b"{}"])), Some(1));
        assert_eq!(m.get(&input(&[b"POST", b"{ }"])), None);
        // Field boundaries are part of the input.
        assert_ne!(input(&[b"ab", b"c"]), input(&[b"a", b"bc"]));
        let mut a = MemoInput::default();
        a.optional(None);
        let mut b = MemoInput::default();
        b.optional(Some(b""));
        assert_ne!(a, b);
    }

    #[test]
    fn is_bounded_oldest_first() {
        let mut m = Memo::new(2, 1024);
        m.insert(input(&[b"1"]), 1);
        m.insert(input(&[b"2"]), 2);
        m.insert(input(&[b"3"]), 3);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(&input(&[b"1"])), None);
        assert_eq!(m.get(&input(&[b"3"])), Some(3));
    }

    #[test]
    fn large_inputs_and_zero_capacity_are_not_kept() {
        let mut m = Memo::new(2, 8);
        m.insert(input(&[b"0123456789"]), 1);
        assert!(m.is_empty());
        let mut off = Memo::new(0, 1024);
        off.insert(input(&[b"1"]), 1);
        assert_eq!(off.get(&input(&[b"1"])), None);
    }
}

//! How often a key was asked for lately: a count-min sketch of 4-bit counters, after TinyLFU
//! (Einziger, Friedman, Manes) and Caffeine's `FrequencySketch`.
//!
//! The store asks it whether a new answer is worth more than the one it would displace, so a scan
//! or a long tail of one-time queries cannot flush the keys that are asked all the time. Counters
//! saturate at 15 and are all halved after `10 x capacity` additions, so the sketch forgets: a key
//! that was hot an hour ago does not stay resident on its old fame. Each worker keeps its own: a
//! worker sees a fair sample of the traffic (Envoy spreads connections), which is all admission
//! needs, and a shared sketch would cost a shared-data write on every request.

/// Counters per key: the estimate is the smallest, so a key only looks hot when all four agree.
const DEPTH: usize = 4;
/// Per-row seeds (odd, from the SplitMix64 and Murmur3 finalizers' constants).
const SEEDS: [u64; DEPTH] = [
    0x9E37_79B9_7F4A_7C15,
    0xBF58_476D_1CE4_E5B9,
    0x94D0_49BB_1331_11EB,
    0xC2B2_AE3D_27D4_EB4F,
];
/// A counter's ceiling: 4 bits.
const MAX_COUNT: u64 = 15;
/// Additions between two halvings, per unit of capacity (Caffeine's choice).
const SAMPLE_PER_ENTRY: u64 = 10;

#[derive(Debug, Clone)]
pub struct FrequencySketch {
    /// Sixteen 4-bit counters per word; the length is a power of two.
    table: Vec<u64>,
    additions: u64,
    sample: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of about `capacity` entries: one word (16 counters) per entry, at
    /// least 64 words; `capacity` 0 gives the smallest.
    pub fn new(capacity: usize) -> Self {
        let words = capacity.clamp(64, 1 << 24).next_power_of_two();
        FrequencySketch {
            table: vec![0; words],
            additions: 0,
            sample: (capacity.max(64) as u64).saturating_mul(SAMPLE_PER_ENTRY),
        }
    }

    /// The estimated number of recent requests for `hash` (0 to 15).
    pub fn frequency(&self, hash: u64) -> u8 {
        (0..DEPTH)
            .map(|row| self.counter(self.place(hash, row)))
            .min()
            .unwrap_or(0) as u8
    }

    /// Counts one request for `hash`. Only the smallest of its counters grow (conservative
    /// update): the others already over-count because of other keys.
    pub fn increment(&mut self, hash: u64) {
        let places: [(usize, u32); DEPTH] = std::array::from_fn(|row| self.place(hash, row));
        let least = places
            .iter()
            .map(|&p| self.counter(p))
            .min()
            .unwrap_or(MAX_COUNT);
        if least >= MAX_COUNT {
            return;
        }
        for (word, shift) in places {
            if self.counter((word, shift)) == least {
                self.table[word] += 1 << shift;
            }
        }
        self.additions += 1;
        if self.additions >= self.sample {
            self.halve();
        }
    }

    /// Word and bit offset of `hash`'s counter in `row`.
    fn place(&self, hash: u64, row: usize) -> (usize, u32) {
        let mixed = (hash ^ SEEDS[row]).wrapping_mul(SEEDS[(row + 1) % DEPTH]);
        let mixed = mixed ^ (mixed >> 31);
        let word = (mixed >> 8) as usize & (self.table.len() - 1);
        let shift = ((mixed & 15) as u32) * 4;
        (word, shift)
    }

    fn counter(&self, (word, shift): (usize, u32)) -> u64 {
        (self.table[word] >> shift) & MAX_COUNT
    }

    /// Ages every counter: each nibble halves at once (the mask keeps a nibble's low bit from
    /// falling into its neighbour).
    fn halve(&mut self) {
        for word in &mut self.table {
            *word = (*word >> 1) & 0x7777_7777_7777_7777;
        }
        self.additions /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> u64 {
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (n << 7)
    }

    #[test]
    fn counts_and_saturates() {
        let mut s = FrequencySketch::new(1024);
        assert_eq!(s.frequency(h(1)), 0);
        for i in 1..=5 {
            s.increment(h(1));
            assert_eq!(s.frequency(h(1)), i);
        }
        for _ in 0..100 {
            s.increment(h(1));
        }
        assert_eq!(s.frequency(h(1)), 15);
    }

    #[test]
    fn hot_keys_stand_out_from_a_long_tail() {
        let mut s = FrequencySketch::new(1000);
        for round in 0..8 {
            for hot in 0..50 {
                s.increment(h(hot));
            }
            for cold in 0..500 {
                s.increment(h(1_000_000 + round * 500 + cold));
            }
        }
        let hot_min = (0..50).map(|k| s.frequency(h(k))).min().unwrap();
        let cold_max_typical = (0..4000)
            .map(|k| s.frequency(h(1_000_000 + k)))
            .filter(|&f| f >= hot_min)
            .count();
        assert!(hot_min >= 4, "hot keys counted: {hot_min}");
        assert!(
            cold_max_typical < 40,
            "{cold_max_typical} one-time keys look as hot as the hot set"
        );
    }

    #[test]
    fn forgets_after_its_sample() {
        let mut s = FrequencySketch::new(64);
        for _ in 0..15 {
            s.increment(h(7));
        }
        assert_eq!(s.frequency(h(7)), 15);
        // 640 additions of other keys: at least one halving.
        for k in 0..700 {
            s.increment(h(10_000 + k));
        }
        assert!(s.frequency(h(7)) <= 7, "{}", s.frequency(h(7)));
    }
}

"""Hit-ratio simulators over a trace of hashable keys, capacity in entries: LRU, W-TinyLFU
(Caffeine's design) and Belady's optimal. Each returns hits / len(trace); every first request of
a key is a miss for all of them, as it is for the filter.
"""
import heapq
from collections import OrderedDict


def lru(trace, capacity):
    cache, hits = OrderedDict(), 0
    for key in trace:
        if key in cache:
            cache.move_to_end(key)
            hits += 1
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits / len(trace)


def _mix(x):
    """splitmix64's finalizer: a deterministic 64-bit hash of an int (Python's hash() of a str is
    salted per process)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


class FrequencySketch:
    """A count-min sketch of 4-bit counters (saturating at 15), 4 rows, as Caffeine's
    FrequencySketch: 16 counters per entry of capacity in all, and aging by halving every counter
    once 10 x capacity increments were counted (the "reset" that lets old popularity fade)."""

    def __init__(self, capacity):
        width = 1
        while width < 4 * max(capacity, 1):
            width *= 2
        self.mask = width - 1
        self.rows = [[0] * width for _ in range(4)]
        self.sample = 10 * max(capacity, 1)
        self.size = 0

    def _slots(self, key):
        h = _mix(key)
        return (h & self.mask, (h >> 16) & self.mask, (h >> 32) & self.mask, (h >> 48) & self.mask)

    def frequency(self, key):
        return min(row[i] for row, i in zip(self.rows, self._slots(key)))

    def increment(self, key):
        added = False
        for row, i in zip(self.rows, self._slots(key)):
            if row[i] < 15:
                row[i] += 1
                added = True
        if added:
            self.size += 1
            if self.size >= self.sample:
                for row in self.rows:
                    for i, c in enumerate(row):
                        row[i] = c >> 1
                self.size //= 2


def wtinylfu(trace, capacity):
    """W-TinyLFU as Caffeine describes it (static sizes, no hill climbing): a window LRU of 1%
    of the capacity in front of a segmented LRU main (probation 20%, protected 80%). Every access
    counts in the sketch. A new key enters the window; the window's LRU entry overflowing is the
    candidate, admitted to probation only if the sketch counts it more often than probation's LRU
    victim (else dropped). A probation hit moves to protected, whose overflow falls back to
    probation. No doorkeeper (Caffeine has none). Keys must be ints (see `_mix`)."""
    if capacity < 3:
        return lru(trace, capacity)
    window_cap = max(1, round(capacity * 0.01))
    main_cap = capacity - window_cap
    protected_cap = int(main_cap * 0.8)
    sketch = FrequencySketch(capacity)
    window, probation, protected = OrderedDict(), OrderedDict(), OrderedDict()
    hits = 0
    for key in trace:
        sketch.increment(key)
        if key in window:
            window.move_to_end(key)
            hits += 1
            continue
        if key in protected:
            protected.move_to_end(key)
            hits += 1
            continue
        if key in probation:
            hits += 1
            del probation[key]
            protected[key] = None
            if len(protected) > protected_cap:
                demoted, _ = protected.popitem(last=False)
                probation[demoted] = None
            continue
        window[key] = None
        if len(window) <= window_cap:
            continue
        candidate, _ = window.popitem(last=False)
        if len(probation) + len(protected) < main_cap:
            probation[candidate] = None
            continue
        # Main is full: the candidate against probation's LRU end (protected's, if probation is
        # empty).
        victims = probation if probation else protected
        victim = next(iter(victims))
        if sketch.frequency(candidate) > sketch.frequency(victim):
            del victims[victim]
            probation[candidate] = None
    return hits / len(trace)


def belady(trace, capacity):
    """Belady's MIN with bypass: on a miss with the cache full, evict whichever of the cached keys
    and the new one is next asked for farthest in the future (never again counts as infinitely
    far; a key not worth keeping is not admitted). The optimum for any cache of `capacity`
    entries that may decline to store."""
    n = len(trace)
    never = n + 1
    nxt = [never] * n
    last = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(trace[i], never)
        last[trace[i]] = i
    cached = {}  # key -> its next use
    heap = []  # (-next use, key), stale entries skipped lazily
    hits = 0
    for i, key in enumerate(trace):
        if key in cached:
            hits += 1
            cached[key] = nxt[i]
            heapq.heappush(heap, (-nxt[i], key))
            continue
        if capacity <= 0 or nxt[i] == never:
            continue
        if len(cached) >= capacity:
            while True:
                far, victim = heap[0]
                if cached.get(victim) == -far:
                    break
                heapq.heappop(heap)
            if -far <= nxt[i]:
                continue  # the new key is needed later than anything cached: bypass
            heapq.heappop(heap)
            del cached[victim]
        cached[key] = nxt[i]
        heapq.heappush(heap, (-nxt[i], key))
    return hits / n


def filter_model(trace, slots, workers, copies, seed=0):
    """A model of the filter's store today, to check the measurement against: a direct-mapped
    table of `slots` (a key's slot fixed by a keyed hash; a miss stores, replacing whatever held
    the slot), and in front of it each worker's copies of entries it found in the table, at most
    `copies` of them, evicted in insertion order (cache/hot.rs). Request i is on worker
    i % workers. Keys must be ints; `seed` plays the deployment's slot secret."""
    table = [None] * slots
    hot = [OrderedDict() for _ in range(workers)]
    hits = 0
    for i, key in enumerate(trace):
        mine = hot[i % workers]
        if key in mine:
            hits += 1
            continue
        slot = _mix(key ^ seed) % slots
        if table[slot] == key:
            hits += 1
            if copies:
                mine[key] = None
                if len(mine) > copies:
                    mine.popitem(last=False)
        else:
            table[slot] = key
    return hits / len(trace)

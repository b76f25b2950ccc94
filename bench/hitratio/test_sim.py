"""Sanity checks of the simulators: `python3 -m unittest discover -s bench/hitratio`."""
import random
import unittest

import sim
import traces


class Simulators(unittest.TestCase):
    def test_everything_fits(self):
        trace = [i % 10 for i in range(1000)]
        for policy in (sim.lru, sim.wtinylfu, sim.belady):
            self.assertAlmostEqual(policy(trace, 10), 0.99, msg=policy.__name__)

    def test_loop_larger_than_the_cache(self):
        trace = [i % 11 for i in range(1100)]
        self.assertEqual(sim.lru(trace, 10), 0.0)
        # MIN keeps 10 of 11 in place except one rotating slot: about 9 hits in each 10 after the first pass.
        self.assertGreater(sim.belady(trace, 10), 0.8)

    def test_optimal_bounds_the_others(self):
        rng = random.Random(1)
        draw = traces.Zipf(2000, 0.9, rng)
        trace = [draw() for _ in range(20000)]
        for cap in (50, 200, 800):
            best = sim.belady(trace, cap)
            self.assertGreaterEqual(best, sim.lru(trace, cap))
            self.assertGreaterEqual(best, sim.wtinylfu(trace, cap))

    def test_tinylfu_resists_a_scan(self):
        trace = traces.scan(20000, 300, 0.8, 2000, 1000, 7)
        ids = {}
        keyed = [ids.setdefault(k, len(ids)) for k in trace]
        self.assertGreater(sim.wtinylfu(keyed, 400), sim.lru(keyed, 400) + 0.05)


if __name__ == "__main__":
    unittest.main()


class FilterModel(unittest.TestCase):
    def test_direct_mapped_is_at_most_lru_on_a_small_working_set(self):
        rng = random.Random(2)
        draw = traces.Zipf(300, 0.7, rng)
        trace = [draw() for _ in range(20000)]
        model = sim.filter_model(trace, 400, 1, 0)
        self.assertLess(model, sim.lru(trace, 400))
        self.assertGreater(model, 0.5)

    def test_copies_add_capacity(self):
        rng = random.Random(3)
        draw = traces.Zipf(2000, 0.9, rng)
        trace = [draw() for _ in range(30000)]
        self.assertGreater(sim.filter_model(trace, 256, 1, 500), sim.filter_model(trace, 256, 1, 0) + 0.05)

    def test_copies_are_only_of_entries_found_in_the_table(self):
        # In a loop, two keys sharing a slot displace each other before either is asked for
        # again, so neither is ever found there, nor copied.
        trace = [i % 300 for i in range(30000)]
        self.assertEqual(sim.filter_model(trace, 256, 1, 300), sim.filter_model(trace, 256, 1, 0))

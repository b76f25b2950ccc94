"""Request traces for `make bench-hitratio`: lists of key names, deterministic (fixed seeds).

Sizes are relative to `base`, the shared table's `cache_slots` (2048), so "10x capacity" means
10 x 2048 distinct keys whatever other memory a configuration adds. Every trace has `n` requests.
Pure Python (random.Random with integer seeds gives the same sequence on every CPython 3).
"""
import bisect
import itertools
import random


class Zipf:
    """Ranks 0..n-1 with P(rank r) proportional to 1 / (r + 1) ** s (inverse CDF by bisection)."""

    def __init__(self, n, s, rng):
        self.cdf = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(n)))
        self.total = self.cdf[-1]
        self.rng = rng

    def __call__(self):
        return bisect.bisect_left(self.cdf, self.rng.random() * self.total)


def zipf(n, keys, s, seed, prefix):
    """Independent draws from a zipf(s) popularity over `keys` keys."""
    draw = Zipf(keys, s, random.Random(seed))
    return [f"{prefix}/{draw()}" for _ in range(n)]


def scan(n, hot_keys, s, burst, scan_len, seed):
    """A hot set read with zipf(s) popularity, and every `burst` hot requests a one-shot scan of
    `scan_len` cold keys in a row, each never asked for again (a crawler, a batch export)."""
    rng = random.Random(seed)
    draw = Zipf(hot_keys, s, rng)
    out, cold = [], itertools.count()
    while len(out) < n:
        out.extend(f"scan-hot/{draw()}" for _ in range(burst))
        out.extend(f"scan-cold/{next(cold)}" for _ in range(scan_len))
    return out[:n]


def loop(n, keys):
    """The same `keys` keys in the same order, over and over (LRU's worst case once keys > size)."""
    return [f"loop/{i % keys}" for i in range(n)]


def graphql(n, seed):
    """Traffic shaped like a GraphQL API behind a web or mobile client.

    Why this shape: a client's page view sends one operation whose *variables* pick what it
    shows, so a few operations fan out into many keys with heavy-tailed popularity (a catalog
    where some products sell far more than others, search terms, result pages, most reads on
    page 1). The app shell (navigation, configuration, per-locale home page) is a handful of keys
    every session asks for once at start; Apollo and urql keep it in the client cache afterwards,
    so it is hot but not every request. Logged-in users send private operations (`me`, `cart`),
    keyed by identity (the filter's scope), which repeat within that user's session and almost
    never after it: short reuse, then dead weight in a recency-only cache. Sessions interleave
    (200 at once), and users mostly appear once in a trace this short. Finally a long tail of
    one-off requests (ad-hoc queries, rare variable values, cache-busting clients) that are never
    asked for again.

    Mix per page view: product detail 45%, search 25%, home 10%, private (me / cart) 15%,
    one-off 5%. Products: 20000, zipf 0.9. Search: 3000 terms, zipf 1.0, page 1/2/3 at 70/20/10%.
    Sessions: 8 page views on average (geometric), 25% of the first views of a session hit
    `me` first (a logged-in client's bootstrap).
    """
    rng = random.Random(seed)
    product = Zipf(20000, 0.9, random.Random(seed + 1))
    term = Zipf(3000, 1.0, random.Random(seed + 2))
    locales = ["en-US", "en-GB", "de-DE", "fr-FR"]
    users = itertools.count()
    oneoff = itertools.count()

    def page_view(user, first):
        reqs = []
        if first:
            locale = rng.choice(locales)
            reqs += [f"gql/Nav/{locale}", f"gql/Config/{locale}"]
            if rng.random() < 0.25:
                reqs.append(f"gql/Me/user-{user}")
        r = rng.random()
        if r < 0.45:
            reqs.append(f"gql/Product/{product()}")
        elif r < 0.70:
            page = 1 if rng.random() < 0.7 else (2 if rng.random() < 2 / 3 else 3)
            reqs.append(f"gql/Search/{term()}/{page}")
        elif r < 0.80:
            reqs.append(f"gql/Home/{rng.choice(locales)}")
        elif r < 0.95:
            reqs.append(f"gql/{rng.choice(['Me', 'Cart'])}/user-{user}")
        else:
            reqs.append(f"gql/OneOff/{next(oneoff)}")
        return reqs

    def session():
        user = next(users)
        views = 1
        while rng.random() < 7 / 8:
            views += 1
        return {"user": user, "left": views, "queue": [], "first": True}

    active = [session() for _ in range(200)]
    out = []
    while len(out) < n:
        i = rng.randrange(len(active))
        s = active[i]
        if not s["queue"]:
            if s["left"] == 0:
                active[i] = s = session()
            s["queue"] = page_view(s["user"], s["first"])
            s["first"] = False
            s["left"] -= 1
        out.append(s["queue"].pop(0))
    return out


def all_traces(n, base):
    """Name -> (description, trace)."""
    ten = 10 * base
    traces = {}
    for i, s in enumerate((0.6, 0.8, 1.0, 1.2)):
        traces[f"zipf-{s}"] = (f"zipf {s} over {ten} keys (10x slots)", zipf(n, ten, s, 100 + i, f"zipf{s}"))
    ws = int(0.75 * base)
    # Three times as long: at n requests its cold misses alone (one per key) cap every cache
    # below 0.93, and what it tests is whether a cache that fits keeps all of it (0.97 and up).
    traces["working-set"] = (f"zipf 0.7 over {ws} keys (0.75x slots)", zipf(3 * n, ws, 0.7, 200, "ws"))
    hot, burst = int(0.75 * base), 4000
    traces["scan"] = (f"zipf 0.8 over {hot} hot keys; after every {burst} of them {base} one-shot cold keys",
                      scan(n, hot, 0.8, burst, base, 300))
    size = int(1.1 * base)
    traces["loop"] = (f"{size} keys in order, repeated (1.1x slots)", loop(n, size))
    traces["graphql"] = ("sessions: shell, products, search, private me/cart, one-offs (see traces.py)",
                         graphql(n, 400))
    return traces

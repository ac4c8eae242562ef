# Spillway. `make run` starts a local cluster; `make test` runs every test.
GO       ?= go
BIN      := bin/spillway
FUZZTIME ?= 60s
# Debian packages the interop tests drive: a reference memcached, real
# clients (the binary protocol's among them), and Prometheus (promtool and
# a server, for deploy's tests).
TEST_PKGS := memcached libmemcached-tools python3-pymemcache prometheus php-cli php-memcached ruby ruby-dalli

.PHONY: build run test test-deps test-coherence test-faults bench bench-memory bench-compare fuzz vet clean

build:
	$(GO) build -o $(BIN) ./cmd/spillway

# A three-node cluster on loopback (cmd/localcluster): clients on
# 11311-11313, gossip on 11411-11413, metrics on 11511-11513, peers on
# 21311-21313, clear of a memcached on 11211 (Debian's service, which
# `make test` installs). RUN_PORT=N moves them all (N, N+100, N+200,
# N+10000). If a node cannot start, make run says why, stops the others and
# fails; Ctrl-C stops the nodes one after another.
RUN_PORT ?= 11311
LOCALCLUSTER := bin/localcluster

run: build
	@$(GO) build -o $(LOCALCLUSTER) ./cmd/localcluster
	@$(LOCALCLUSTER) -bin $(BIN) -port $(RUN_PORT)

vet:
	$(GO) vet ./...

# Installs the reference server and clients when missing (needs root and
# apt-get; elsewhere the interop tests skip loudly unless SPILLWAY_CI is set).
test-deps:
	@missing=""; \
	command -v memcached >/dev/null || missing="$$missing memcached"; \
	command -v memccapable >/dev/null || missing="$$missing libmemcached-tools"; \
	/usr/bin/python3 -c 'import pymemcache' 2>/dev/null || missing="$$missing python3-pymemcache"; \
	php -r 'exit(class_exists("Memcached") ? 0 : 1);' 2>/dev/null || missing="$$missing php-cli php-memcached"; \
	ruby -e 'require "dalli"' 2>/dev/null || missing="$$missing ruby ruby-dalli"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TEST_PKGS) >/dev/null; \
		else \
			echo "WARNING: missing$$missing; interop tests will skip (sudo apt-get install $(TEST_PKGS))"; \
		fi; \
	fi

test: test-deps vet
	$(GO) test -race -timeout 9m ./...
	@# The allocation counts skip under the race detector, which allocates:
	@# run them once without it.
	$(GO) test -count=1 -run '^(TestHotPathAllocs|TestHotPathAllocsCluster|TestNoAllocations)$$' ./server/ ./internal/rawio/

# The history checker (issue 9) in its long form: every scenario (steady,
# join, leave, crash and restart, rolling restart, flush_all, join with views
# held back) loads a cluster for seconds, then porcupine checks each key's
# history. Prints per scenario the operations checked and the violations;
# a violation's porcupine visualisation is written to a file whose path it
# prints. Its short form runs in `make test`; both fail while the code
# breaks the coherence contract.
test-coherence:
	SPILLWAY_COHERENCE=long $(GO) test -count=1 -timeout 30m -v -run 'TestHistory|TestCoherence' ./server/

# The fault harness (issue 10): five `spillway serve` processes, each in a
# network namespace of its own on a bridge, loaded from the root namespace
# by the bench (every value checked) and the history checker, through
# kill -9 and restart, a 2|3 partition and its heal, 200 ms + 5 % loss on
# one node's link, a rolling restart and a flash-sale hot key. Prints one
# table row per scenario (also written to bin/faults-$(FAULTS).md) and
# fails on a wrong value, a checker violation or a server crash. Needs root
# (installs iproute2 if missing); removes its namespaces (prefix spwf-),
# also those a crashed run left. FAULTS=short is CI's ~2.5 min form;
# long takes ~6 min. README "Operations" has the table.
FAULTS ?= long

test-faults: build
	SPILLWAY_FAULTS=$(FAULTS) SPILLWAY_BIN=$(abspath $(BIN)) SPILLWAY_FAULTS_TABLE=$(abspath bin/faults-$(FAULTS).md) \
		$(GO) test -count=1 -timeout 20m -v -run '^(TestFaults|TestNet)$$' ./server/ ./internal/faultnet/

# Micro-benchmarks of the parser, store and ring, then bounded loads against
# plain consistent hashing on a local 3-node cluster with a hot-key workload.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./protocol/ ./store/ ./ring/
	./$(BIN) bench --local 3 --compare --zipf 1.2 --keys 10000 --conns 30 --duration 5s \
		--prefill --origin-latency 1ms epsilon=0.25 epsilon=inf

# memcached and Spillway side by side on cache-aside traffic (bench/memory):
# items held per MiB of RSS at -m 1024, then hit ratio at equal memory
# against memcached -m 64 on Zipf 0.99, Zipf 0.8, uniform and a scan mix,
# with Spillway's GC pauses. Fresh processes on loopback ports; about four
# minutes. Prints the tables of README "Memory".
bench-memory: build
	$(GO) run ./bench/memory -spillway $(BIN) -memcached $$(command -v memcached || echo /usr/bin/memcached)

# Spillway against memcached and twemproxy, the table of issue 12
# (bench/compare): a node against memcached -t 2 (and bench/floor, the
# least a Go server does, against it too), a 3-node cluster against
# nutcracker in front of 3 memcached, all under the same spillway bench
# load, alternating fresh processes on loopback ports run by run; then
# libmemcached's memcaslap as a cross-check. Medians of 3 runs x 6 s
# (COMPARE_FLAGS='-runs 1 -duration 2s' for a quick look); about 11 minutes.
# Installs the Debian packages when missing (root and apt-get); elsewhere
# the rows that need them are skipped, loudly. perf (linux-perf) is
# optional: it counts the system calls of the per-request table.
COMPARE_FLAGS ?=

bench-compare: build
	@missing=""; \
	command -v memcached >/dev/null || missing="$$missing memcached"; \
	command -v nutcracker >/dev/null || [ -x /usr/sbin/nutcracker ] || missing="$$missing nutcracker"; \
	command -v memcaslap >/dev/null || missing="$$missing libmemcached-tools"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "WARNING: missing$$missing; their rows will be SKIPPED (sudo apt-get install$$missing)"; \
		fi; \
	fi
	@# perf counts the system calls per request; without it that column is "—".
	@command -v perf >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null 2>&1; } || \
		echo "WARNING: no perf (Debian's linux-perf): system calls per request will not be counted"
	$(GO) build -o bin/floor ./bench/floor
	$(GO) run ./bench/compare -spillway $(BIN) -floor bin/floor \
		-memcached $$(command -v memcached || echo /usr/bin/memcached) \
		-nutcracker $$(command -v nutcracker || echo /usr/sbin/nutcracker) \
		-memcaslap $$(command -v memcaslap || echo /usr/bin/memcaslap) $(COMPARE_FLAGS)

# A new input is minimized for at most 5 s (Go's default is 60 s, which can
# take a whole short run while the fuzzer executes nothing).
FUZZFLAGS = -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s

# Each target is fuzzed on its own. Go's fuzzer sometimes ends a run that
# found nothing with "context deadline exceeded" (the time ran out while it
# was minimizing a new, passing input): that is not a failure, and only
# a run that wrote a failing input, or failed otherwise, stops make.
FUZZ_TARGETS = FuzzParse:protocol FuzzReader:protocol FuzzReadReply:protocol \
	FuzzRequestRoundTrip:protocol FuzzBinary:protocol FuzzPick:ring \
	FuzzRequestLines:peers/wire FuzzIndex:store

fuzz:
	@set -e; mkdir -p bin; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=./$${t#*:}/; \
		echo "$(GO) test $(FUZZFLAGS) -fuzz '^$$name\$$' $$pkg"; \
		if ! $(GO) test $(FUZZFLAGS) -fuzz "^$$name\$$" $$pkg > bin/fuzz.log 2>&1; then \
			tail -20 bin/fuzz.log; \
			if grep -q 'Failing input written\|panic:' bin/fuzz.log || ! grep -q 'context deadline exceeded' bin/fuzz.log; then exit 1; fi; \
			echo "$$name: the fuzzer's time ran out while it minimized a passing input; no failure found"; \
		else tail -3 bin/fuzz.log; fi; \
	done

clean:
	rm -rf bin

package server

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"spillway/ring"
)

// Real clients of the binary protocol, each against one node and against
// a three-node cluster entered at a node that owns none of the keys the
// client uses: every write is forwarded to its owner and every read routed,
// as for a text client.

// binaryTarget is where a client test runs: one node, or the entry node of
// a cluster.
type binaryTarget struct {
	name  string
	entry *testNode // nil for a single node
	addr  string
}

// binaryTargets starts one node and a three-node cluster whose first node
// (the entry) owns none of keys.
func binaryTargets(t *testing.T, keys []string) []binaryTarget {
	t.Helper()
	nodes := clusterAvoiding(t, keys, clusterOpts{})
	return []binaryTarget{
		{name: "node", addr: startSpillway(t)},
		{name: "cluster", entry: nodes[0], addr: nodes[0].addr},
	}
}

// clusterAvoiding starts three nodes; the first owns none of keys. It
// finds names for them, before starting anything, whose ring leaves the
// first none of the keys (a ring depends on the names only: all three
// vary, since keys that one pair of fixed nodes splits badly stay split
// badly), then checks the ring the cluster built.
func clusterAvoiding(t *testing.T, keys []string, o clusterOpts) []*testNode {
	t.Helper()
	var names []string
search:
	for i := range 1_000_000 {
		names = []string{fmt.Sprintf("entry%d", i), fmt.Sprintf("node1-%d", i), fmt.Sprintf("node2-%d", i)}
		r := ring.New([]ring.Node{{ID: names[0]}, {ID: names[1]}, {ID: names[2]}}, ring.Config{})
		for _, k := range keys {
			if r.Owner(k) == names[0] {
				continue search
			}
		}
		break
	}
	entry := names[0]
	var nodes []*testNode
	for _, name := range names {
		nodes = append(nodes, startNode(t, name, nodes, o))
	}
	waitConverged(t, nodes)
	v := nodes[0].srv.cl.view.Load()
	for _, k := range keys {
		if v.ring.Owner(k) == entry {
			t.Fatalf("the entry node %s owns %q", entry, k)
		}
	}
	return nodes
}

// checkEntryOwnsNothing checks, after a client ran through a cluster's
// entry node, that the entry stored none of keys (writes went to their
// owners) and did forward writes.
func checkEntryOwnsNothing(t *testing.T, tg binaryTarget, keys []string) {
	t.Helper()
	if tg.entry == nil {
		return
	}
	for _, k := range keys {
		if _, ok := tg.entry.srv.store.Peek(k); ok {
			t.Errorf("the entry node stored %q, which it does not own", k)
		}
	}
	if tg.entry.srv.counters[ctrForwardedWrites].Load() == 0 {
		t.Error("the entry node forwarded no write")
	}
}

// memccapableKeys are the keys memccapable's binary tests use.
var memccapableKeys = func() []string {
	var keys []string
	for _, c := range []string{"set", "add", "replace", "delete", "get", "getk", "incr", "decr", "flush"} {
		keys = append(keys, "test_binary_"+c)
		if c != "getk" {
			keys = append(keys, "test_binary_"+c+"q")
		}
	}
	keys = append(keys, "test_binary_getkq")
	for _, c := range []string{"append", "prepend"} {
		keys = append(keys, "test_binary_"+c, "test_binary_"+c+"q")
	}
	return keys
}()

// TestBinaryMemccapable runs libmemcached's binary conformance suite
// (memccapable -b: every binary test it has).
func TestBinaryMemccapable(t *testing.T) {
	bin := requireTool(t, "memccapable", "libmemcached-tools")
	for _, tg := range binaryTargets(t, memccapableKeys) {
		t.Run(tg.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tg.addr)
			out, err := exec.Command(bin, "-h", host, "-p", port, "-b", "-t", "5").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "All tests passed") {
				t.Fatalf("memccapable -b: %v\n%s", err, out)
			}
			if n := strings.Count(string(out), "[pass]"); n < 27 {
				t.Fatalf("memccapable -b passed %d tests, want all 27:\n%s", n, out)
			}
			checkEntryOwnsNothing(t, tg, memccapableKeys)
		})
	}
}

// clientKeys are the keys a client script is given, in its order.
func clientKeys(prefix string) []string {
	var keys []string
	for _, k := range []string{"a", "b", "c", "num", "touch", "fetch", "multi1", "multi2", "multi3", "miss", "num-miss"} {
		keys = append(keys, prefix+"-"+k)
	}
	return keys
}

// testBinaryClient runs script (written to a file with extension ext)
// with interpreter against each target, giving it host, port and the keys
// of prefix; it must print want. probe is a script that fails when the
// client library is missing, which debianPkgs install.
func testBinaryClient(t *testing.T, interpreter, probe, debianPkgs, script, ext, prefix, want string) {
	bin := requireTool(t, interpreter, debianPkgs)
	flag := map[string]string{".php": "-r", ".rb": "-e"}[ext]
	if out, err := exec.Command(bin, flag, probe).CombinedOutput(); err != nil {
		missingTool(t, fmt.Sprintf("the client library (%v: %s)", err, out), debianPkgs)
	}
	file := filepath.Join(t.TempDir(), "client"+ext)
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := clientKeys(prefix)
	for _, tg := range binaryTargets(t, keys) {
		t.Run(tg.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tg.addr)
			out, err := exec.Command(bin, append([]string{file, host, port}, keys...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("%s: %v\n%s", interpreter, err, out)
			}
			checkEntryOwnsNothing(t, tg, keys)
		})
	}
}

// TestBinaryPHPMemcached runs php-memcached (libmemcached underneath) in
// binary mode.
func TestBinaryPHPMemcached(t *testing.T) {
	testBinaryClient(t, "php", `exit(class_exists("Memcached") ? 0 : 1);`, "php-cli php-memcached",
		phpMemcachedScript, ".php", "php", "php-memcached ok")
}

const phpMemcachedScript = `<?php
[, $host, $port, $a, $b, $c, $num, $touch, $fetch, $m1, $m2, $m3, $miss, $numMiss] = $argv;
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->setOption(Memcached::OPT_SEND_TIMEOUT, 5000000);
$m->setOption(Memcached::OPT_RECV_TIMEOUT, 5000000);
$m->addServer($host, (int)$port);
function eq($got, $want, $what) {
    global $m;
    if ($got !== $want) {
        fwrite(STDERR, "$what: got " . var_export($got, true) . ", want " . var_export($want, true)
            . " (result " . $m->getResultCode() . ": " . $m->getResultMessage() . ")\n");
        exit(1);
    }
}
eq($m->flush(), true, "flush");
eq($m->set($a, "alpha", 100), true, "set");
eq($m->get($a), "alpha", "get");
eq($m->get($miss), false, "get miss");
eq($m->getResultCode(), Memcached::RES_NOTFOUND, "get miss result");
eq($m->setMulti([$b => "beta", $c => "gamma"]), true, "setMulti");
$got = $m->getMulti([$a, $b, $miss, $c]);
ksort($got);
$want = [$a => "alpha", $b => "beta", $c => "gamma"];
ksort($want);
eq($got, $want, "getMulti");
$r = $m->get($a, null, Memcached::GET_EXTENDED);
eq($r["value"], "alpha", "get extended");
eq($m->cas($r["cas"], $a, "alpha2"), true, "cas");
eq($m->cas($r["cas"], $a, "alpha3"), false, "stale cas");
eq($m->getResultCode(), Memcached::RES_DATA_EXISTS, "stale cas result");
eq($m->get($a), "alpha2", "get after cas");
eq($m->increment($num, 5, 10, 0), 10, "increment creates with the initial value");
eq($m->increment($num, 5), 15, "increment");
eq($m->decrement($num, 20), 0, "decrement floors at 0");
eq($m->increment($numMiss, 1), false, "increment of a missing key");
eq($m->set($touch, "t", 1000), true, "set to touch");
eq($m->touch($touch, 100), true, "touch");
eq($m->touch($miss, 100), false, "touch miss");
eq($m->append($a, "++"), true, "append");
eq($m->prepend($a, "--"), true, "prepend");
eq($m->get($a), "--alpha2++", "get after append and prepend");
eq($m->append($miss, "x"), false, "append to a missing key");
eq($m->add($a, "x"), false, "add of an existing key");
eq($m->add($fetch, "added"), true, "add");
eq($m->replace($miss, "x"), false, "replace of a missing key");
eq($m->replace($fetch, "replaced"), true, "replace");
eq($m->delete($b), true, "delete");
eq($m->delete($b), false, "delete of a missing key");
eq($m->get($b), false, "get after delete");
eq($m->setMulti([$m1 => "1", $m2 => "2", $m3 => "3"]), true, "setMulti again");
eq($m->deleteMulti([$m1, $m2]), [$m1 => true, $m2 => true], "deleteMulti");
$v = $m->getVersion();
eq(is_array($v) && count($v) === 1 && str_starts_with(array_values($v)[0], "1.6."), true, "getVersion");
$st = $m->getStats();
eq(array_values($st)[0]["cmd_get"] > 0, true, "getStats cmd_get");
eq($m->flush(), true, "flush");
eq($m->get($a), false, "get after flush");
echo "php-memcached ok\n";
`

// TestBinaryDalli runs Ruby's dalli 3.0.6, which speaks nothing but the
// binary protocol.
func TestBinaryDalli(t *testing.T) {
	testBinaryClient(t, "ruby", `require "dalli"`, "ruby ruby-dalli", dalliScript, ".rb", "dalli", "dalli ok")
}

const dalliScript = `
require "dalli"
Dalli.logger.level = Logger::ERROR
host, port, a, b, c, num, touch, fetch, m1, m2, m3, miss, num_miss = ARGV
dc = Dalli::Client.new("#{host}:#{port}", socket_timeout: 5, socket_max_failures: 1)
def eq(got, want, what)
  raise "#{what}: got #{got.inspect}, want #{want.inspect}" unless got == want
end
eq(dc.flush, [true], "flush")
eq(!!dc.set(a, "alpha"), true, "set")
eq(dc.get(a), "alpha", "get")
eq(dc.get(miss), nil, "get miss")
eq(!!dc.set(b, "beta", nil, raw: true), true, "set raw")
eq(dc.get_multi(a, b, miss, c), { a => "alpha", b => "beta" }, "get_multi")
eq(!!dc.cas(a) { |v| v + "!" }, true, "cas")
eq(dc.get(a), "alpha!", "get after cas")
eq(!!dc.cas(a) { |v| dc.set(a, "other"); v + "?" }, false, "cas that lost to a set")
eq(dc.get(a), "other", "get after the lost cas")
v, cas = dc.get_cas(a)
eq(v, "other", "get_cas")
eq(!!dc.set_cas(a, "cas-set", cas), true, "set_cas")
eq(!!dc.set_cas(a, "stale", cas), false, "stale set_cas")
eq(!!dc.delete_cas(a, cas), false, "stale delete_cas")
eq(dc.incr(num, 1, nil, 10), 10, "incr creates with the default")
eq(dc.incr(num, 5), 15, "incr")
eq(dc.decr(num, 20), 0, "decr floors at 0")
eq(dc.incr(num_miss, 1), nil, "incr of a missing key without a default")
eq(!!dc.set(touch, "t", 1000), true, "set to touch")
eq(!!dc.touch(touch, 100), true, "touch")
eq(dc.touch(miss, 100), nil, "touch miss")
eq(dc.gat(touch, 100), "t", "gat")
eq(dc.fetch(fetch) { "computed" }, "computed", "fetch on a miss")
eq(dc.fetch(fetch) { "again" }, "computed", "fetch on a hit")
eq(!!dc.add(fetch, "x"), false, "add of an existing key")
eq(dc.replace(miss, "x"), 0, "replace of a missing key (dalli 3.0.6 answers CAS 0)")
eq(!!dc.append(b, "++"), true, "append")
eq(!!dc.prepend(b, "--"), true, "prepend")
eq(dc.get(b, raw: true), "--beta++", "get after append and prepend")
dc.multi do
  dc.set(m1, "1")
  dc.set(m2, "2")
  dc.set(m3, "3")
  dc.delete(miss)
end
eq(dc.get_multi(m1, m2, m3), { m1 => "1", m2 => "2", m3 => "3" }, "get_multi after a quiet multi-set")
eq(!!dc.delete(m1), true, "delete")
eq(!!dc.delete(m1), false, "delete of a missing key")
eq(dc.version.values.first.start_with?("1.6."), true, "version")
eq(dc.stats.values.first["cmd_get"].to_i > 0, true, "stats")
eq(dc.flush, [true], "flush")
eq(dc.get(b), nil, "get after flush")
puts "dalli ok"
`

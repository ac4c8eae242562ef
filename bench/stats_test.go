package bench

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

func TestParseStats(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire string
		want map[string]string
		ok   bool
	}{
		{"memcached", "STAT pid 12\r\nSTAT rusage_user 1.500000\r\nSTAT version 1.6.18\r\nEND\r\n",
			map[string]string{"pid": "12", "rusage_user": "1.500000", "version": "1.6.18"}, true},
		{"empty", "END\r\n", map[string]string{}, true},
		{"error", "ERROR\r\n", nil, false},
		{"junk", "HELLO\r\n", nil, false},
		{"eof", "STAT pid 1\r\n", nil, false},
		{"no-cr", "STAT pid 1\nEND\n", nil, false},
	} {
		got, err := parseStats(bufio.NewReader(strings.NewReader(tc.wire)))
		if (err == nil) != tc.ok || len(got) != len(tc.want) {
			t.Errorf("%s: got %v, %v", tc.name, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got[k], v)
			}
		}
	}
}

func TestServerLoad(t *testing.T) {
	snap := func(kv ...string) snapshot {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return snapshot{vals: m}
	}
	before := snap("pid", "7", "cmd_get", "100", "cmd_set", "10", "rusage_user", "1.000000", "rusage_system", "0.250000")
	after := snap("pid", "7", "cmd_get", "1100", "cmd_set", "110", "rusage_user", "2.000000", "rusage_system", "0.750000")
	l := serverLoad("127.0.0.1:1", before, after)
	if l.Requests != 1100 || l.CmdGet != 1000 || l.HasCluster || !l.HasCPU || l.CPUSeconds != 1.5 || l.PID != 7 {
		t.Errorf("memcached-like: %+v", l)
	}
	// Spillway: "served" is the load measure.
	sb := snap("served", "5", "spilled_served", "1", "cmd_get", "0", "cmd_set", "0")
	sa := snap("served", "105", "spilled_served", "21", "cmd_get", "500", "cmd_set", "0")
	if l := serverLoad("a:1", sb, sa); l.Requests != 100 || l.SpilledServed != 20 || !l.HasCluster || l.HasCPU {
		t.Errorf("spillway-like: %+v", l)
	}
	// A counter that went backwards (restart) gives no figure.
	if l := serverLoad("a:1", snap("cmd_get", "9"), snap("cmd_get", "3")); l.CmdGet != 0 {
		t.Errorf("restart: %+v", l)
	}

	me := os.Getpid()
	for _, tc := range []struct {
		name      string
		servers   []ServerLoad
		cpu       float64
		maxMean   float64
		inclusive bool
	}{
		{"separate processes", []ServerLoad{
			{Addr: "127.0.0.1:1", Requests: 300, HasCPU: true, CPUSeconds: 1, PID: 10},
			{Addr: "127.0.0.1:2", Requests: 100, HasCPU: true, CPUSeconds: 1, PID: 11},
		}, 2, 1.5, false},
		{"one process, two addresses", []ServerLoad{
			{Addr: "127.0.0.1:1", Requests: 200, HasCPU: true, CPUSeconds: 3, PID: 10},
			{Addr: "127.0.0.2:2", Requests: 200, HasCPU: true, CPUSeconds: 3, PID: 10},
		}, 3, 1, false},
		{"same pid on two hosts", []ServerLoad{
			{Addr: "10.0.0.1:1", Requests: 100, HasCPU: true, CPUSeconds: 1, PID: 10},
			{Addr: "10.0.0.2:1", Requests: 100, HasCPU: true, CPUSeconds: 1, PID: 10},
		}, 2, 1, false},
		{"embedded in this process", []ServerLoad{
			{Addr: "127.0.0.1:1", Requests: 100, HasCPU: true, CPUSeconds: 2, PID: me},
		}, 2, 1, true},
		{"one without rusage", []ServerLoad{
			{Addr: "127.0.0.1:1", Requests: 100, HasCPU: true, CPUSeconds: 2, PID: 10},
			{Addr: "127.0.0.1:2", Requests: 0},
		}, 0, 2, false},
	} {
		l := summariseLoad(tc.servers, 400)
		if l.ServerCPU != tc.cpu || l.MaxMean != tc.maxMean || l.CPUIncludesClient != tc.inclusive {
			t.Errorf("%s: %+v", tc.name, l)
		}
		if tc.cpu > 0 && l.OpsPerServerCPU != 400/tc.cpu {
			t.Errorf("%s: ops per CPU-second %v", tc.name, l.OpsPerServerCPU)
		}
	}
}

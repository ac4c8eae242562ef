package server

import (
	"testing"
	"time"
)

func TestNewerRun(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	early, late := newBoot(t0), newBoot(t0.Add(time.Nanosecond))
	same := newBoot(t0)
	legacy := "0123456789abcdef" // a run of Spillway before ordered runs: 8 random bytes
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"started later", late, early, true},
		{"started earlier", early, late, false},
		{"itself", early, early, false},
		{"started at the same time", same, early, false},
		{"against a run that carries no start", late, legacy, false},
		{"a run that carries no start", legacy, early, false},
		{"not hex", "zz" + late[2:], early, false},
		{"none", "", early, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newerRun(tt.a, tt.b); got != tt.want {
				t.Errorf("newerRun(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
	if start, ok := runStart(late); !ok || start != t0.UnixNano()+1 {
		t.Errorf("runStart(%q) = %d, %v; want %d, true", late, start, ok, t0.UnixNano()+1)
	}
	if early == same {
		t.Errorf("two runs started at the same time share boot ID %q", early)
	}
}

package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestIncr checks incr/decr against what a real memcached 1.6.18 answers
// (probed over its text protocol), including the space padding of results
// shorter than the old value and safe_strtoull's parsing.
func TestIncr(t *testing.T) { eachEngine(t, testIncr) }

func testIncr(t *testing.T, eng Engine) {
	tests := []struct {
		name      string
		value     string // "" with missing: no item
		missing   bool
		delta     uint64
		decr      bool
		want      uint64
		wantErr   error
		wantValue string
	}{
		{name: "incr", value: "1", delta: 1, want: 2, wantValue: "2"},
		{name: "grows", value: "99", delta: 1, want: 100, wantValue: "100"},
		{name: "decr-pads", value: "10", delta: 1, decr: true, want: 9, wantValue: "9 "},
		{name: "decr-floor", value: "5", delta: 10, decr: true, want: 0, wantValue: "0"},
		{name: "decr-floor-pads", value: "110", delta: 1000, decr: true, want: 0, wantValue: "0  "},
		{name: "wraps", value: "18446744073709551615", delta: 1, want: 0, wantValue: "0" + strings.Repeat(" ", 19)},
		{name: "max-delta", value: "0", delta: 1<<64 - 1, want: 1<<64 - 1, wantValue: "18446744073709551615"},
		{name: "above-2^63", value: "09223372036854775808", delta: 1, want: 1<<63 + 1, wantValue: "9223372036854775809 "},
		{name: "leading-zeros", value: "000000000000000000000000000001", delta: 1, want: 2, wantValue: "2" + strings.Repeat(" ", 29)},
		{name: "trailing-text-after-space", value: "12 abc", delta: 1, want: 13, wantValue: "13    "},
		{name: "leading-space", value: " 5", delta: 1, want: 6, wantValue: "6 "},
		{name: "leading-tab-vt", value: "\t\v5", delta: 10, want: 15, wantValue: "15 "},
		{name: "trailing-tab", value: "5\t", delta: 1, want: 6, wantValue: "6 "},
		{name: "newline-inside", value: "1\n2", delta: 1, want: 2, wantValue: "2  "},
		{name: "nul-inside", value: "1\x002", delta: 1, want: 2, wantValue: "2  "},
		{name: "plus-sign", value: "+5", delta: 1, want: 6, wantValue: "6 "},
		{name: "minus-zero", value: "-0", delta: 1, want: 1, wantValue: "1 "},
		{name: "minus-wraps", value: "-18446744073709551615", delta: 1, want: 2, wantValue: "2" + strings.Repeat(" ", 20)},
		{name: "negative", value: "-1", delta: 1, wantErr: ErrNotNumber, wantValue: "-1"},
		{name: "control-char", value: "1\x01", delta: 1, wantErr: ErrNotNumber, wantValue: "1\x01"},
		{name: "letters", value: "abc", delta: 1, wantErr: ErrNotNumber, wantValue: "abc"},
		{name: "digits-then-letter", value: " 5x", delta: 1, wantErr: ErrNotNumber, wantValue: " 5x"},
		{name: "empty", value: "", delta: 1, wantErr: ErrNotNumber, wantValue: ""},
		{name: "space-only", value: " ", delta: 1, wantErr: ErrNotNumber, wantValue: " "},
		{name: "sign-only", value: "-", delta: 1, wantErr: ErrNotNumber, wantValue: "-"},
		{name: "space-after-sign", value: "- 1", delta: 1, wantErr: ErrNotNumber, wantValue: "- 1"},
		{name: "overflow", value: "18446744073709551616", delta: 1, wantErr: ErrNotNumber, wantValue: "18446744073709551616"},
		{name: "missing", missing: true, delta: 1, wantErr: ErrNotFound},
		{name: "missing-decr", missing: true, delta: 1, decr: true, wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestStore(t, eng, 0)
			var old uint64
			exp := in(100)
			if !tt.missing {
				old = s.Set(Item{Key: "n", Value: []byte(tt.value), Flags: 5, Expires: exp})
			}
			got, err := s.Incr("n", tt.delta, tt.decr)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("Incr = %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
			if tt.missing {
				mustMiss(t, s, "n")
				return
			}
			it := mustGet(t, s, "n")
			if string(it.Value) != tt.wantValue || it.Flags != 5 || !it.Expires.Equal(exp) {
				t.Errorf("Get = %q flags %d exp %v; want %q flags 5 exp %v", it.Value, it.Flags, it.Expires, tt.wantValue, exp)
			}
			if changed := it.CAS != old; changed != (err == nil) {
				t.Errorf("CAS %d -> %d: a successful incr must change it, a failed one must not", old, it.CAS)
			}
		})
	}
}

func TestIncrExpired(t *testing.T) { eachEngine(t, testIncrExpired) }

func testIncrExpired(t *testing.T, eng Engine) {
	s, clk := newTestStore(t, eng, 0)
	s.Set(Item{Key: "n", Value: []byte("1"), Expires: in(1)})
	clk.Advance(time.Second)
	if _, err := s.Incr("n", 1, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Incr on an expired item: %v, want ErrNotFound", err)
	}
}

func TestParseCounter(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, {"99999999999999999999999", 0, false},
		{"", 0, false}, {"x", 0, false}, {"1x", 0, false}, {"1 x", 1, true},
		{"-0", 0, true}, {"-1", 0, false}, {"-9223372036854775808", 0, false},
		{"-9223372036854775809", 1<<63 - 1, true}, {"\f\r\n 7\r", 7, true},
	}
	for _, tt := range tests {
		got, err := ParseCounter([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseCounter(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

package peers

import (
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	tests := []Meta{
		{},
		{Client: "10.0.0.1:11211", Peer: "10.0.0.1:11311", Weight: 3},
		{Client: "[::1]:11211", Peer: "host.example:11311"},
		{Client: strings.Repeat("c", 200), Peer: strings.Repeat("p", 200) + ":1", Weight: 1 << 30},
		// Every field: two that share a JSON name are both dropped.
		{Client: "10.0.0.1:11211", Peer: "10.0.0.1:11311", Weight: 2, Boot: "b", Protocol: 1, Ring: "r",
			SharedReads: true, SharedFetches: true},
	}
	for _, m := range tests {
		b, err := m.encode()
		if err != nil {
			t.Fatalf("encode(%+v): %v", m, err)
		}
		if b[0] != metaVersion {
			t.Errorf("encode(%+v) starts with %d, want version %d", m, b[0], metaVersion)
		}
		got, leaving, err := decodeMeta(b)
		if err != nil || got != m || leaving {
			t.Errorf("decode(encode(%+v)) = %+v, %v, %v", m, got, leaving, err)
		}
		b, _ = encodeMeta(m, true)
		if got, leaving, err := decodeMeta(b); err != nil || got != m || !leaving {
			t.Errorf("decode(encodeMeta(%+v, true)) = %+v, %v, %v", m, got, leaving, err)
		}
	}
}

func TestMetaCompact(t *testing.T) {
	b, err := Meta{Client: "127.0.0.1:11211", Peer: "127.0.0.1:11311", Weight: 2}.encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 64 {
		t.Errorf("typical meta takes %d bytes: %q", len(b), b)
	}
}

func TestDecodeMeta(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Meta
		err  string // substring; "" means success
	}{
		{"empty", nil, Meta{}, "no meta"},
		{"future version", []byte("\x02{}"), Meta{}, "version 2"},
		{"legacy json without version", []byte(`{"c":"x"}`), Meta{}, "version 123"},
		{"garbage", []byte("\x01{not json"), Meta{}, "bad meta"},
		{"negative weight", []byte("\x01{\"w\":-1}"), Meta{}, "negative weight"},
		{"unknown fields from a newer node", []byte("\x01{\"c\":\"a:1\",\"zone\":\"eu\",\"w\":2}"), Meta{Client: "a:1", Weight: 2}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := decodeMeta(tt.in)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Fatalf("decodeMeta = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("decodeMeta err = %v, want it to mention %q", err, tt.err)
			}
		})
	}
}

func TestMetaTooLarge(t *testing.T) {
	_, err := Meta{Client: strings.Repeat("x", 600)}.encode()
	if err != ErrMetaTooLarge {
		t.Fatalf("err = %v, want ErrMetaTooLarge", err)
	}
	// A meta that fits only without the leaving flag is refused up front:
	// memberlist would panic when Leave re-advertised it.
	for n := 400; n < 520; n++ {
		m := Meta{Client: strings.Repeat("x", n)}
		_, plain := m.encode()
		_, long := encodeMeta(m, true)
		if plain == nil && long != nil {
			if err := m.validate(); err != ErrMetaTooLarge {
				t.Fatalf("validate(%d-byte client) = %v, want ErrMetaTooLarge", n, err)
			}
			return
		}
	}
	t.Fatal("found no meta that fits only without the leaving flag")
}

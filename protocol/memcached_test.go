package protocol

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"spillway/internal/memcachedtest"
)

// TestAgainstMemcached replays the error cases of the tables above against
// a real memcached and checks that it sends exactly the replies Writer.Error
// writes. It starts Debian's memcached 1.6.18 (skipping loudly if it is not
// installed, failing under SPILLWAY_CI), or uses the one at
// SPILLWAY_MEMCACHED=host:port if that is set.
func TestAgainstMemcached(t *testing.T) {
	addr := os.Getenv("SPILLWAY_MEMCACHED")
	if addr == "" {
		addr = memcachedtest.Start(t)
	}
	// Where we knowingly differ; see the package documentation.
	deviations := map[string]string{
		"ma-opaque-too-long": "memcached checks the opaque after doing the arithmetic",
	}
	var req Request
	for _, tc := range append(parseCases, metaCases...) {
		if why := deviations[tc.name]; why != "" {
			t.Logf("skipping %s: %s", tc.name, why)
			continue
		}
		err := Parse([]byte(tc.line), &req)
		if err == nil {
			continue // the reply depends on the store, not on the parser
		}
		in := tc.line + "\r\n"
		if n := req.DataLen(); n >= 0 { // ms: memcached swallows the block
			in += strings.Repeat("x", n) + "\r\n"
		}
		t.Run("line/"+tc.name, func(t *testing.T) {
			replay(t, addr, in+"mn\r\n", []string{describe(&req, err), "mn"})
		})
	}
	for _, tc := range wireCases {
		if tc.lim != (Limits{}) {
			continue // memcached runs with its defaults
		}
		t.Run("wire/"+tc.name, func(t *testing.T) { replay(t, addr, tc.in, tc.want) })
	}
}

// replay sends in and compares memcached's reply with the one implied by
// outcomes, when outcomes hold only errors, mn, EOF and close.
func replay(t *testing.T, addr, in string, outcomes []string) {
	var want strings.Builder
	closed := false
	for _, o := range outcomes {
		switch {
		case o == "mn":
			want.WriteString("MN\r\n")
		case o == "close":
			closed = true
		case o == "io:EOF", strings.HasPrefix(o, "quiet:"):
		case strings.HasPrefix(o, "ERROR"), strings.HasPrefix(o, "CLIENT_ERROR"), strings.HasPrefix(o, "SERVER_ERROR"):
			want.WriteString(o + "\r\n")
		default:
			t.Skipf("outcome %.40q depends on the store", o)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var got bytes.Buffer
	buf := make([]byte, 4096)
	eof := false
	for closed || got.Len() < want.Len() {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			eof = err == io.EOF
			break
		}
	}
	if got.String() != want.String() || eof != closed {
		t.Errorf("memcached sent %q (closed %v)\n      we expect %q (closed %v)", got.String(), eof, want.String(), closed)
	}
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"spillway/internal/rawio"

	"github.com/bradfitz/gomemcache/memcache"
)

// testPKI writes a CA and leaf certificates for 127.0.0.1 it signed into
// dir; names are the leaves' file stems (<name>.pem, <name>-key.pem).
func testPKI(t *testing.T, dir string, names ...string) (caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spillway test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caFile = filepath.Join(dir, "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	for i, name := range names {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
		kb, _ := x509.MarshalECPrivateKey(key)
		writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
	}
	return caFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsClient is a client TLS configuration trusting caFile, with the
// certificate of name if name is not "".
func tlsClient(t *testing.T, dir, caFile, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(b)
	cfg := &tls.Config{RootCAs: pool}
	if name != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// With --tls-cert, the client port speaks TLS only; with --tls-ca too, a
// client must present a certificate that CA signed. gomemcache over a
// tls.Dialer and pymemcache with an SSL context work.
func TestClientTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	ca := testPKI(t, dir, "server", "client")
	n := startNode(t, "tls", "", "--tls-cert", filepath.Join(dir, "server.pem"),
		"--tls-key", filepath.Join(dir, "server-key.pem"), "--tls-ca", ca,
		"--peer-secret", "s") // a cluster node: its peer port must be guarded too
	good := tlsClient(t, dir, ca, "client")
	mc := memcache.New(n.client)
	mc.Timeout = 5 * time.Second
	mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := tls.Dialer{Config: good}
		return d.DialContext(ctx, network, addr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for mc.Set(&memcache.Item{Key: "k", Value: []byte("over tls")}) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the TLS client port never answered")
		}
		time.Sleep(20 * time.Millisecond) // polls a process starting
	}
	if it, err := mc.Get("k"); err != nil || string(it.Value) != "over tls" {
		t.Fatalf("get over TLS: %v %v", it, err)
	}
	mc.Close()

	// spillway bench loads it over TLS: every request answered, and the
	// stats read over TLS too (the report's per-server counts).
	b, _ := benchReport(t, "--servers", n.client, "--tls-ca", ca,
		"--tls-cert", filepath.Join(dir, "client.pem"), "--tls-key", filepath.Join(dir, "client-key.pem"),
		"--requests", "500", "--keys", "50", "--conns", "4", "--prefill")
	var rep struct {
		Ops     int64
		Errors  map[string]int64
		Servers []struct {
			CmdGet uint64 `json:"cmd_get"`
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Ops != 500 || len(rep.Errors) != 0 || len(rep.Servers) != 1 || rep.Servers[0].CmdGet == 0 {
		t.Fatalf("bench over TLS: %d requests, errors %v, servers %+v", rep.Ops, rep.Errors, rep.Servers)
	}

	// Plain text gets no answer; TLS without a client certificate fails.
	refused(t, n.client, nil)
	refused(t, n.client, tlsClient(t, dir, ca, ""))

	python := "/usr/bin/python3" // Debian's, where python3-pymemcache installs
	if exec.Command(python, "-c", "import pymemcache").Run() != nil {
		if os.Getenv("SPILLWAY_CI") != "" {
			t.Fatal("pymemcache missing under CI")
		}
		t.Skip("pymemcache missing (apt-get install python3-pymemcache)")
	}
	host, port, _ := net.SplitHostPort(n.client)
	script := `
import ssl, sys
from pymemcache.client.base import Client
ctx = ssl.create_default_context(cafile=sys.argv[3])
ctx.load_cert_chain(sys.argv[4], sys.argv[5])
c = Client((sys.argv[1], int(sys.argv[2])), tls_context=ctx, connect_timeout=5, timeout=5)
c.set("py", b"tls")
assert c.get("py") == b"tls", c.get("py")
print("pymemcache tls ok")
`
	out, err := exec.Command(python, "-c", script, host, port, ca,
		filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pymemcache tls ok") {
		t.Fatalf("pymemcache over TLS: %v\n%s", err, out)
	}
}

// Nodes with mutual TLS and a shared secret between them work as a
// cluster; the peer port refuses plain text and a certificate from
// another CA.
func TestPeerTLSAndSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ca := testPKI(t, dir, "a", "b")
	other := t.TempDir()
	otherCA := testPKI(t, other, "x")
	peerPorts := []int{freePort(t, "tcp"), freePort(t, "tcp")}
	args := func(name string, i int) []string {
		return []string{"--peer-listen", "127.0.0.1:" + strconv.Itoa(peerPorts[i]),
			"--peer-tls-cert", filepath.Join(dir, name+".pem"), "--peer-tls-key", filepath.Join(dir, name+"-key.pem"),
			"--peer-tls-ca", ca, "--peer-secret", "new-one,old-one"}
	}
	a := startNode(t, "a", "", args("a", 0)...)
	// b joins a running a: started first, it ran alone, and the two
	// dropped what they held on meeting (merge.go), writes acked between
	// the two drops of crossing fences included.
	waitNodes(t, 1, a)
	bArgs := append(args("b", 1), "--join", a.gossip)
	bArgs[len(bArgs)-3] = "old-one,new-one" // b still presents the old secret: a accepts both
	b := startNode(t, "b", "", bArgs...)
	waitNodes(t, 2, a, b)

	mc := memcache.New(a.client, b.client)
	mc.Timeout = 5 * time.Second
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		if err := mc.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
			fatalWithLogs(t, []*node{a, b}, "set %s: %v", k, err)
		}
	}
	// Through one entry node only: half the keys cross the peer port.
	one := memcache.New(a.client)
	one.Timeout = 5 * time.Second
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		if it, err := one.Get(k); err != nil || string(it.Value) != k {
			fatalWithLogs(t, []*node{a, b}, "get %s through a: %v %v", k, it, err)
		}
	}
	mc.Close()
	one.Close()

	peer := "127.0.0.1:" + strconv.Itoa(peerPorts[1])
	refused(t, peer, nil)
	refused(t, peer, tlsClient(t, other, otherCA, "x"))
}

// refused checks that addr does not answer "version" to a client that
// speaks plain text (cfg nil) or TLS with cfg: the handshake fails, or
// the connection closes without a reply.
func refused(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	var c net.Conn
	var err error
	if cfg == nil {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	} else {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
	}
	if err != nil {
		return // refused at the handshake
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "version\r\n")
	buf := make([]byte, 64)
	if k, _ := c.Read(buf); strings.Contains(string(buf[:k]), "VERSION") {
		t.Errorf("%s answered a client it should refuse (tls %v): %q", addr, cfg != nil, buf[:k])
	}
}

// The client and peer ports' TLS runs over raw socket calls
// (internal/rawio): under the TLS of a connection wrapTLS's listener
// accepts is a wrapped socket, on Linux, and the socket under that.
func TestWrapTLSOverRawSocket(t *testing.T) {
	dir := t.TempDir()
	testPKI(t, dir, "node")
	cert, err := loadPair("--tls-cert", filepath.Join(dir, "node.pem"), "--tls-key", filepath.Join(dir, "node-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := wrapTLS(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	defer l.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tc, ok := s.(*tls.Conn)
	if !ok {
		t.Fatalf("accepted %T, want *tls.Conn", s)
	}
	if _, plain := tc.NetConn().(*net.TCPConn); plain == (runtime.GOOS == "linux") {
		t.Fatalf("on %s, under TLS: %T", runtime.GOOS, tc.NetConn())
	}
	if _, ok := rawio.Unwrap(s).(*net.TCPConn); !ok {
		t.Fatalf("the socket under it: %T", rawio.Unwrap(s))
	}
}

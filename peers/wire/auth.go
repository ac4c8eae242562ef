package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Secrets are the shared secrets that authenticate peer connections. The
// first is presented; any is accepted, so a secret rotates without
// downtime: add the new one second everywhere, then first, then drop the
// old one.
//
// The exchange proves both ends know a secret without sending it: the
// peer port opens with a challenge, the dialling node answers with an
// HMAC of it and a challenge of its own, and the port answers that. Each
// proof names its role and the peer port's address as the dialling node
// dials it (the address the port advertises): a node tricked into dialling
// an impostor's port signs for that address only, so the impostor cannot
// relay the proof to a real port. It does not encrypt what follows; use
// TLS where the network is not trusted.
//
//	port:    SPILLWAY-AUTH <nonce>
//	dialler: auth <hmac(secret, "dial", addr, nonce)> <nonce2>
//	port:    OK <hmac(secret, "port", addr, nonce2)>     (or closes)
type Secrets [][]byte

// ErrAuth is a peer connection that failed authentication.
var ErrAuth = errors.New("wire: peer authentication failed")

const (
	authGreeting = "SPILLWAY-AUTH "
	authContext  = "spillway peer v1"
	nonceBytes   = 16
	maxAuthLine  = 256
)

// Challenge runs the peer port's side on a new connection, within
// timeout, before anything else is read from it; self is the address the
// port advertises.
func (s Secrets) Challenge(nc net.Conn, self string, timeout time.Duration) error {
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	nonce := newNonce()
	if _, err := fmt.Fprintf(nc, "%s%s\r\n", authGreeting, nonce); err != nil {
		return err
	}
	f, err := readAuthLine(nc)
	if err != nil {
		return err
	}
	if len(f) != 3 || f[0] != "auth" || len(f[2]) != 2*nonceBytes {
		return fmt.Errorf("%w: no auth line", ErrAuth)
	}
	secret := s.match("dial", self, nonce, f[1])
	if secret == nil {
		return fmt.Errorf("%w: wrong secret", ErrAuth)
	}
	_, err = fmt.Fprintf(nc, "OK %s\r\n", proof(secret, "port", self, f[2]))
	return err
}

// Answer runs the dialling node's side on a new connection to the peer
// port at addr.
func (s Secrets) Answer(nc net.Conn, addr string, timeout time.Duration) error {
	if len(s) == 0 {
		return fmt.Errorf("%w: no secret to present", ErrAuth)
	}
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	f, err := readAuthLine(nc)
	if err != nil {
		return err
	}
	if len(f) != 2 || f[0]+" " != authGreeting {
		return fmt.Errorf("%w: the peer port asked for no authentication", ErrAuth)
	}
	mine := newNonce()
	if _, err := fmt.Fprintf(nc, "auth %s %s\r\n", proof(s[0], "dial", addr, f[1]), mine); err != nil {
		return err
	}
	f, err = readAuthLine(nc)
	if err != nil {
		return err
	}
	if len(f) != 2 || f[0] != "OK" || s.match("port", addr, mine, f[1]) == nil {
		return fmt.Errorf("%w: the peer port does not know the secret", ErrAuth)
	}
	return nil
}

// match returns the secret whose proof got is, or nil.
func (s Secrets) match(role, addr, nonce, got string) []byte {
	for _, secret := range s {
		if hmac.Equal([]byte(proof(secret, role, addr, nonce)), []byte(got)) {
			return secret
		}
	}
	return nil
}

// proof is the HMAC of one side's answer: its role, the peer port's
// address and the other side's nonce, each ended by a NUL so that no two
// inputs run together.
func proof(secret []byte, role, addr, nonce string) string {
	m := hmac.New(sha256.New, secret)
	for _, part := range []string{authContext, role, addr, nonce} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

func newNonce() string {
	var b [nonceBytes]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readAuthLine reads one line of the exchange, a byte at a time: nothing
// after it may be taken from the connection, and the exchange is once per
// connection.
func readAuthLine(nc net.Conn) ([]string, error) {
	var line []byte
	var b [1]byte
	for len(line) < maxAuthLine {
		if _, err := io.ReadFull(nc, b[:]); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			return strings.Fields(strings.TrimSuffix(string(line), "\r")), nil
		}
		line = append(line, b[0])
	}
	return nil, fmt.Errorf("%w: line too long", ErrAuth)
}

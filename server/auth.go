package server

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"

	"spillway/protocol"
)

// Client authentication, as memcached's -Y does it for the text protocol:
// until a connection has authenticated, the one request it may send is a
// set whose data is "<user> <password>" (the key, flags and TTL are
// ignored); anything else is answered "CLIENT_ERROR unauthenticated".
// The password crosses the network as it is: on an untrusted network,
// serve clients over TLS too.

// ReadAuthFile reads an auth file: one "user:password" a line, as
// memcached's -Y takes it. Empty lines are skipped.
func ReadAuthFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	users := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "" {
			continue
		}
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("auth file %s, line %d: want user:password", path, n)
		}
		users[user] = pass
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("auth file %s: no user:password line", path)
	}
	return users, sc.Err()
}

// authenticate answers a request of a connection that has not
// authenticated yet (err is the read's), with memcached's replies.
func (c *conn) authenticate(err error) {
	s := c.srv
	switch {
	case err == nil && c.req.Command == protocol.CmdSet:
	case errors.Is(err, protocol.ErrBadDataChunk) && c.req.Command == protocol.CmdSet:
		c.w.Error(protocol.ClientError("bad command line termination"))
		return
	default:
		c.w.Error(protocol.ClientError("unauthenticated"))
		return
	}
	s.counters[ctrAuthCmds].Add(1)
	f := strings.Fields(string(c.req.Data))
	if len(f) < 2 {
		s.counters[ctrAuthErrors].Add(1)
		c.w.Error(protocol.ClientError("bad authentication token format"))
		return
	}
	if !s.checkUser(f[0], f[1]) {
		s.counters[ctrAuthErrors].Add(1)
		c.w.Error(protocol.ClientError("authentication failure"))
		return
	}
	c.authed = true
	c.w.Line("STORED")
}

// checkUser reports whether user's password is pass, in time that does
// not depend on how much of it matched.
func (s *Server) checkUser(user, pass string) bool {
	want, ok := s.cfg.Users[user]
	if !ok {
		want = "\x00" // compare anyway, so a wrong user takes as long
	}
	return subtle.ConstantTimeCompare([]byte(want), []byte(pass)) == 1 && ok
}

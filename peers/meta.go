package peers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/memberlist"
)

// Meta is what a node tells the others about itself. It travels in
// memberlist's Node.Meta, so every member learns it when it learns of the
// node, and it must encode to at most memberlist.MetaMaxSize (512) bytes.
type Meta struct {
	// Client is the address memcached clients use ("host:port"). Peers do not
	// dial it; it is there for `stats cluster` and for operators.
	Client string `json:"c,omitempty"`

	// Peer is the address of the node's peer listener ("host:port"): the
	// one other nodes forward requests to. A member without one still owns
	// keys (every node must build the same ring from the same members), but
	// callers have nowhere to dial it and treat it as unreachable.
	Peer string `json:"p,omitempty"`

	// Weight is the node's capacity relative to the others: a node of
	// weight 2 owns about twice the keys of a node of weight 1.
	// 0 means 1; negative weights are rejected by Join.
	Weight int `json:"w,omitempty"`

	// Boot identifies this run of the node: a node restarted under the
	// same name has a new one, so the others can tell a restart (whatever
	// it held is gone) from a node they declared dead coming back.
	Boot string `json:"b,omitempty"`

	// Protocol is the version of the protocol nodes speak to each other,
	// and Ring the fingerprint of how the node builds rings (hash and
	// virtual nodes). Nodes that differ in either must not share keys;
	// the server refuses to mix them.
	Protocol int    `json:"v,omitempty"`
	Ring     string `json:"r,omitempty"`

	// SharedReads says the node answers the one-key reads that other
	// nodes send on connections they share (server/peerproto.go, the held
	// tag). A capability rather than a protocol version: nodes without it
	// are sent reads the older way, so both can share keys while a
	// cluster is upgraded.
	SharedReads bool `json:"s,omitempty"`
	// SharedFetches says the node also answers, on those connections, the
	// read-through of a key spilled to another node, when it holds the
	// key (server/peerproto.go, the held fetch tag). A capability, as
	// SharedReads.
	SharedFetches bool `json:"f,omitempty"`
}

// metaVersion is the first byte of an encoded Meta. The rest is JSON, so
// fields can be added without changing it: decoders ignore fields they do
// not know. Bump it only for a change old nodes must not misread; they will
// then treat the new nodes as having no usable metadata.
const metaVersion = 1

// ErrMetaTooLarge is returned when a Meta does not fit memberlist's limit.
var ErrMetaTooLarge = fmt.Errorf("peers: meta larger than %d bytes", memberlist.MetaMaxSize)

// errNoMeta marks a member that advertised no metadata at all (a process
// that joined the gossip without this package's delegate).
var errNoMeta = errors.New("peers: member has no meta")

// wireMeta is what goes on the wire: Meta, plus the flag a node sets just
// before it leaves. memberlist reports a graceful leave and a failure
// alike (the State of the Node it passes to NotifyLeave is never set), so
// the flag is how the others tell "left" from "dead", and it lets them take
// the node out of their rings as soon as it announces its leave.
type wireMeta struct {
	Meta
	Leaving bool `json:"l,omitempty"`
}

// encode returns the wire form of m: one version byte, then JSON.
func (m Meta) encode() ([]byte, error) { return encodeMeta(m, false) }

func encodeMeta(m Meta, leaving bool) ([]byte, error) {
	js, err := json.Marshal(wireMeta{m, leaving})
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+len(js))
	b = append(b, metaVersion)
	b = append(b, js...)
	if len(b) > memberlist.MetaMaxSize {
		return nil, ErrMetaTooLarge
	}
	return b, nil
}

// decodeMeta parses what encodeMeta wrote, on this or another node.
func decodeMeta(b []byte) (m Meta, leaving bool, err error) {
	if len(b) == 0 {
		return Meta{}, false, errNoMeta
	}
	if b[0] != metaVersion {
		return Meta{}, false, fmt.Errorf("peers: meta version %d not supported (want %d)", b[0], metaVersion)
	}
	var w wireMeta
	if err := json.Unmarshal(b[1:], &w); err != nil {
		return Meta{}, false, fmt.Errorf("peers: bad meta: %w", err)
	}
	if w.Weight < 0 {
		return Meta{}, false, fmt.Errorf("peers: bad meta: negative weight %d", w.Weight)
	}
	return w.Meta, w.Leaving, nil
}

// validate checks what Join must refuse before it gossips m to anyone.
func (m Meta) validate() error {
	if m.Weight < 0 {
		return fmt.Errorf("peers: negative weight %d", m.Weight)
	}
	if m.Peer != "" {
		if _, _, err := net.SplitHostPort(m.Peer); err != nil {
			return fmt.Errorf("peers: peer address %q: %w", m.Peer, err)
		}
	}
	_, err := encodeMeta(m, true) // the longer form must fit too
	return err
}

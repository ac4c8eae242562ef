package wire

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// A peer that closes a shared connection right after its reply (it is
// shutting down): the close arrives with the reply, and the connection's
// reader must see it then — a reader that waited before it read would not
// be woken for it (rawio.ReadIdle), and the next read would find a dead
// connection. The next read goes on a new connection.
func TestReadAfterPeerClosedWithItsReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan int, 1)
	go func() {
		n := 0
		defer func() { served <- n }()
		for i := range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n++
			r := bufio.NewReader(c)
			for {
				if _, err := r.ReadString('\n'); err != nil {
					break
				}
				c.Write([]byte("EN\r\n"))
				if i == 0 {
					break // the first connection closes with its reply
				}
			}
			c.Close()
		}
	}()
	c := New(Config{Addr: ln.Addr().String(), MuxConns: 1})
	for i := range 2 {
		// A read stuck on the closed connection would time out.
		v, err := c.Read(2*time.Second, "k", "hld.x", nil)
		if err != nil || v.Found {
			t.Fatalf("read %d: %+v %v", i, v, err)
		}
	}
	c.Close()
	ln.Close()
	if n := <-served; n != 2 {
		t.Errorf("the peer served %d connections, want 2", n)
	}
}

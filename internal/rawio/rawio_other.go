//go:build !linux

package rawio

import "net"

// wrap makes nothing raw but on Linux.
func wrap(net.Conn, bool) net.Conn { return nil }

func endPending(net.Conn) bool { return false }

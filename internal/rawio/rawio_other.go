//go:build !linux

package rawio

import "net"

// wrap makes nothing raw but on Linux.
func wrap(net.Conn) net.Conn { return nil }

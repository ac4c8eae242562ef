// Package loopback tells whether a host names this machine's loopback
// interface. It is internal: a few lines that cmd/spillway (to pick
// memberlist's Local timings) and bench (to count one process once) share.
package loopback

import "net"

// Is reports whether host is "localhost" or a loopback IP address
// (127.0.0.0/8, ::1). It does not resolve names.
func Is(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

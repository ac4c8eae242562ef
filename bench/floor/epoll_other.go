//go:build !linux

package main

import "errors"

// serveEpoll needs Linux's epoll.
func serveEpoll(string, int) (server, error) {
	return nil, errors.New("-model epoll: Linux only")
}

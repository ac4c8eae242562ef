//go:build !linux

package main

import "syscall"

// sysProcAttr puts a node in a process group of its own, out of reach of
// the terminal's Ctrl-C: localcluster stops the nodes in turn.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// portHolder cannot tell what holds a port without Linux's /proc.
func portHolder(proto string, port int) string { return "" }

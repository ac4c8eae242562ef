package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts a node in a process group of its own, out of reach of
// the terminal's Ctrl-C (localcluster stops the nodes in turn), and has
// the kernel send it SIGTERM should localcluster die without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// portHolder names what holds a port for proto ("tcp" or "udp") on any
// local address, as far as /proc shows this user: "memcached (pid 812)",
// or "a process of user memcache" when the process is hidden; "" if
// nothing shows.
func portHolder(proto string, port int) string {
	uids := make(map[string]string) // socket inode -> owner's uid
	for _, table := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || int(p) != port || (proto == "tcp" && f[3] != "0A") { // 0A: LISTEN
				continue
			}
			uids[f[9]] = f[7]
		}
	}
	if len(uids) == 0 {
		return ""
	}
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + d.Name()
		fds, _ := os.ReadDir(dir + "/fd")
		for _, fd := range fds {
			link, _ := os.Readlink(dir + "/fd/" + fd.Name())
			inode, ok := strings.CutPrefix(link, "socket:[")
			if _, held := uids[strings.TrimSuffix(inode, "]")]; ok && held {
				comm, _ := os.ReadFile(dir + "/comm")
				return fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), pid)
			}
		}
	}
	for _, uid := range uids {
		if u, err := user.LookupId(uid); err == nil {
			return "a process of user " + u.Username
		}
		return "a process of uid " + uid
	}
	return ""
}

// Command spillway runs a Spillway cache node (serve) or load-tests a
// memcached-protocol cluster (bench).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"spillway/server"
)

const usage = `spillway: a memcached-compatible distributed cache with bounded-load consistent hashing

Usage:
  spillway serve [flags]   run a node (spillway serve --help for its flags)
  spillway bench [flags]   load-test servers or a local cluster (spillway bench --help)
  spillway version         print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "spillway %s (memcached %s protocol)\n", spillwayVersion, server.Version)
		return 0
	case "help", "-h", "--help", "-help":
		// Everything in one page: the subcommands and all their flags.
		fmt.Fprint(stdout, usage)
		sf, bf := defaultServeFlags(), defaultBenchFlags()
		fmt.Fprintln(stdout)
		printUsage(stdout, "spillway serve", envPrefix("serve"), sf.options())
		fmt.Fprintln(stdout)
		printUsage(stdout, "spillway bench", envPrefix("bench"), bf.options())
		return 0
	default:
		fmt.Fprintf(stderr, "spillway: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		prefix := "spillway " + args[0]
		var ne *nodeError
		if errors.As(err, &ne) {
			prefix += " (" + ne.node + ")"
		}
		// The bench package names itself in its errors, as Go packages
		// do; here the prefix already says it.
		fmt.Fprintf(stderr, "%s: %s\n", prefix, strings.TrimPrefix(err.Error(), args[0]+": "))
		return 1
	}
}

// spillwayVersion is this build's own version.
const spillwayVersion = "0.1.0"

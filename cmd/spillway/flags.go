package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// option is one command-line flag with its short form, long form and
// environment variable, so that `-m 64`, `--memory-limit 64` and
// SPILLWAY_MEMORY_LIMIT=64 all mean the same.
type option struct {
	short, long string
	value       flag.Value
	usage       string
}

// env is the option's environment variable: SPILLWAY_ for serve's flags,
// SPILLWAY_BENCH_ for bench's, so that one never configures the other.
func (o option) env(prefix string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(o.long, "-", "_"))
}

// envPrefix is the environment prefix of a subcommand's flags.
func envPrefix(name string) string {
	if name == "serve" {
		return "SPILLWAY_"
	}
	return "SPILLWAY_" + strings.ToUpper(name) + "_"
}

// parseOptions reads the command line, then the environment for the
// options the command line did not give, then the config file (if an
// option named "config" names one) for those neither gave: a flag
// overrides its variable, which overrides the file. -h and --help print
// the usage to stdout and return flag.ErrHelp. The result names each
// option that was given, by its long name, as the user gave it ("--join",
// "$SPILLWAY_JOIN" or "spillway.yaml:3: join"), for checks that need to
// know and for --print-config.
func parseOptions(name, synopsis string, opts []option, args []string, stdout io.Writer) (map[string]string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	prefix := envPrefix(name)
	given := make(map[string]string)
	var bad error // the first value a flag refused, named as the user would
	for _, o := range opts {
		for _, n := range []string{o.long, o.short} {
			if n != "" {
				fs.Var(&namedValue{o.value, dashed(n), o.long, given, &bad}, n, o.usage)
			}
		}
	}
	fs.Usage = func() {} // printed below for -h only, not for every mistake
	if err := fs.Parse(expandRepeats(args)); err != nil {
		switch {
		case err == flag.ErrHelp:
			printUsage(stdout, synopsis, prefix, opts)
		case bad != nil:
			err = bad
		default:
			err = flagError(err, name)
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	config := ""
	for _, o := range opts {
		if _, ok := given[o.long]; !ok {
			if v, ok := os.LookupEnv(o.env(prefix)); ok {
				if err := o.value.Set(v); err != nil {
					return nil, fmt.Errorf("$%s=%q: %v", o.env(prefix), v, err)
				}
				given[o.long] = "$" + o.env(prefix)
			}
		}
		if o.long == configOption {
			config = o.value.String()
		}
	}
	if config != "" {
		if err := applyConfig(config, opts, given); err != nil {
			return nil, err
		}
	}
	return given, nil
}

// namedValue is an option's value as one of its names registers it, so
// that a refused value is reported under the name the user knows
// ("--epsilon", not the flag package's "-epsilon"), and a value that was
// set is recorded in given.
type namedValue struct {
	flag.Value
	name, long string
	given      map[string]string
	bad        *error
}

func (v *namedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		if *v.bad == nil {
			*v.bad = fmt.Errorf("%s %q: %v", v.name, s, err)
		}
		return err
	}
	v.given[v.long] = v.name
	return nil
}

func (v *namedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// dashed is how a flag is written: -m for a short name, --memory-limit for
// a long one.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagError rewrites the flag package's own messages, which write every
// flag with one dash.
func flagError(err error, cmd string) error {
	msg := err.Error()
	if n, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag %s (spillway %s --help lists them)", dashed(n), cmd)
	}
	if n, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("%s needs a value", dashed(n))
	}
	return err
}

// expandRepeats turns memcached's "-vv" into "-v -v", which the flag
// package then counts.
func expandRepeats(args []string) []string {
	var out []string
	for _, a := range args {
		if len(a) > 2 && a[0] == '-' && strings.Trim(a[1:], "v") == "" {
			for range len(a) - 1 {
				out = append(out, "-v")
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

func printUsage(w io.Writer, synopsis, prefix string, opts []option) {
	fmt.Fprintf(w, "%s\n\nFlags (each also from the environment variable shown):\n", synopsis)
	for _, o := range opts {
		names := "--" + o.long
		if o.short != "" {
			names = "-" + o.short + ", " + names
		}
		if b, ok := o.value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			names += " " + valueName(o.value)
		}
		def := o.value.String()
		fmt.Fprintf(w, "  %s\n      %s", names, o.usage)
		if def != "" && def != "0" && def != "false" {
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintf(w, " [$%s]\n", o.env(prefix))
	}
}

func valueName(v flag.Value) string {
	switch v.(type) {
	case *durationValue:
		return "DURATION"
	case *intValue, *countValue:
		return "N"
	case *sizeValue:
		return "SIZE"
	case *floatValue:
		return "X"
	}
	return "VALUE"
}

type stringValue struct{ p *string }

func (v *stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v *stringValue) Set(s string) error { *v.p = s; return nil }

type intValue struct{ p *int }

func (v *intValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a non-negative whole number")
	}
	*v.p = n
	return nil
}

type floatValue struct{ p *float64 }

func (v *floatValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}
func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return fmt.Errorf("want a non-negative number or inf")
	}
	*v.p = f
	return nil
}

type durationValue struct{ p *time.Duration }

func (v *durationValue) String() string {
	if v.p == nil || *v.p == 0 {
		return "0"
	}
	return v.p.String()
}
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration such as 30s or 5m")
	}
	*v.p = d
	return nil
}

type boolValue struct{ p *bool }

func (v *boolValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatBool(*v.p)
}
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = b
	return nil
}
func (v *boolValue) IsBoolFlag() bool { return true }

// countValue is memcached's -v: each repetition raises the level, and
// -vv / -vvv count too.
type countValue struct{ p *int }

func (v *countValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}
func (v *countValue) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		*v.p = n
		return nil
	}
	if b, err := strconv.ParseBool(s); err == nil {
		if b {
			*v.p++
		}
		return nil
	}
	return fmt.Errorf("want a level")
}
func (v *countValue) IsBoolFlag() bool { return true }

// sizeValue is a byte count with an optional k, m or g suffix, like
// memcached's -I 2m. unit scales a bare number (-m counts MiB).
type sizeValue struct {
	p    *int64
	unit int64
}

func (v *sizeValue) String() string {
	if v.p == nil {
		return ""
	}
	n := *v.p
	switch {
	case n != 0 && v.unit > 1 && n%v.unit == 0:
		return strconv.FormatInt(n/v.unit, 10)
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "m"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s, v.unit)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

func parseSize(s string, unit int64) (int64, error) {
	mult := unit
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, strings.TrimSuffix(t, "g")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("want a size such as 1024, 512k, 64m or 1g")
	}
	return n * mult, nil
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// A config file (--config FILE, or $SPILLWAY_CONFIG) holds settings as
// YAML, one per line, named as the long flags are:
//
//	listen: 0.0.0.0:11211
//	memory-limit: 1024
//	join: [spillway-0.spillway:7946, spillway-1.spillway:7946]
//	drain: 5s
//
// A value is read as its text would be on the command line (64m, 30s,
// inf); a list is joined with commas. A setting given twice, or unknown,
// is an error. The environment overrides the file, and the command line
// both; --print-config shows the outcome.

// configOption is the long name of the option that names the file.
const configOption = "config"

// readConfig reads the settings of the config file path: long name to
// value, and the line each was on.
func readConfig(path string) (map[string]string, map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	values, lines := map[string]string{}, map[string]int{}
	if len(doc.Content) == 0 { // empty, or only comments
		return values, lines, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%s:%d: want settings as `name: value` lines", path, m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if line, ok := lines[k.Value]; ok {
			return nil, nil, fmt.Errorf("%s:%d: %s: set already on line %d", path, k.Line, k.Value, line)
		}
		lines[k.Value] = k.Line
		var s string
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			continue // "join:" with nothing: not set
		case v.Kind == yaml.ScalarNode:
			s = v.Value
		case v.Kind == yaml.SequenceNode:
			var parts []string
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return nil, nil, fmt.Errorf("%s:%d: %s: want a value or a list of values", path, e.Line, k.Value)
				}
				parts = append(parts, e.Value)
			}
			s = strings.Join(parts, ",")
		default:
			return nil, nil, fmt.Errorf("%s:%d: %s: want a value or a list of values", path, v.Line, k.Value)
		}
		values[k.Value] = s
	}
	return values, lines, nil
}

// applyConfig sets, from the config file path, the options not in given,
// and records them there as "FILE:LINE: name".
func applyConfig(path string, opts []option, given map[string]string) error {
	values, lines, err := readConfig(path)
	if err != nil {
		return err
	}
	known := make(map[string]option, len(opts))
	for _, o := range opts {
		known[o.long] = o
	}
	for name, v := range values {
		where := fmt.Sprintf("%s:%d: %s", path, lines[name], name)
		o, ok := known[name]
		if !ok || name == configOption {
			return fmt.Errorf("%s: unknown setting (the long flag names are the settings; spillway serve --help lists them)", where)
		}
		if _, ok := given[name]; ok {
			continue
		}
		if err := o.value.Set(v); err != nil {
			return fmt.Errorf("%s %q: %v", where, v, err)
		}
		given[name] = where
	}
	return nil
}

// secret reports whether an option's value must not be shown: the gossip
// key, and any flag whose name says secret, key or password.
func secret(long string) bool {
	for _, w := range []string{"secret", "key", "password"} {
		if strings.Contains(long, w) {
			return true
		}
	}
	return false
}

// masked is v with each comma-separated element replaced by ***, so that
// how many keys a list holds still shows.
func masked(v string) string {
	parts := splitList(v)
	for i := range parts {
		parts[i] = "***"
	}
	return strings.Join(parts, ",")
}

var plainValue = regexp.MustCompile(`^[A-Za-z0-9._+/-]+$`)

// printConfig writes the settings in effect as a config file, each with
// where it came from, secrets masked. given is what parseOptions returned.
func printConfig(w io.Writer, opts []option, given map[string]string) error {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, o := range opts {
		if o.long == configOption || o.long == "print-config" {
			continue
		}
		v := o.value.String()
		if secret(o.long) {
			v = masked(v)
		}
		from := "default"
		if g, ok := given[o.long]; ok {
			from = g
		}
		val := &yaml.Node{Kind: yaml.ScalarNode, Value: v, LineComment: from}
		// Plain where it is only letters, digits and ._+/- (64m, 5s,
		// +Inf); quoted otherwise ("", "***", "0.0.0.0:1").
		if !plainValue.MatchString(v) {
			val.Style = yaml.DoubleQuotedStyle
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: o.long}, val)
	}
	var b bytes.Buffer
	b.WriteString("# The settings in effect (command line over $SPILLWAY_* over --config over defaults),\n" +
		"# each with where it came from. A config file as it is; masked secrets (***) must be set elsewhere.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

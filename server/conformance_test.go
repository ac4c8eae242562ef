package server

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The conformance suite: raw memcached text- and meta-protocol exchanges,
// written byte for byte as memcached 1.6.18 answers them. memcached is the
// source of truth (TestConformanceMemcached proves every case against it);
// Spillway's server runs the same cases through runConformance.
//
// Each case runs on a fresh connection. Cases use their own name as key (or
// as key prefix), so they are independent and run in parallel, except the
// global ones (flush_all), which run alone, one after another, at the end.
// No case depends on the wall clock: expiry uses exptime -1, absolute times
// in the past, or times far enough ahead, and anything that reports seconds
// or memcached internals is matched with a {*} wildcard.
//
// A want string is matched exactly, except for these tokens:
//
//	{*}     one or more decimal digits (a clock reading, a slab class, ...)
//	{name}  one or more decimal digits captured as name (e.g. a CAS unique);
//	        a later {name} in any want of the case must repeat the same
//	        digits, and {name} in a later send is replaced by them.
//
// After the last reply the runner checks that nothing else arrives: for a
// close case it reads until EOF (a reset counts as closed); otherwise it
// sends "mn\r\n" and requires exactly "MN\r\n" next, which shows without any
// sleeping that there were no extra bytes and that the connection is usable.
//
// Deliberately not encoded (memcached does it, but not deterministically):
//
//   - memcached: a get/gets/gat/gats with a key over 250 bytes discards every
//     reply of the same read batch still queued on the connection (the
//     STORED of a pipelined set before it vanishes: "set k 0 0 1\r\nx\r\n
//     get k <251 bytes>\r\n" answers only "CLIENT_ERROR bad command line
//     format\r\n"). That depends on how the bytes arrive in reads; the cases
//     below put the long-key get first in its batch.
//   - memcached decides about a long line from what one read brought in: over
//     2048 bytes buffered without a '\n' closes the connection (unless the
//     line starts with "get " or "gets "), while a complete line is parsed
//     whatever its length. A long line sent in several writes can go either
//     way; the cases send each long line in one write, with or without its
//     newline.

// conformanceCase is one exchange of raw bytes with a fresh connection.
type conformanceCase struct {
	name string
	send string // raw bytes, written at once; may hold several pipelined commands
	want string // the exact reply bytes (see the wildcard tokens above)

	// then holds further exchanges on the same connection, run after want
	// has matched: used when a command needs a value from an earlier reply.
	then []exchange

	close       bool // the server must close the connection after the reply
	global      bool // affects the whole server (flush_all): runs alone, after the others
	versionLine bool // "VERSION 1.6.18" in want matches any "VERSION 1.6.<anything>" line
}

// exchange is one write and the reply it must produce.
type exchange struct {
	send, want string
}

// Limits of memcached with default settings, which the cases are built on.
const (
	keyMaxLength = 250     // KEY_MAX_LENGTH
	itemSizeMax  = 1 << 20 // -I default
	// itemOverhead is what memcached 1.6.18 counts, besides key and data,
	// against item_size_max: a 48-byte item header, 8 bytes of CAS, the
	// key's NUL and the data's "\r\n". Non-zero client flags add 4 more.
	itemOverhead = 48 + 8 + 1 + 2
)

// key251 is one byte too long for a key.
var key251 = strings.Repeat("k", keyMaxLength+1)

// key250 pads prefix with 'k' to the longest legal key.
func key250(prefix string) string { return prefix + strings.Repeat("k", keyMaxLength-len(prefix)) }

// largestValue is the largest data block memcached stores under key.
func largestValue(key string, flags bool) int {
	n := itemSizeMax - itemOverhead - len(key)
	if flags {
		n -= 4
	}
	return n
}

// xs is n bytes of 'x'.
func xs(n int) string { return strings.Repeat("x", n) }

// setLine is a set of value under key, with its data block.
func setLine(key, value string) string {
	return fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(value), value)
}

// valueReply is a get hit for key with flags 0.
func valueReply(key, value string) string {
	return fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\n", key, len(value), value)
}

// manyFlags is n copies of the flag token f, space separated.
func manyFlags(f string, n int) string { return strings.TrimSpace(strings.Repeat(f+" ", n)) }

// multiGet builds "get <prefix>0000 <prefix>0001 ...": a line over 16 KiB,
// longer than memcached's read buffer.
func multiGet(prefix string, n int) string {
	var b strings.Builder
	b.WriteString("get")
	for i := range n {
		fmt.Fprintf(&b, " %s%04d", prefix, i)
	}
	b.WriteString("\r\n")
	return b.String()
}

// pipelineSets stores n keys in one write and reads them back in one get.
func pipelineSets(prefix string, n int) (send, want string) {
	var s, w, g strings.Builder
	g.WriteString("get")
	for i := range n {
		k, v := fmt.Sprintf("%s-%d", prefix, i), strconv.Itoa(i*i)
		s.WriteString(setLine(k, v))
		w.WriteString("STORED\r\n")
		g.WriteString(" " + k)
	}
	for i := range n {
		w.WriteString(valueReply(fmt.Sprintf("%s-%d", prefix, i), strconv.Itoa(i*i)))
	}
	s.WriteString(g.String() + "\r\n")
	w.WriteString("END\r\n")
	return s.String(), w.String()
}

var pipelineSetsSend, pipelineSetsWant = pipelineSets("pipeline-100-sets", 100)

var conformanceCases = []conformanceCase{
	// ---------------------------------------------------------------------
	// set <key> <flags> <exptime> <bytes> [noreply]\r\n<data block>\r\n
	{name: "set-basic",
		send: "set set-basic 0 0 5\r\nhello\r\nget set-basic\r\n",
		want: "STORED\r\nVALUE set-basic 0 5\r\nhello\r\nEND\r\n"},
	{name: "set-overwrite",
		send: "set set-overwrite 1 0 1\r\na\r\nset set-overwrite 2 0 2\r\nbb\r\nget set-overwrite\r\n",
		want: "STORED\r\nSTORED\r\nVALUE set-overwrite 2 2\r\nbb\r\nEND\r\n"},
	{name: "set-noreply",
		send: "set set-noreply 0 0 1 noreply\r\nx\r\nget set-noreply\r\n",
		want: "VALUE set-noreply 0 1\r\nx\r\nEND\r\n"},
	{name: "set-empty-value",
		send: "set set-empty-value 0 0 0\r\n\r\nget set-empty-value\r\n",
		want: "STORED\r\nVALUE set-empty-value 0 0\r\n\r\nEND\r\n"},
	{name: "set-binary-value",
		send: "set set-binary-value 0 0 6\r\na\r\n\x00\xff\n\r\nget set-binary-value\r\n",
		want: "STORED\r\nVALUE set-binary-value 0 6\r\na\r\n\x00\xff\n\r\nEND\r\n"},
	{name: "set-flags-max",
		send: "set set-flags-max 4294967295 0 1\r\nx\r\nget set-flags-max\r\n",
		want: "STORED\r\nVALUE set-flags-max 4294967295 1\r\nx\r\nEND\r\n"},
	// memcached: flags are parsed as a 64-bit unsigned number and truncated
	// to 32 bits: 2^32 is stored as 0, 2^64-1 as 2^32-1; only > 2^64-1 fails.
	{name: "set-flags-2pow32-wraps",
		send: "set set-flags-2pow32-wraps 4294967296 0 1\r\nx\r\nget set-flags-2pow32-wraps\r\n",
		want: "STORED\r\nVALUE set-flags-2pow32-wraps 0 1\r\nx\r\nEND\r\n"},
	{name: "set-flags-2pow64-minus1-wraps",
		send: "set set-flags-2pow64-minus1-wraps 18446744073709551615 0 1\r\nx\r\nget set-flags-2pow64-minus1-wraps\r\n",
		want: "STORED\r\nVALUE set-flags-2pow64-minus1-wraps 4294967295 1\r\nx\r\nEND\r\n"},
	// memcached: after a command-line error the data block is not swallowed:
	// it is parsed as the next command ("x" -> ERROR).
	{name: "set-flags-2pow64",
		send: "set set-flags-2pow64 18446744073709551616 0 1\r\nx\r\nget set-flags-2pow64\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n"},
	{name: "set-flags-negative",
		send: "set set-flags-negative -1 0 1\r\nx\r\nget set-flags-negative\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n"},
	// memcached: a minus sign is only rejected when the value wraps: "-0" is 0.
	{name: "set-flags-minus-zero",
		send: "set set-flags-minus-zero -0 0 1\r\nx\r\nget set-flags-minus-zero\r\n",
		want: "STORED\r\nVALUE set-flags-minus-zero 0 1\r\nx\r\nEND\r\n"},
	// memcached: numbers go through strtol/strtoul: a leading '+' is fine.
	{name: "set-flags-plus-sign",
		send: "set set-flags-plus-sign +5 0 1\r\nx\r\nget set-flags-plus-sign\r\n",
		want: "STORED\r\nVALUE set-flags-plus-sign 5 1\r\nx\r\nEND\r\n"},
	{name: "set-flags-hex",
		send: "set set-flags-hex 0x10 0 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "set-flags-non-numeric",
		send: "set set-flags-non-numeric abc 0 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "set-exptime-non-numeric",
		send: "set set-exptime-non-numeric 0 abc 1\r\nx\r\nget set-exptime-non-numeric\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\nEND\r\n"},
	{name: "set-exptime-negative-expires-at-once",
		send: "set set-exptime-negative-expires-at-once 0 -1 1\r\nx\r\nget set-exptime-negative-expires-at-once\r\n",
		want: "STORED\r\nEND\r\n"},
	// 2592000 (30 days) is still relative; 2592001 is an absolute time in 1970.
	{name: "set-exptime-30-days-is-relative",
		send: "set set-exptime-30-days-is-relative 0 2592000 1\r\nx\r\nget set-exptime-30-days-is-relative\r\n",
		want: "STORED\r\nVALUE set-exptime-30-days-is-relative 0 1\r\nx\r\nEND\r\n"},
	{name: "set-exptime-absolute-past",
		send: "set set-exptime-absolute-past 0 2592001 1\r\nx\r\nget set-exptime-absolute-past\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "set-exptime-absolute-future",
		send: "set set-exptime-absolute-future 0 2147483647 1\r\nx\r\nget set-exptime-absolute-future\r\n",
		want: "STORED\r\nVALUE set-exptime-absolute-future 0 1\r\nx\r\nEND\r\n"},
	// memcached: exptime is truncated to a signed 32-bit number: 2147483648
	// (and year-2100 times such as 4102444800) turn negative and expire at
	// once; 2^32 turns into 0, "never"; 2^63 overflows strtol.
	{name: "set-exptime-int32-overflow-expires",
		send: "set set-exptime-int32-overflow-expires 0 4102444800 1\r\nx\r\nget set-exptime-int32-overflow-expires\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "set-exptime-2pow31-expires",
		send: "set set-exptime-2pow31-expires 0 2147483648 1\r\nx\r\nget set-exptime-2pow31-expires\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "set-exptime-2pow32-never-expires",
		send: "set set-exptime-2pow32-never-expires 0 4294967296 1\r\nx\r\nget set-exptime-2pow32-never-expires\r\n",
		want: "STORED\r\nVALUE set-exptime-2pow32-never-expires 0 1\r\nx\r\nEND\r\n"},
	{name: "set-exptime-2pow63",
		send: "set set-exptime-2pow63 0 9223372036854775808 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "set-bytes-negative",
		send: "set set-bytes-negative 0 0 -1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "set-bytes-non-numeric",
		send: "set set-bytes-non-numeric 0 0 abc\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "set-bytes-int32-max",
		send: "set set-bytes-int32-max 0 0 2147483647\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	// memcached: bytes is truncated to 32 bits too: 2^32 reads a 0-byte block,
	// so "x\r" is the block (bad chunk) and "\n" an empty command (ERROR).
	{name: "set-bytes-2pow32-wraps",
		send: "set set-bytes-2pow32-wraps 0 0 4294967296\r\nx\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\n"},
	{name: "set-missing-bytes",
		send: "set set-missing-bytes 0 0\r\nx\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "set-no-args",
		send: "set\r\n",
		want: "ERROR\r\n"},
	{name: "set-key-only",
		send: "set set-key-only\r\n",
		want: "ERROR\r\n"},
	{name: "set-too-many-args",
		send: "set set-too-many-args 0 0 1 noreply extra\r\nx\r\n",
		want: "ERROR\r\nERROR\r\n"},
	// memcached: the sixth token means noreply only if it is exactly "noreply".
	{name: "set-sixth-token-not-noreply",
		send: "set set-sixth-token-not-noreply 0 0 1 foo\r\nx\r\n",
		want: "STORED\r\n"},
	{name: "set-noreply-is-case-sensitive",
		send: "set set-noreply-is-case-sensitive 0 0 1 NOREPLY\r\nx\r\n",
		want: "STORED\r\n"},
	{name: "set-command-is-case-sensitive",
		send: "SET set-command-is-case-sensitive 0 0 1\r\nx\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "set-key-250",
		send: setLine(key250("set-key-250"), "x") + "get " + key250("set-key-250") + "\r\n",
		want: "STORED\r\n" + valueReply(key250("set-key-250"), "x") + "END\r\n"},
	{name: "set-key-251",
		send: "set " + key251 + " 0 0 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	// memcached: noreply silences the CLIENT_ERROR, not the ERROR for the
	// unswallowed data line.
	{name: "set-key-251-noreply",
		send: "set " + key251 + " 0 0 1 noreply\r\nx\r\n",
		want: "ERROR\r\n"},
	{name: "set-bad-flags-noreply",
		send: "set set-bad-flags-noreply abc 0 1 noreply\r\nx\r\n",
		want: "ERROR\r\n"},
	{name: "set-bad-bytes-noreply",
		send: "set set-bad-bytes-noreply 0 0 -1 noreply\r\nx\r\n",
		want: "ERROR\r\n"},
	// Tokens are separated by runs of spaces; leading and trailing ones are ignored.
	{name: "set-extra-spaces",
		send: "set  set-extra-spaces  0  0  1 \r\nx\r\nget  set-extra-spaces \r\n",
		want: "STORED\r\nVALUE set-extra-spaces 0 1\r\nx\r\nEND\r\n"},
	{name: "set-bare-lf-command-lines",
		send: "set set-bare-lf-command-lines 0 0 1\nx\r\nget set-bare-lf-command-lines\n",
		want: "STORED\r\nVALUE set-bare-lf-command-lines 0 1\r\nx\r\nEND\r\n"},
	// memcached: only one '\r' before '\n' is stripped; the last token "1\r"
	// still parses because strtol stops at whitespace.
	{name: "set-cr-cr-lf",
		send: "set set-cr-cr-lf 0 0 1\r\r\nx\r\nget set-cr-cr-lf\r\n",
		want: "STORED\r\nVALUE set-cr-cr-lf 0 1\r\nx\r\nEND\r\n"},
	// The data block must end in "\r\n", bare "\n" is a bad chunk.
	// memcached: exactly <bytes>+2 bytes are consumed as the block, whatever
	// they are; parsing resumes right after them ("get ..." below loses its
	// "g": "et set-data-bare-lf" -> ERROR).
	{name: "set-data-bare-lf",
		send: "set set-data-bare-lf 0 0 1\r\nx\nget set-data-bare-lf\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\n"},
	{name: "set-data-too-long",
		send: "set set-data-too-long 0 0 1\r\nxy\r\nget set-data-too-long\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n"},
	{name: "set-data-much-too-long",
		send: "set set-data-much-too-long 0 0 3\r\nabcdefgh\r\nget set-data-much-too-long\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n"},
	// "ab\r\nget" is the 7-byte block; " set-data-too-short" is then a command.
	{name: "set-data-too-short",
		send: "set set-data-too-short 0 0 5\r\nab\r\nget set-data-too-short\r\nget set-data-too-short\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n"},
	{name: "set-data-cr-without-lf",
		send: "set set-data-cr-without-lf 0 0 1\r\nx\r\r\nget set-data-cr-without-lf\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n"},
	{name: "set-data-bad-chunk-noreply",
		send: "set set-data-bad-chunk-noreply 0 0 1 noreply\r\nxy\r\nget set-data-bad-chunk-noreply\r\n",
		want: "ERROR\r\nEND\r\n"},
	{name: "set-data-containing-crlf",
		send: "set set-data-containing-crlf 0 0 3\r\nx\r\n\r\nget set-data-containing-crlf\r\n",
		want: "STORED\r\nVALUE set-data-containing-crlf 0 3\r\nx\r\n\r\nEND\r\n"},

	// Object too large: memcached answers SERVER_ERROR, swallows exactly
	// <bytes>+2 bytes, and the connection stays usable.
	{name: "set-too-large",
		send: "set set-too-large 0 0 1048577\r\n" + xs(itemSizeMax+1) + "\r\nget set-too-large\r\n",
		want: "SERVER_ERROR object too large for cache\r\nEND\r\n"},
	// memcached: the limit counts the item's overhead: exactly 1 MiB of data is too large.
	{name: "set-too-large-1mib",
		send: "set set-too-large-1mib 0 0 1048576\r\n" + xs(itemSizeMax) + "\r\nget set-too-large-1mib\r\n",
		want: "SERVER_ERROR object too large for cache\r\nEND\r\n"},
	// memcached: data + key + 59 (+4 if flags != 0) must fit in 1 MiB.
	{name: "set-largest",
		send: setLine("set-largest", xs(largestValue("set-largest", false))) + "get set-largest\r\n",
		want: "STORED\r\n" + valueReply("set-largest", xs(largestValue("set-largest", false))) + "END\r\n"},
	{name: "set-largest-plus-one",
		send: setLine("set-largest-plus-one", xs(largestValue("set-largest-plus-one", false)+1)) + "get set-largest-plus-one\r\n",
		want: "SERVER_ERROR object too large for cache\r\nEND\r\n"},
	{name: "set-largest-with-flags",
		send: fmt.Sprintf("set set-largest-with-flags 1 0 %d\r\n%s\r\nset set-largest-with-flags 1 0 %d\r\n%s\r\n",
			largestValue("set-largest-with-flags", true), xs(largestValue("set-largest-with-flags", true)),
			largestValue("set-largest-with-flags", true)+1, xs(largestValue("set-largest-with-flags", true)+1)),
		want: "STORED\r\nSERVER_ERROR object too large for cache\r\n"},
	// memcached: a failed set removes the old value (no stale data), a failed append does not.
	{name: "set-too-large-deletes-old-value",
		send: "set set-too-large-deletes-old-value 0 0 1\r\nx\r\nset set-too-large-deletes-old-value 0 0 2000000\r\n" +
			xs(2000000) + "\r\nget set-too-large-deletes-old-value\r\n",
		want: "STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n"},
	{name: "append-too-large-keeps-old-value",
		send: "set append-too-large-keeps-old-value 0 0 1\r\nx\r\nappend append-too-large-keeps-old-value 0 0 1048577\r\n" +
			xs(itemSizeMax+1) + "\r\nget append-too-large-keeps-old-value\r\n",
		want: "STORED\r\nSERVER_ERROR object too large for cache\r\nVALUE append-too-large-keeps-old-value 0 1\r\nx\r\nEND\r\n"},
	{name: "set-too-large-noreply",
		send: "set set-too-large-noreply 0 0 1048577 noreply\r\n" + xs(itemSizeMax+1) + "\r\nget set-too-large-noreply\r\n",
		want: "END\r\n"},
	// The swallowed block is <bytes>+2 bytes whatever they are: "ab" goes
	// with it, and the "\r\n" left over is an empty command.
	{name: "set-too-large-swallows-exact-length",
		send: "set set-too-large-swallows-exact-length 0 0 1048577\r\n" + xs(itemSizeMax+1) + "ab\r\nget set-too-large-swallows-exact-length\r\n",
		want: "SERVER_ERROR object too large for cache\r\nERROR\r\nEND\r\n"},

	// ---------------------------------------------------------------------
	// add <key> <flags> <exptime> <bytes> [noreply]\r\n<data block>\r\n
	{name: "add-new",
		send: "add add-new 3 0 1\r\nx\r\nget add-new\r\n",
		want: "STORED\r\nVALUE add-new 3 1\r\nx\r\nEND\r\n"},
	{name: "add-existing",
		send: "add add-existing 0 0 1\r\nx\r\nadd add-existing 0 0 1\r\ny\r\nget add-existing\r\n",
		want: "STORED\r\nNOT_STORED\r\nVALUE add-existing 0 1\r\nx\r\nEND\r\n"},
	{name: "add-noreply",
		send: "add add-noreply 0 0 1 noreply\r\nx\r\nadd add-noreply 0 0 1 noreply\r\ny\r\nget add-noreply\r\n",
		want: "VALUE add-noreply 0 1\r\nx\r\nEND\r\n"},
	{name: "add-over-expired",
		send: "set add-over-expired 0 -1 1\r\nx\r\nadd add-over-expired 0 0 1\r\ny\r\nget add-over-expired\r\n",
		want: "STORED\r\nSTORED\r\nVALUE add-over-expired 0 1\r\ny\r\nEND\r\n"},
	{name: "add-too-large",
		send: "add add-too-large 0 0 1048577\r\n" + xs(itemSizeMax+1) + "\r\nget add-too-large\r\n",
		want: "SERVER_ERROR object too large for cache\r\nEND\r\n"},

	// ---------------------------------------------------------------------
	// replace <key> <flags> <exptime> <bytes> [noreply]\r\n<data block>\r\n
	{name: "replace-missing",
		send: "replace replace-missing 0 0 1\r\nx\r\nget replace-missing\r\n",
		want: "NOT_STORED\r\nEND\r\n"},
	{name: "replace-existing",
		send: "set replace-existing 1 0 1\r\nx\r\nreplace replace-existing 5 0 2\r\nzz\r\nget replace-existing\r\n",
		want: "STORED\r\nSTORED\r\nVALUE replace-existing 5 2\r\nzz\r\nEND\r\n"},
	{name: "replace-noreply",
		send: "replace replace-noreply 0 0 1 noreply\r\nx\r\nset replace-noreply 0 0 1 noreply\r\nx\r\nreplace replace-noreply 0 0 1 noreply\r\ny\r\nget replace-noreply\r\n",
		want: "VALUE replace-noreply 0 1\r\ny\r\nEND\r\n"},
	{name: "replace-expired",
		send: "set replace-expired 0 -1 1\r\nx\r\nreplace replace-expired 0 0 1\r\ny\r\n",
		want: "STORED\r\nNOT_STORED\r\n"},

	// ---------------------------------------------------------------------
	// append|prepend <key> <flags> <exptime> <bytes> [noreply]\r\n<data block>\r\n
	{name: "append-missing",
		send: "append append-missing 0 0 1\r\nx\r\nget append-missing\r\n",
		want: "NOT_STORED\r\nEND\r\n"},
	{name: "prepend-missing",
		send: "prepend prepend-missing 0 0 1\r\nx\r\nget prepend-missing\r\n",
		want: "NOT_STORED\r\nEND\r\n"},
	// The flags and exptime of append/prepend are ignored: the item keeps its own.
	{name: "append-prepend-keep-flags",
		send: "set append-prepend-keep-flags 5 0 2\r\nzz\r\nappend append-prepend-keep-flags 9 -1 2\r\nAA\r\n" +
			"prepend append-prepend-keep-flags 9 -1 2\r\nBB\r\nget append-prepend-keep-flags\r\n",
		want: "STORED\r\nSTORED\r\nSTORED\r\nVALUE append-prepend-keep-flags 5 6\r\nBBzzAA\r\nEND\r\n"},
	{name: "append-noreply",
		send: "set append-noreply 0 0 1\r\na\r\nappend append-noreply 0 0 1 noreply\r\nb\r\nprepend append-noreply 0 0 1 noreply\r\nc\r\nappend append-noreply-missing 0 0 1 noreply\r\nd\r\nget append-noreply append-noreply-missing\r\n",
		want: "STORED\r\nVALUE append-noreply 0 3\r\ncab\r\nEND\r\n"},
	{name: "append-empty",
		send: "set append-empty 0 0 1\r\na\r\nappend append-empty 0 0 0\r\n\r\nget append-empty\r\n",
		want: "STORED\r\nSTORED\r\nVALUE append-empty 0 1\r\na\r\nEND\r\n"},
	{name: "append-bad-data-chunk",
		send: "set append-bad-data-chunk 0 0 1\r\na\r\nappend append-bad-data-chunk 0 0 1\r\nbc\r\nget append-bad-data-chunk\r\n",
		want: "STORED\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nVALUE append-bad-data-chunk 0 1\r\na\r\nEND\r\n"},
	{name: "append-key-251",
		send: "append " + key251 + " 0 0 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},

	// ---------------------------------------------------------------------
	// cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]\r\n<data block>\r\n
	// CAS uniques come from a counter shared by all items, so they are
	// captured; 12345678901234 is never reached in a test run.
	{name: "cas-missing",
		send: "cas cas-missing 0 0 1 12345678901234\r\nx\r\n",
		want: "NOT_FOUND\r\n"},
	{name: "cas-mismatch",
		send: "set cas-mismatch 0 0 1\r\nx\r\ncas cas-mismatch 0 0 1 12345678901234\r\ny\r\ncas cas-mismatch 0 0 1 0\r\nz\r\nget cas-mismatch\r\n",
		want: "STORED\r\nEXISTS\r\nEXISTS\r\nVALUE cas-mismatch 0 1\r\nx\r\nEND\r\n"},
	{name: "cas-success",
		send: "set cas-success 0 0 1\r\nx\r\ngets cas-success\r\n",
		want: "STORED\r\nVALUE cas-success 0 1 {c}\r\nx\r\nEND\r\n",
		then: []exchange{{
			send: "cas cas-success 3 0 1 {c}\r\ny\r\ncas cas-success 0 0 1 {c}\r\nz\r\nget cas-success\r\n",
			want: "STORED\r\nEXISTS\r\nVALUE cas-success 3 1\r\ny\r\nEND\r\n",
		}}},
	{name: "cas-noreply",
		send: "set cas-noreply 0 0 1\r\nx\r\ngets cas-noreply\r\n",
		want: "STORED\r\nVALUE cas-noreply 0 1 {c}\r\nx\r\nEND\r\n",
		then: []exchange{{
			send: "cas cas-noreply 0 0 1 {c} noreply\r\ny\r\ncas cas-noreply 0 0 1 {c} noreply\r\nz\r\ncas cas-noreply-missing 0 0 1 {c} noreply\r\nz\r\nget cas-noreply cas-noreply-missing\r\n",
			want: "VALUE cas-noreply 0 1\r\ny\r\nEND\r\n",
		}}},
	// touch does not change the CAS unique; every store does.
	{name: "cas-unique-after-touch-and-store",
		send: "set cas-unique-after-touch-and-store 0 0 1\r\nx\r\ngets cas-unique-after-touch-and-store\r\ntouch cas-unique-after-touch-and-store 0\r\ngets cas-unique-after-touch-and-store\r\n",
		want: "STORED\r\nVALUE cas-unique-after-touch-and-store 0 1 {c}\r\nx\r\nEND\r\nTOUCHED\r\nVALUE cas-unique-after-touch-and-store 0 1 {c}\r\nx\r\nEND\r\n",
		then: []exchange{{
			send: "append cas-unique-after-touch-and-store 0 0 1\r\ny\r\ncas cas-unique-after-touch-and-store 0 0 1 {c}\r\nz\r\n",
			want: "STORED\r\nEXISTS\r\n",
		}}},
	{name: "cas-missing-unique",
		send: "cas cas-missing-unique 0 0 1\r\nx\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "cas-unique-non-numeric",
		send: "cas cas-unique-non-numeric 0 0 1 abc\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "cas-unique-negative",
		send: "cas cas-unique-negative 0 0 1 -1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "cas-unique-2pow64",
		send: "cas cas-unique-2pow64 0 0 1 18446744073709551616\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "cas-unique-max",
		send: "cas cas-unique-max 0 0 1 18446744073709551615\r\nx\r\n",
		want: "NOT_FOUND\r\n"},
	{name: "cas-too-many-args",
		send: "cas cas-too-many-args 0 0 1 1 noreply x\r\nx\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "cas-key-251",
		send: "cas " + key251 + " 0 0 1 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},

	// ---------------------------------------------------------------------
	// get|gets <key>*\r\n
	{name: "get-miss",
		send: "get get-miss\r\n",
		want: "END\r\n"},
	{name: "get-multi",
		send: "set get-multi-a 1 0 1\r\na\r\nset get-multi-c 3 0 3\r\nccc\r\nget get-multi-a get-multi-b get-multi-c get-multi-d\r\n",
		want: "STORED\r\nSTORED\r\nVALUE get-multi-a 1 1\r\na\r\nVALUE get-multi-c 3 3\r\nccc\r\nEND\r\n"},
	{name: "get-duplicate-keys",
		send: "set get-duplicate-keys 0 0 1\r\nx\r\nget get-duplicate-keys get-duplicate-keys\r\n",
		want: "STORED\r\nVALUE get-duplicate-keys 0 1\r\nx\r\nVALUE get-duplicate-keys 0 1\r\nx\r\nEND\r\n"},
	// More keys than memcached's 24-token tokenizer takes at once.
	{name: "get-30-keys",
		send: "set get-30-keys-0 0 0 1\r\na\r\nset get-30-keys-29 0 0 1\r\nb\r\nget get-30-keys-0" +
			" get-30-keys-1 get-30-keys-2 get-30-keys-3 get-30-keys-4 get-30-keys-5 get-30-keys-6 get-30-keys-7" +
			" get-30-keys-8 get-30-keys-9 get-30-keys-10 get-30-keys-11 get-30-keys-12 get-30-keys-13 get-30-keys-14" +
			" get-30-keys-15 get-30-keys-16 get-30-keys-17 get-30-keys-18 get-30-keys-19 get-30-keys-20 get-30-keys-21" +
			" get-30-keys-22 get-30-keys-23 get-30-keys-24 get-30-keys-25 get-30-keys-26 get-30-keys-27 get-30-keys-28" +
			" get-30-keys-29 get-30-keys-0\r\n",
		want: "STORED\r\nSTORED\r\nVALUE get-30-keys-0 0 1\r\na\r\nVALUE get-30-keys-29 0 1\r\nb\r\nVALUE get-30-keys-0 0 1\r\na\r\nEND\r\n"},
	{name: "get-no-key",
		send: "get\r\n",
		want: "ERROR\r\n"},
	{name: "get-only-space",
		send: "get \r\n",
		want: "ERROR\r\n"},
	// "noreply" is just another key to get.
	{name: "get-noreply-is-a-key",
		send: "get get-noreply-is-a-key noreply\r\n",
		want: "END\r\n"},
	{name: "get-key-250",
		send: "get " + key250("get-key-250") + "\r\n",
		want: "END\r\n"},
	{name: "get-key-251",
		send: "get " + key251 + "\r\nget get-key-251\r\n",
		want: "CLIENT_ERROR bad command line format\r\nEND\r\n"},
	// memcached: a long key anywhere in the list drops the VALUEs already
	// produced for earlier keys: the reply is only the error.
	{name: "get-key-251-among-hits",
		send: "get get-key-251-among-hits " + key251 + " get-key-251-among-hits\r\n",
		want: "CLIENT_ERROR bad command line format\r\n",
		then: []exchange{{
			send: setLine("get-key-251-among-hits", "x"),
			want: "STORED\r\n",
		}, {
			send: "get get-key-251-among-hits get-key-251-among-hits " + key251 + "\r\n",
			want: "CLIENT_ERROR bad command line format\r\n",
		}}},
	{name: "gets-key-251",
		send: "gets " + key251 + "\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},
	{name: "get-is-case-sensitive",
		send: "GET get-is-case-sensitive\r\n",
		want: "ERROR\r\n"},
	{name: "gets-same-unique-twice",
		send: "set gets-same-unique-twice 2 0 1\r\nx\r\ngets gets-same-unique-twice gets-same-unique-twice-miss gets-same-unique-twice\r\n",
		want: "STORED\r\nVALUE gets-same-unique-twice 2 1 {c}\r\nx\r\nVALUE gets-same-unique-twice 2 1 {c}\r\nx\r\nEND\r\n"},
	{name: "gets-no-key",
		send: "gets\r\n",
		want: "ERROR\r\n"},
	{name: "get-bare-lf-lines",
		send: "set get-bare-lf-lines 0 0 1\r\nx\r\nget get-bare-lf-lines\n\nget get-bare-lf-lines\r\n",
		want: "STORED\r\n" + valueReply("get-bare-lf-lines", "x") + "END\r\nERROR\r\n" + valueReply("get-bare-lf-lines", "x") + "END\r\n"},
	// A line longer than memcached's 16 KiB read buffer: multigets are unbounded.
	{name: "get-multiget-over-16k",
		send: multiGet("get-multiget-over-16k-", 4000),
		want: "END\r\n"},
	{name: "get-large-value",
		send: setLine("get-large-value", xs(500000)) + "get get-large-value get-large-value\r\n",
		want: "STORED\r\n" + valueReply("get-large-value", xs(500000)) + valueReply("get-large-value", xs(500000)) + "END\r\n"},

	// Keys are any bytes but space, "\r\n" and NUL: tabs and control bytes
	// are part of the key.
	{name: "key-with-tab",
		send: "set key-with-tab\tx 0 0 1\r\nx\r\nget key-with-tab\tx key-with-tab\r\n",
		want: "STORED\r\nVALUE key-with-tab\tx 0 1\r\nx\r\nEND\r\n"},
	{name: "key-with-control-bytes",
		send: "set key-with-control-bytes\x01\x7f\xff 0 0 1\r\nx\r\nget key-with-control-bytes\x01\x7f\xff\r\n",
		want: "STORED\r\nVALUE key-with-control-bytes\x01\x7f\xff 0 1\r\nx\r\nEND\r\n"},
	// memcached: a NUL ends the command line (C strings): the rest is ignored.
	{name: "nul-ends-get-line",
		send: "set nul-ends-get-line 0 0 1\r\nx\r\nget nul-ends-get-line\x00junk\r\n",
		want: "STORED\r\nVALUE nul-ends-get-line 0 1\r\nx\r\nEND\r\n"},
	{name: "nul-in-set-key",
		send: "set nul-in-set-key\x00z 0 0 1\r\nx\r\nget nul-in-set-key\r\n",
		want: "ERROR\r\nERROR\r\nEND\r\n"},
	{name: "nul-in-command",
		send: "ver\x00sion\r\n",
		want: "ERROR\r\n"},

	// ---------------------------------------------------------------------
	// gat|gats <exptime> <key>*\r\n
	{name: "gat-hit-clears-ttl",
		send: "set gat-hit-clears-ttl 4 100 1\r\nx\r\ngat 0 gat-hit-clears-ttl gat-hit-clears-ttl-miss gat-hit-clears-ttl\r\nmg gat-hit-clears-ttl t\r\n",
		want: "STORED\r\nVALUE gat-hit-clears-ttl 4 1\r\nx\r\nVALUE gat-hit-clears-ttl 4 1\r\nx\r\nEND\r\nHD t-1\r\n"},
	{name: "gat-miss",
		send: "gat 0 gat-miss\r\n",
		want: "END\r\n"},
	// gat with a past exptime returns the value, then it is gone.
	{name: "gat-expire",
		send: "set gat-expire 0 0 1\r\nx\r\ngat -1 gat-expire\r\ngat 0 gat-expire\r\n",
		want: "STORED\r\nVALUE gat-expire 0 1\r\nx\r\nEND\r\nEND\r\n"},
	{name: "gats-unique",
		send: "set gats-unique 0 0 1\r\nx\r\ngats 0 gats-unique\r\ngets gats-unique\r\n",
		want: "STORED\r\nVALUE gats-unique 0 1 {c}\r\nx\r\nEND\r\nVALUE gats-unique 0 1 {c}\r\nx\r\nEND\r\n"},
	// memcached: gat/gats with an exptime and no key is an empty hit list.
	{name: "gat-no-key",
		send: "gat 0\r\ngats 0\r\n",
		want: "END\r\nEND\r\n"},
	{name: "gat-no-args",
		send: "gat\r\ngats\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "gat-bad-exptime",
		send: "gat abc gat-bad-exptime\r\n",
		want: "CLIENT_ERROR invalid exptime argument\r\n"},
	{name: "gat-key-251",
		send: "gat 0 " + key251 + "\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// touch <key> <exptime> [noreply]\r\n
	{name: "touch-hit",
		send: "set touch-hit 0 100 1\r\nx\r\ntouch touch-hit 0\r\nmg touch-hit t v\r\n",
		want: "STORED\r\nTOUCHED\r\nVA 1 t-1\r\nx\r\n"},
	{name: "touch-miss",
		send: "touch touch-miss 0\r\n",
		want: "NOT_FOUND\r\n"},
	{name: "touch-expire",
		send: "set touch-expire 0 0 1\r\nx\r\ntouch touch-expire -1\r\nget touch-expire\r\n",
		want: "STORED\r\nTOUCHED\r\nEND\r\n"},
	{name: "touch-noreply",
		send: "set touch-noreply 0 0 1\r\nx\r\ntouch touch-noreply -1 noreply\r\ntouch touch-noreply 0 noreply\r\nget touch-noreply\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "touch-bad-exptime",
		send: "touch touch-bad-exptime abc\r\ntouch touch-bad-exptime abc noreply\r\n",
		want: "CLIENT_ERROR invalid exptime argument\r\n"},
	{name: "touch-missing-exptime",
		send: "touch touch-missing-exptime\r\n",
		want: "ERROR\r\n"},
	// memcached: a fourth token other than "noreply" is ignored; a fifth is an error.
	{name: "touch-extra-token",
		send: "touch touch-extra-token 0 extra\r\ntouch touch-extra-token 0 0 0\r\n",
		want: "NOT_FOUND\r\nERROR\r\n"},
	{name: "touch-key-251",
		send: "touch " + key251 + " 0\r\ntouch " + key251 + " 0 noreply\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// delete <key> [0] [noreply]\r\n   (the 0 is a leftover of the old "time" argument)
	{name: "delete-hit-then-miss",
		send: "set delete-hit-then-miss 0 0 1\r\nx\r\ndelete delete-hit-then-miss\r\ndelete delete-hit-then-miss\r\nget delete-hit-then-miss\r\n",
		want: "STORED\r\nDELETED\r\nNOT_FOUND\r\nEND\r\n"},
	{name: "delete-zero",
		send: "set delete-zero 0 0 1\r\nx\r\ndelete delete-zero 0\r\ndelete delete-zero 0\r\n",
		want: "STORED\r\nDELETED\r\nNOT_FOUND\r\n"},
	{name: "delete-noreply",
		send: "set delete-noreply 0 0 1\r\nx\r\ndelete delete-noreply noreply\r\ndelete delete-noreply noreply\r\nget delete-noreply\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "delete-zero-noreply",
		send: "set delete-zero-noreply 0 0 1\r\nx\r\ndelete delete-zero-noreply 0 noreply\r\nget delete-zero-noreply\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "delete-nonzero-time",
		send: "set delete-nonzero-time 0 0 1\r\nx\r\ndelete delete-nonzero-time 1\r\nget delete-nonzero-time\r\n",
		want: "STORED\r\nCLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n" + valueReply("delete-nonzero-time", "x") + "END\r\n"},
	// The error is silenced by noreply, and nothing is deleted.
	{name: "delete-nonzero-time-noreply",
		send: "set delete-nonzero-time-noreply 0 0 1\r\nx\r\ndelete delete-nonzero-time-noreply 1 noreply\r\nget delete-nonzero-time-noreply\r\n",
		want: "STORED\r\n" + valueReply("delete-nonzero-time-noreply", "x") + "END\r\n"},
	{name: "delete-bad-time",
		send: "delete delete-bad-time abc\r\ndelete delete-bad-time -1\r\ndelete delete-bad-time 00\r\ndelete delete-bad-time noreplyx\r\n",
		want: strings.Repeat("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n", 4)},
	{name: "delete-zero-zero",
		send: "delete delete-zero-zero 0 0\r\n",
		want: "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"},
	{name: "delete-too-many-args",
		send: "delete delete-too-many-args 0 0 0\r\n",
		want: "ERROR\r\n"},
	{name: "delete-no-key",
		send: "delete\r\n",
		want: "ERROR\r\n"},
	{name: "delete-key-251",
		send: "delete " + key251 + "\r\ndelete " + key251 + " noreply\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// incr|decr <key> <delta> [noreply]\r\n
	{name: "incr-basic",
		send: "set incr-basic 0 0 2\r\n10\r\nincr incr-basic 5\r\ndecr incr-basic 6\r\n",
		want: "STORED\r\n15\r\n9\r\n"},
	{name: "incr-miss",
		send: "incr incr-miss 1\r\ndecr incr-miss 1\r\n",
		want: "NOT_FOUND\r\nNOT_FOUND\r\n"},
	// memcached: a shorter result is written in place, padded with spaces to
	// the old length; a longer one makes a new item.
	{name: "decr-shrink-pads-with-spaces",
		send: "set decr-shrink-pads-with-spaces 0 0 2\r\n10\r\ndecr decr-shrink-pads-with-spaces 1\r\nget decr-shrink-pads-with-spaces\r\nincr decr-shrink-pads-with-spaces 1\r\nget decr-shrink-pads-with-spaces\r\n",
		want: "STORED\r\n9\r\nVALUE decr-shrink-pads-with-spaces 0 2\r\n9 \r\nEND\r\n10\r\nVALUE decr-shrink-pads-with-spaces 0 2\r\n10\r\nEND\r\n"},
	{name: "incr-grows",
		send: "set incr-grows 0 0 2\r\n99\r\nincr incr-grows 1\r\nget incr-grows\r\ndecr incr-grows 1\r\nget incr-grows\r\n",
		want: "STORED\r\n100\r\nVALUE incr-grows 0 3\r\n100\r\nEND\r\n99\r\nVALUE incr-grows 0 3\r\n99 \r\nEND\r\n"},
	{name: "incr-wraps-at-2pow64",
		send: "set incr-wraps-at-2pow64 0 0 20\r\n18446744073709551615\r\nincr incr-wraps-at-2pow64 1\r\nget incr-wraps-at-2pow64\r\n",
		want: "STORED\r\n0\r\nVALUE incr-wraps-at-2pow64 0 20\r\n0                   \r\nEND\r\n"},
	{name: "incr-above-2pow63",
		send: "set incr-above-2pow63 0 0 19\r\n9223372036854775808\r\nincr incr-above-2pow63 1\r\n",
		want: "STORED\r\n9223372036854775809\r\n"},
	{name: "incr-max-delta",
		send: "set incr-max-delta 0 0 1\r\n1\r\nincr incr-max-delta 18446744073709551615\r\n",
		want: "STORED\r\n0\r\n"},
	{name: "decr-floors-at-zero",
		send: "set decr-floors-at-zero 0 0 1\r\n5\r\ndecr decr-floors-at-zero 100\r\ndecr decr-floors-at-zero 1\r\n",
		want: "STORED\r\n0\r\n0\r\n"},
	{name: "decr-large",
		send: "set decr-large 0 0 20\r\n18446744073709551615\r\ndecr decr-large 18446744073709551614\r\n",
		want: "STORED\r\n1\r\n"},
	{name: "incr-keeps-flags",
		send: "set incr-keeps-flags 42 0 1\r\n1\r\nincr incr-keeps-flags 1\r\nget incr-keeps-flags\r\n",
		want: "STORED\r\n2\r\nVALUE incr-keeps-flags 42 1\r\n2\r\nEND\r\n"},
	{name: "incr-non-numeric",
		send: "set incr-non-numeric 0 0 3\r\nabc\r\nincr incr-non-numeric 1\r\ndecr incr-non-numeric 1\r\n",
		want: "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{name: "incr-negative-value",
		send: "set incr-negative-value 0 0 2\r\n-1\r\nincr incr-negative-value 1\r\n",
		want: "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{name: "incr-value-over-2pow64",
		send: "set incr-value-over-2pow64 0 0 20\r\n18446744073709551616\r\nincr incr-value-over-2pow64 1\r\n",
		want: "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{name: "incr-empty-value",
		send: "set incr-empty-value 0 0 0\r\n\r\nincr incr-empty-value 1\r\n",
		want: "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	// memcached: the value goes through strtoull: leading spaces, trailing
	// spaces and leading zeros are fine.
	{name: "incr-value-with-spaces",
		send: "set incr-value-with-spaces 0 0 4\r\n 12 \r\nincr incr-value-with-spaces 1\r\nget incr-value-with-spaces\r\n",
		want: "STORED\r\n13\r\nVALUE incr-value-with-spaces 0 4\r\n13  \r\nEND\r\n"},
	{name: "incr-leading-zeros",
		send: "set incr-leading-zeros 0 0 3\r\n007\r\nincr incr-leading-zeros 1\r\nget incr-leading-zeros\r\n",
		want: "STORED\r\n8\r\nVALUE incr-leading-zeros 0 3\r\n8  \r\nEND\r\n"},
	{name: "incr-invalid-delta",
		send: "set incr-invalid-delta 0 0 1\r\n1\r\nincr incr-invalid-delta abc\r\nincr incr-invalid-delta -1\r\nincr incr-invalid-delta 18446744073709551616\r\ndecr incr-invalid-delta 1x\r\n",
		want: "STORED\r\n" + strings.Repeat("CLIENT_ERROR invalid numeric delta argument\r\n", 4)},
	{name: "incr-invalid-delta-on-miss",
		send: "incr incr-invalid-delta-on-miss abc\r\n",
		want: "CLIENT_ERROR invalid numeric delta argument\r\n"},
	{name: "incr-delta-plus-sign",
		send: "set incr-delta-plus-sign 0 0 1\r\n1\r\nincr incr-delta-plus-sign +3\r\n",
		want: "STORED\r\n4\r\n"},
	{name: "incr-noreply",
		send: "set incr-noreply 0 0 1\r\n1\r\nincr incr-noreply 1 noreply\r\ndecr incr-noreply 5 noreply\r\nincr incr-noreply-missing 1 noreply\r\nget incr-noreply\r\n",
		want: "STORED\r\nVALUE incr-noreply 0 1\r\n0\r\nEND\r\n"},
	{name: "incr-errors-noreply",
		send: "set incr-errors-noreply 0 0 1\r\na\r\nincr incr-errors-noreply 1 noreply\r\nincr incr-errors-noreply abc noreply\r\n",
		want: "STORED\r\n"},
	{name: "incr-missing-delta",
		send: "incr incr-missing-delta\r\nincr\r\n",
		want: "ERROR\r\nERROR\r\n"},
	// memcached: a fourth token other than "noreply" is ignored.
	{name: "incr-extra-token",
		send: "set incr-extra-token 0 0 1\r\n1\r\nincr incr-extra-token 1 2\r\nincr incr-extra-token 1 2 3\r\n",
		want: "STORED\r\n2\r\nERROR\r\n"},
	{name: "incr-key-251",
		send: "incr " + key251 + " 1\r\ndecr " + key251 + " 1\r\nincr " + key251 + " 1 noreply\r\n",
		want: "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// version\r\n   verbosity <level> [noreply]\r\n   quit\r\n   stats [<args>]\r\n
	{name: "version", versionLine: true,
		send: "version\r\n",
		want: "VERSION 1.6.18\r\n"},
	{name: "version-ignores-args", versionLine: true,
		send: "version extra\r\nversion noreply\r\nversion\x00junk\r\n",
		want: "VERSION 1.6.18\r\nVERSION 1.6.18\r\nVERSION 1.6.18\r\n"},
	{name: "verbosity",
		send: "verbosity 0\r\nverbosity 0 0\r\n",
		want: "OK\r\nOK\r\n"},
	{name: "verbosity-noreply",
		send: "verbosity 0 noreply\r\nverbosity noreply\r\nverbosity abc noreply\r\n",
		want: ""},
	{name: "verbosity-errors",
		send: "verbosity\r\nverbosity abc\r\nverbosity 0 0 0\r\n",
		want: "ERROR\r\nCLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "quit", close: true,
		send: "quit\r\n",
		want: ""},
	{name: "quit-after-reply", close: true, versionLine: true,
		send: "version\r\nquit\r\nversion\r\n",
		want: "VERSION 1.6.18\r\n"},
	{name: "quit-extra-token", close: true,
		send: "quit now\r\n",
		want: ""},
	{name: "stats-unknown",
		send: "stats nonexistent\r\nstats a b c d e f\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "stats-detail-usage",
		send: "stats detail\r\nstats detail foo\r\n",
		want: "CLIENT_ERROR usage: stats detail on|off|dump\r\nCLIENT_ERROR usage: stats detail on|off|dump\r\n"},
	{name: "stats-reset",
		send: "stats reset\r\n",
		want: "RESET\r\n"},
	{name: "stats-is-case-sensitive",
		send: "STATS\r\n",
		want: "ERROR\r\n"},

	// ---------------------------------------------------------------------
	// Unknown commands and empty lines.
	{name: "unknown-command",
		send: "foo\r\nfoo noreply\r\n",
		want: "ERROR\r\nERROR\r\n"},
	{name: "empty-line",
		send: "\r\n",
		want: "ERROR\r\n"},
	{name: "empty-lines-bare-lf",
		send: "\n\r\n\n",
		want: "ERROR\r\nERROR\r\nERROR\r\n"},
	{name: "blank-lines",
		send: " \r\n\t\r\n\r\r\n",
		want: "ERROR\r\nERROR\r\nERROR\r\n"},
	// A lone '\r' does not end a line.
	{name: "cr-inside-line",
		send: "version\rversion\r\n",
		want: "ERROR\r\n"},

	// ---------------------------------------------------------------------
	// Overlong lines.
	// memcached: when more than 2048 bytes are buffered without a '\n' and
	// the line does not start with "get " or "gets ", it closes the
	// connection without a reply.
	{name: "overlong-line-no-newline", close: true,
		send: strings.Repeat("a", 4096),
		want: ""},
	{name: "overlong-line-2049", close: true,
		send: strings.Repeat("a", 2049),
		want: ""},
	{name: "overlong-set-line-no-newline", close: true,
		send: "set overlong-set-line-no-newline 0 0 1 " + strings.Repeat("a", 3000),
		want: ""},
	{name: "overlong-line-leading-spaces", close: true,
		send: "   " + strings.Repeat("a", 3000),
		want: ""},
	{name: "overlong-meta-line", close: true,
		send: "mg " + strings.Repeat("k", 3000),
		want: ""},
	// memcached: a line longer than its 16 KiB read buffer can never be
	// complete: closed (with a reset, as the rest is unread).
	{name: "overlong-line-over-16k", close: true,
		send: strings.Repeat("a", 20000) + "\r\n",
		want: ""},
	// A complete line that arrives in one piece is parsed whatever its
	// length (up to the 16 KiB buffer).
	{name: "long-line-complete",
		send: strings.Repeat("a", 4096) + "\r\n",
		want: "ERROR\r\n"},
	{name: "long-set-line-complete",
		send: "set " + strings.Repeat("k", 3000) + " 0 0 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},
	{name: "long-mg-line-complete",
		send: "mg " + strings.Repeat("k", 3000) + " v\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},
	// get/gets lines may grow past 2048 bytes before their newline arrives.
	{name: "overlong-get-line-split",
		send: "get " + strings.Repeat("k", 3000),
		want: "",
		then: []exchange{{
			send: "\r\nget overlong-get-line-split\r\n",
			want: "CLIENT_ERROR bad command line format\r\nEND\r\n",
		}}},
	{name: "overlong-gets-line-split",
		send: "gets overlong-gets-line-split" + strings.Repeat(" overlong-gets-line-split", 200),
		want: "",
		then: []exchange{{
			send: "\r\n",
			want: "END\r\n",
		}}},

	// ---------------------------------------------------------------------
	// Pipelining: many commands in one write, replies in order.
	{name: "pipeline-20",
		send: "set pipeline-20-a 0 0 1\r\n1\r\n" +
			"set pipeline-20-b 7 0 2\r\nbb\r\n" +
			"get pipeline-20-a pipeline-20-b\r\n" +
			"incr pipeline-20-a 9\r\n" +
			"decr pipeline-20-a 3\r\n" +
			"append pipeline-20-b 0 0 1\r\nB\r\n" +
			"prepend pipeline-20-b 0 0 1\r\nb\r\n" +
			"add pipeline-20-a 0 0 1\r\nx\r\n" +
			"replace pipeline-20-c 0 0 1\r\nx\r\n" +
			"delete pipeline-20-a\r\n" +
			"touch pipeline-20-b 0\r\n" +
			"get pipeline-20-a pipeline-20-b\r\n" +
			"mn\r\n" +
			"ms pipeline-20-c 2 F3\r\ncc\r\n" +
			"mg pipeline-20-c v f\r\n" +
			"ma pipeline-20-d N0 J7 v\r\n" +
			"md pipeline-20-c\r\n" +
			"mg pipeline-20-c v\r\n" +
			"bogus\r\n" +
			"get pipeline-20-d\r\n",
		want: "STORED\r\n" +
			"STORED\r\n" +
			"VALUE pipeline-20-a 0 1\r\n1\r\nVALUE pipeline-20-b 7 2\r\nbb\r\nEND\r\n" +
			"10\r\n" +
			"7\r\n" +
			"STORED\r\n" +
			"STORED\r\n" +
			"NOT_STORED\r\n" +
			"NOT_STORED\r\n" +
			"DELETED\r\n" +
			"TOUCHED\r\n" +
			"VALUE pipeline-20-b 7 4\r\nbbbB\r\nEND\r\n" +
			"MN\r\n" +
			"HD\r\n" +
			"VA 2 f3\r\ncc\r\n" +
			"VA 1\r\n7\r\n" +
			"HD\r\n" +
			"EN\r\n" +
			"ERROR\r\n" +
			"VALUE pipeline-20-d 0 1\r\n7\r\nEND\r\n"},
	{name: "pipeline-100-sets",
		send: pipelineSetsSend,
		want: pipelineSetsWant},
	{name: "pipeline-mixed-line-endings",
		send: "set pipeline-mixed-line-endings 0 0 1\nx\r\nget pipeline-mixed-line-endings\r\ndelete pipeline-mixed-line-endings\nget pipeline-mixed-line-endings\n",
		want: "STORED\r\nVALUE pipeline-mixed-line-endings 0 1\r\nx\r\nEND\r\nDELETED\r\nEND\r\n"},
	{name: "pipeline-errors-do-not-stop-batch",
		send: "get\r\nset pipeline-errors-do-not-stop-batch 0 0 1\r\nxy\r\nfoo\r\nset pipeline-errors-do-not-stop-batch 0 0 1\r\nz\r\nget pipeline-errors-do-not-stop-batch\r\n",
		want: "ERROR\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nERROR\r\nSTORED\r\nVALUE pipeline-errors-do-not-stop-batch 0 1\r\nz\r\nEND\r\n"},

	// ---------------------------------------------------------------------
	// mn\r\n
	{name: "mn",
		send: "mn\r\nmn\r\n",
		want: "MN\r\nMN\r\n"},
	{name: "mn-ignores-tokens",
		send: "mn O1 q\r\n",
		want: "MN\r\n"},

	// ---------------------------------------------------------------------
	// mg <key> <flag>*\r\n
	// Return flags come back in the order they were asked for; W, X and Z
	// are appended after them.
	{name: "mg-miss",
		send: "mg mg-miss\r\nmg mg-miss v\r\n",
		want: "EN\r\nEN\r\n"},
	// A miss carries only the k and O flags.
	{name: "mg-miss-flags",
		send: "mg mg-miss-flags s t f c k O1 v h l\r\n",
		want: "EN kmg-miss-flags O1\r\n"},
	{name: "mg-miss-q",
		send: "mg mg-miss-q v q\r\nmg mg-miss-q k q O1\r\nmn\r\n",
		want: "MN\r\n"},
	{name: "mg-hit-no-flags",
		send: "set mg-hit-no-flags 7 0 2\r\nhi\r\nmg mg-hit-no-flags\r\n",
		want: "STORED\r\nHD\r\n"},
	{name: "mg-hit-v",
		send: "set mg-hit-v 7 0 2\r\nhi\r\nmg mg-hit-v v\r\n",
		want: "STORED\r\nVA 2\r\nhi\r\n"},
	{name: "mg-flag-order",
		send: "set mg-flag-order 7 0 2\r\nhi\r\nmg mg-flag-order s v f k O99 t\r\nmg mg-flag-order t f s v k\r\n",
		want: "STORED\r\nVA 2 s2 f7 kmg-flag-order O99 t-1\r\nhi\r\nVA 2 t-1 f7 s2 kmg-flag-order\r\nhi\r\n"},
	// q hides only EN (the miss) for mg: HD and VA still come.
	{name: "mg-q-hit",
		send: "set mg-q-hit 0 0 2\r\nhi\r\nmg mg-q-hit q v\r\nmg mg-q-hit q\r\nmn\r\n",
		want: "STORED\r\nVA 2\r\nhi\r\nHD\r\nMN\r\n"},
	// h: whether the item was fetched before this request; u: do not mark it fetched.
	{name: "mg-hit-before",
		send: "set mg-hit-before 0 0 1\r\nx\r\nmg mg-hit-before u v h\r\nmg mg-hit-before h\r\nmg mg-hit-before h\r\n",
		want: "STORED\r\nVA 1 h0\r\nx\r\nHD h0\r\nHD h1\r\n"},
	{name: "mg-last-access",
		send: "set mg-last-access 0 0 1\r\nx\r\nmg mg-last-access l h\r\n",
		want: "STORED\r\nHD l{*} h0\r\n"},
	{name: "mg-cas-matches-gets",
		send: "set mg-cas-matches-gets 0 0 1\r\nx\r\nmg mg-cas-matches-gets c\r\ngets mg-cas-matches-gets\r\n",
		want: "STORED\r\nHD c{c}\r\nVALUE mg-cas-matches-gets 0 1 {c}\r\nx\r\nEND\r\n"},
	// T updates the TTL; t in the same request reports the new one exactly.
	{name: "mg-touch",
		send: "set mg-touch 0 0 1\r\nx\r\nmg mg-touch T100 t\r\n",
		want: "STORED\r\nHD t100\r\n"},
	{name: "mg-touch-expire",
		send: "set mg-touch-expire 0 0 1\r\nx\r\nmg mg-touch-expire T-1 v\r\nmg mg-touch-expire v\r\n",
		want: "STORED\r\nVA 1\r\nx\r\nEN\r\n"},
	// N vivifies a miss: an empty item, and W (you won: fill it); later
	// requests get Z (someone else is filling it).
	{name: "mg-vivify",
		send: "mg mg-vivify N30 v c t\r\nmg mg-vivify N30 v t\r\nmg mg-vivify s\r\n",
		want: "VA 0 c{*} t30 W\r\n\r\nVA 0 t{*} Z\r\n\r\nHD s0 Z\r\n"},
	{name: "mg-vivify-q",
		send: "mg mg-vivify-q q N30 s\r\nmn\r\n",
		want: "HD s0 W\r\nMN\r\n"},
	// R: if the TTL left is under the token, the first requester wins a recache.
	{name: "mg-recache",
		send: "set mg-recache 0 100 1\r\na\r\nmg mg-recache R200 s\r\nmg mg-recache R200 s\r\nmg mg-recache s\r\n",
		want: "STORED\r\nHD s1 W\r\nHD s1 Z\r\nHD s1 Z\r\n"},
	// memcached: a stale item (md I) is served with X; the first request also
	// gets W (" X W"), the later ones Z before X (" Z X").
	{name: "mg-stale",
		send: "set mg-stale 0 0 1\r\na\r\nmd mg-stale I\r\nmg mg-stale s v\r\nmg mg-stale s v\r\nmg mg-stale s\r\n",
		want: "STORED\r\nHD\r\nVA 1 s1 X W\r\na\r\nVA 1 s1 Z X\r\na\r\nHD s1 Z X\r\n"},
	{name: "mg-opaque",
		send: "set mg-opaque 0 0 1\r\na\r\nmg mg-opaque O\r\nmg mg-opaque O1234567890123456789012345678901\r\n",
		want: "STORED\r\nHD O\r\nHD O1234567890123456789012345678901\r\n"},
	// The O token, letter included, may be at most 32 bytes.
	{name: "mg-opaque-too-long",
		send: "mg mg-opaque-too-long O12345678901234567890123456789012\r\n",
		want: "CLIENT_ERROR opaque token too long\r\n"},
	{name: "mg-duplicate-flag",
		send: "mg mg-duplicate-flag v v\r\nmg mg-duplicate-flag Oa Ob\r\n",
		want: "CLIENT_ERROR duplicate flag\r\nCLIENT_ERROR duplicate flag\r\n"},
	// memcached 1.6.18 has no E flag for mg.
	{name: "mg-invalid-flag",
		send: "mg mg-invalid-flag z\r\nmg mg-invalid-flag 1\r\nmg mg-invalid-flag A\r\nmg mg-invalid-flag E5\r\n",
		want: "CLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\n"},
	// memcached: only the first byte of a flag token counts for flags
	// without a value: "vv" is v.
	{name: "mg-flag-token-tail-ignored",
		send: "set mg-flag-token-tail-ignored 0 0 1\r\na\r\nmg mg-flag-token-tail-ignored vv kx\r\n",
		want: "STORED\r\nVA 1 kmg-flag-token-tail-ignored\r\na\r\n"},
	// memcached: at most 17 flag tokens; an 18th fails before duplicates are checked.
	{name: "mg-too-many-flags",
		send: "mg mg-too-many-flags " + manyFlags("v", 17) + "\r\nmg mg-too-many-flags " + manyFlags("v", 18) + "\r\n",
		want: "CLIENT_ERROR duplicate flag\r\nCLIENT_ERROR options flags are too long\r\n"},
	{name: "mg-bad-token",
		send: "mg mg-bad-token Tabc v\r\nmg mg-bad-token Nabc v\r\nmg mg-bad-token T v\r\n",
		want: "CLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\n"},
	{name: "mg-no-key",
		send: "mg\r\n",
		want: "ERROR\r\n"},
	{name: "mg-key-250",
		send: setLine(key250("mg-key-250"), "x") + "mg " + key250("mg-key-250") + " v k\r\n",
		want: "STORED\r\nVA 1 k" + key250("mg-key-250") + "\r\nx\r\n"},
	{name: "mg-key-251",
		send: "mg " + key251 + " v\r\nmg " + key251 + " v q\r\n",
		want: "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"},
	// b: the key is base64. memcached 1.6.18's mg returns k decoded, without b
	// (ms, md and ma return it encoded, followed by b).
	{name: "mg-base64-key",
		send: "set mg-base64-key 0 0 1\r\nx\r\nmg bWctYmFzZTY0LWtleQ== b v k O1\r\n",
		want: "STORED\r\nVA 1 kmg-base64-key O1\r\nx\r\n"},
	{name: "mg-base64-key-invalid",
		send: "mg !!!! b v\r\nmg YQ b v\r\nmg YWJj= b\r\nmg mg-base64-key-invalid b\r\n",
		want: "CLIENT_ERROR error decoding key\r\nCLIENT_ERROR error decoding key\r\nCLIENT_ERROR error decoding key\r\nCLIENT_ERROR error decoding key\r\n"},
	{name: "mg-spacing-and-bare-lf",
		send: "set mg-spacing-and-bare-lf 0 0 1\r\nx\r\nmg  mg-spacing-and-bare-lf   v  \r\nmg mg-spacing-and-bare-lf v\n",
		want: "STORED\r\nVA 1\r\nx\r\nVA 1\r\nx\r\n"},
	{name: "mg-key-with-tab",
		send: "ms mg-key-with-tab\tx 1\r\na\r\nmg mg-key-with-tab\tx v k\r\n",
		want: "HD\r\nVA 1 kmg-key-with-tab\tx\r\na\r\n"},
	// memcached: a NUL ends the line, so the flags after it are ignored.
	{name: "mg-nul-ends-line",
		send: "ms mg-nul-ends-line 1\r\na\r\nmg mg-nul-ends-line\x00 v\r\n",
		want: "HD\r\nHD\r\n"},

	// ---------------------------------------------------------------------
	// ms <key> <datalen> <flag>*\r\n<data block>\r\n
	{name: "ms-basic",
		send: "ms ms-basic 2\r\nhi\r\nmg ms-basic v f t\r\n",
		want: "HD\r\nVA 2 f0 t-1\r\nhi\r\n"},
	{name: "ms-return-flags",
		send: "ms ms-return-flags 2 F5 T0 k O9 c\r\nhi\r\nmg ms-return-flags v f c\r\n",
		want: "HD kms-return-flags O9 c{c}\r\nVA 2 f5 c{c}\r\nhi\r\n"},
	{name: "ms-q",
		send: "ms ms-q 2 q k O1 c\r\nhi\r\nmn\r\n",
		want: "MN\r\n"},
	// q hides HD only: NS, NF and EX still come, with their flags.
	{name: "ms-q-failures",
		send: "ms ms-q-failures 1\r\na\r\nms ms-q-failures 1 ME q k O6\r\nb\r\nms ms-q-failures-missing 1 C12345678901234 q\r\nb\r\n" +
			"ms ms-q-failures 1 C12345678901234 q\r\nb\r\nms ms-q-failures-missing 1 MR q\r\nb\r\nmn\r\n",
		want: "HD\r\nNS kms-q-failures O6\r\nNF\r\nEX\r\nNS\r\nMN\r\n"},
	{name: "ms-cas",
		send: "ms ms-cas 1 c\r\na\r\n",
		want: "HD c{c}\r\n",
		then: []exchange{{
			send: "ms ms-cas 1 C{c}\r\nb\r\nms ms-cas 1 C{c}\r\nc\r\nmg ms-cas v\r\n",
			want: "HD\r\nEX\r\nVA 1\r\nb\r\n",
		}}},
	{name: "ms-mode-add",
		send: "ms ms-mode-add 2 ME\r\nhi\r\nms ms-mode-add 2 ME\r\nho\r\nmg ms-mode-add v\r\n",
		want: "HD\r\nNS\r\nVA 2\r\nhi\r\n"},
	{name: "ms-modes-on-miss",
		send: "ms ms-modes-on-miss 2 MA\r\nhi\r\nms ms-modes-on-miss 2 MP\r\nhi\r\nms ms-modes-on-miss 2 MR\r\nhi\r\nmg ms-modes-on-miss v\r\n",
		want: "NS\r\nNS\r\nNS\r\nEN\r\n"},
	{name: "ms-modes",
		send: "ms ms-modes 1 MS F4\r\na\r\nms ms-modes 1 MA\r\nb\r\nms ms-modes 1 MP\r\nc\r\nmg ms-modes v f\r\nms ms-modes 1 MR\r\nd\r\nmg ms-modes v f\r\n",
		want: "HD\r\nHD\r\nHD\r\nVA 3 f4\r\ncab\r\nHD\r\nVA 1 f0\r\nd\r\n"},
	// memcached: modes are upper case only for ms; a bad mode swallows the
	// data block (no ERROR for it) and q does not hide the error.
	{name: "ms-invalid-mode",
		send: "ms ms-invalid-mode 1 MX\r\na\r\nms ms-invalid-mode 1 Ms\r\na\r\nms ms-invalid-mode 1 MZ q\r\na\r\nmg ms-invalid-mode v\r\n",
		want: "CLIENT_ERROR invalid mode for ms M token\r\nCLIENT_ERROR invalid mode for ms M token\r\nCLIENT_ERROR invalid mode for ms M token\r\nEN\r\n"},
	{name: "ms-mode-length",
		send: "ms ms-mode-length 1 MEE\r\na\r\nms ms-mode-length 1 M\r\na\r\n",
		want: "CLIENT_ERROR incorrect length for M token\r\nCLIENT_ERROR incorrect length for M token\r\n"},
	// memcached 1.6.18's ms knows no E or S flag; v, s and N are accepted and ignored.
	{name: "ms-invalid-flag",
		send: "ms ms-invalid-flag 1 Z\r\na\r\nms ms-invalid-flag 1 E99\r\na\r\nms ms-invalid-flag 1 S1\r\na\r\nms ms-invalid-flag 1 k k\r\na\r\nmg ms-invalid-flag v\r\n",
		want: "CLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\nCLIENT_ERROR duplicate flag\r\nEN\r\n"},
	{name: "ms-ignored-flags",
		send: "ms ms-ignored-flags 1 v s N30 I\r\na\r\nmg ms-ignored-flags v\r\n",
		want: "HD\r\nVA 1\r\na\r\n"},
	// memcached: a bad length is a command-line error: the block is not
	// swallowed and becomes a command (ERROR).
	{name: "ms-bad-length",
		send: "ms ms-bad-length abc\r\nhi\r\nms ms-bad-length -1\r\nhi\r\nms ms-bad-length\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\nCLIENT_ERROR bad command line format\r\nERROR\r\nCLIENT_ERROR bad command line format\r\n"},
	{name: "ms-length-forms",
		send: "ms ms-length-forms 01 k\r\na\r\nms ms-length-forms +1 k\r\nb\r\nmg ms-length-forms v\r\n",
		want: "HD kms-length-forms\r\nHD kms-length-forms\r\nVA 1\r\nb\r\n"},
	{name: "ms-no-key",
		send: "ms\r\n",
		want: "ERROR\r\n"},
	{name: "ms-bad-data-chunk",
		send: "ms ms-bad-data-chunk 2\r\nabc\r\nmg ms-bad-data-chunk v\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEN\r\n"},
	{name: "ms-bad-data-chunk-q",
		send: "ms ms-bad-data-chunk-q 2 q\r\nabc\r\nmn\r\n",
		want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nMN\r\n"},
	{name: "ms-too-large",
		send: "ms ms-too-large 1048577 q\r\n" + xs(itemSizeMax+1) + "\r\nmg ms-too-large v\r\n",
		want: "SERVER_ERROR object too large for cache\r\nEN\r\n"},
	// memcached: a bad F token says "bad command line format", a bad C or T
	// token "bad token in command line format"; F is truncated to 32 bits.
	{name: "ms-bad-tokens",
		send: "ms ms-bad-tokens 1 Fabc\r\na\r\nms ms-bad-tokens 1 F\r\na\r\nms ms-bad-tokens 1 Cabc\r\na\r\nms ms-bad-tokens 1 Tabc\r\na\r\nms ms-bad-tokens 1 T\r\na\r\nmg ms-bad-tokens v\r\n",
		want: "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nCLIENT_ERROR bad token in command line format\r\nEN\r\n"},
	{name: "ms-flags-2pow32-wraps",
		send: "ms ms-flags-2pow32-wraps 1 F4294967296\r\na\r\nmg ms-flags-2pow32-wraps f\r\n",
		want: "HD\r\nHD f0\r\n"},
	{name: "ms-ttl-expire",
		send: "ms ms-ttl-expire 1 T-1\r\na\r\nmg ms-ttl-expire v\r\n",
		want: "HD\r\nEN\r\n"},
	{name: "ms-empty-opaque",
		send: "ms ms-empty-opaque 1 O k\r\na\r\n",
		want: "HD O kms-empty-opaque\r\n"},
	{name: "ms-base64-key",
		send: "ms bXMtYmFzZTY0LWtleQ== 1 b k\r\nz\r\nmg ms-base64-key v\r\n",
		want: "HD kbXMtYmFzZTY0LWtleQ== b\r\nVA 1\r\nz\r\n"},
	{name: "ms-base64-key-invalid",
		send: "ms !!!! 1 b\r\nz\r\nmn\r\n",
		want: "CLIENT_ERROR error decoding key\r\nMN\r\n"},
	{name: "ms-key-251",
		send: "ms " + key251 + " 1\r\nx\r\n",
		want: "CLIENT_ERROR bad command line format\r\nERROR\r\n"},

	// ---------------------------------------------------------------------
	// md <key> <flag>*\r\n
	{name: "md-basic",
		send: "ms md-basic 1\r\na\r\nmd md-basic\r\nmd md-basic\r\nmg md-basic v\r\n",
		want: "HD\r\nHD\r\nNF\r\nEN\r\n"},
	{name: "md-no-key",
		send: "md\r\n",
		want: "ERROR\r\n"},
	// q hides HD only.
	{name: "md-q",
		send: "ms md-q 1\r\na\r\nmd md-q q k O1\r\nmd md-q q\r\nmn\r\n",
		want: "HD\r\nNF\r\nMN\r\n"},
	{name: "md-flags",
		send: "md md-flags k O5\r\nms md-flags 1\r\na\r\nmd md-flags O6 k\r\n",
		want: "NF kmd-flags O5\r\nHD\r\nHD O6 kmd-flags\r\n"},
	{name: "md-cas",
		send: "ms md-cas 1 c\r\na\r\nmd md-cas C12345678901234\r\nmd md-cas C12345678901234 q\r\n",
		want: "HD c{c}\r\nEX\r\nEX\r\n",
		then: []exchange{{
			send: "md md-cas C{c}\r\nmg md-cas\r\n",
			want: "HD\r\nEN\r\n",
		}}},
	{name: "md-invalidate",
		send: "ms md-invalidate 1\r\na\r\nmd md-invalidate I T30\r\nmg md-invalidate v t c\r\n",
		want: "HD\r\nHD\r\nVA 1 t{*} c{*} X W\r\na\r\n"},
	{name: "md-invalidate-miss",
		send: "md md-invalidate-miss I\r\n",
		want: "NF\r\n"},
	// memcached: md reports every bad flag, duplicate or bad token (even a
	// base64 key that does not decode) as "invalid or duplicate flag".
	{name: "md-invalid-flags",
		send: "md md-invalid-flags Z\r\nmd md-invalid-flags Cabc\r\nmd md-invalid-flags k k\r\nmd md-invalid-flags x\r\nmd !!!! b\r\n",
		want: strings.Repeat("CLIENT_ERROR invalid or duplicate flag\r\n", 5)},
	{name: "md-ignored-flag",
		send: "md md-ignored-flag v\r\n",
		want: "NF\r\n"},
	{name: "md-base64-key",
		send: "md bWQtYmFzZTY0LWtleQ== b k\r\nms md-base64-key 1\r\na\r\nmd bWQtYmFzZTY0LWtleQ== k b O1\r\n",
		want: "NF kbWQtYmFzZTY0LWtleQ== b\r\nHD\r\nHD kbWQtYmFzZTY0LWtleQ== b O1\r\n"},
	{name: "md-key-251",
		send: "md " + key251 + "\r\nmd " + key251 + " q\r\n",
		want: "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// ma <key> <flag>*\r\n
	// memcached: like decr, ma writes a shorter result in place, padded
	// with spaces; the reply carries the number alone.
	{name: "ma-shrink-pads",
		send: "set ma-shrink-pads 0 0 2\r\n10\r\nma ma-shrink-pads MD v\r\nmg ma-shrink-pads v\r\n",
		want: "STORED\r\nVA 1\r\n9\r\nVA 2\r\n9 \r\n"},
	{name: "ma-miss",
		send: "ma ma-miss\r\nma ma-miss q\r\nma ma-miss v\r\nmn\r\n",
		want: "NF\r\nNF\r\nNF\r\nMN\r\n"},
	{name: "ma-no-key",
		send: "ma\r\n",
		want: "ERROR\r\n"},
	{name: "ma-vivify-and-modes",
		send: "ma ma-vivify-and-modes N0 J10 v\r\nma ma-vivify-and-modes v\r\nma ma-vivify-and-modes D5 v\r\nma ma-vivify-and-modes MD D100 v\r\n",
		want: "VA 2\r\n10\r\nVA 2\r\n11\r\nVA 2\r\n16\r\nVA 1\r\n0\r\n"},
	{name: "ma-hd",
		send: "ms ma-hd 2\r\n10\r\nma ma-hd\r\nmg ma-hd v\r\n",
		want: "HD\r\nHD\r\nVA 2\r\n11\r\n"},
	{name: "ma-flags",
		send: "ms ma-flags 1\r\n9\r\nma ma-flags v t c N0\r\nmg ma-flags c\r\nma ma-flags k O7 v t\r\n",
		want: "HD\r\nVA 2 t-1 c{c}\r\n10\r\nHD c{c}\r\nVA 2 kma-flags O7 t-1\r\n11\r\n"},
	{name: "ma-vivify-ttl",
		send: "ma ma-vivify-ttl N100 v t\r\n",
		want: "VA 1 t100\r\n0\r\n"},
	{name: "ma-mode-tokens",
		send: "ms ma-mode-tokens 1\r\n1\r\nma ma-mode-tokens M+ v\r\nma ma-mode-tokens M- v\r\nma ma-mode-tokens MI v\r\nma ma-mode-tokens Md v\r\nma ma-mode-tokens Mi v\r\nma ma-mode-tokens MX v\r\n",
		want: "HD\r\nVA 1\r\n2\r\nVA 1\r\n1\r\nVA 1\r\n2\r\n" + strings.Repeat("CLIENT_ERROR invalid mode for ma M token\r\n", 3)},
	{name: "ma-non-numeric",
		send: "ms ma-non-numeric 1\r\na\r\nma ma-non-numeric\r\nma ma-non-numeric q\r\n",
		want: "HD\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
	{name: "ma-invalid-flags",
		send: "ma ma-invalid-flags Dabc\r\nma ma-invalid-flags N0 Jabc v\r\nma ma-invalid-flags Z\r\nma ma-invalid-flags v v\r\nma !!!! b\r\n",
		want: strings.Repeat("CLIENT_ERROR invalid or duplicate flag\r\n", 5)},
	{name: "ma-wraps-at-2pow64",
		send: "ms ma-wraps-at-2pow64 20\r\n18446744073709551615\r\nma ma-wraps-at-2pow64 v\r\nma ma-wraps-at-2pow64-j N0 J18446744073709551615 v\r\nma ma-wraps-at-2pow64-j v\r\n",
		want: "HD\r\nVA 1\r\n0\r\nVA 20\r\n18446744073709551615\r\nVA 1\r\n0\r\n"},
	// memcached: q hides a successful ma's HD and VA alike; NF still comes,
	// and so does the HD of a vivifying ma.
	{name: "ma-q",
		send: "ms ma-q 1\r\n5\r\nma ma-q q\r\nma ma-q q v\r\nma ma-q-viv q N0 J5\r\nma ma-q-viv q MD D9\r\nmg ma-q v\r\nmg ma-q-viv v\r\n",
		want: "HD\r\nHD\r\nVA 1\r\n7\r\nVA 1\r\n0\r\n"},
	{name: "ma-cas",
		send: "ms ma-cas 1 c\r\n1\r\nma ma-cas C12345678901234 v\r\n",
		want: "HD c{c}\r\nEX\r\n",
		then: []exchange{{
			send: "ma ma-cas C{c} v c\r\n",
			want: "VA 1 c{*}\r\n2\r\n",
		}}},
	{name: "ma-ttl-expire",
		send: "ms ma-ttl-expire 1\r\n1\r\nma ma-ttl-expire T-1 v\r\nmg ma-ttl-expire v\r\n",
		want: "HD\r\nVA 1\r\n2\r\nEN\r\n"},
	{name: "ma-base64-key",
		send: "ma bWEtYmFzZTY0LWtleQ== b N0 J3 k v\r\nmg ma-base64-key v\r\n",
		want: "VA 1 kbWEtYmFzZTY0LWtleQ== b\r\n3\r\nVA 1\r\n3\r\n"},
	{name: "ma-key-251",
		send: "ma " + key251 + "\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// me <key>\r\n   (debug; the numbers are memcached internals and clock readings)
	{name: "me-miss",
		send: "me me-miss\r\n",
		want: "EN\r\n"},
	// memcached: me without a key is a format error, not ERROR like mg/ms/md/ma.
	{name: "me-no-key",
		send: "me\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},
	{name: "me-hit",
		send: "ms me-hit 2 c\r\nhi\r\nme me-hit\r\nmg me-hit v\r\nme me-hit\r\n",
		want: "HD c{c}\r\nME me-hit exp=-1 la={*} cas={c} fetch=no cls={*} size={*}\r\nVA 2\r\nhi\r\nME me-hit exp=-1 la={*} cas={c} fetch=yes cls={*} size={*}\r\n"},
	// memcached: exp is printed with the wrong sign (now - exptime).
	{name: "me-ttl",
		send: "ms me-ttl 2 T100\r\nhi\r\nme me-ttl\r\n",
		want: "HD\r\nME me-ttl exp=-{*} la={*} cas={*} fetch=no cls={*} size={*}\r\n"},
	{name: "me-expired",
		send: "ms me-expired 2 T-1\r\nhi\r\nme me-expired\r\n",
		want: "HD\r\nEN\r\n"},
	{name: "me-base64-key",
		send: "ms me-base64-key 1\r\na\r\nme bWUtYmFzZTY0LWtleQ== b\r\nme !!!! b\r\n",
		want: "HD\r\nME me-base64-key exp=-1 la={*} cas={*} fetch=no cls={*} size={*}\r\nCLIENT_ERROR bad command line format\r\n"},
	{name: "me-key-251",
		send: "me " + key251 + "\r\n",
		want: "CLIENT_ERROR bad command line format\r\n"},

	// ---------------------------------------------------------------------
	// flush_all [delay] [noreply]\r\n
	// Global: these run alone, in this order, after every other case.
	{name: "flush-all", global: true,
		send: "set flush-all 0 0 1\r\nx\r\nflush_all\r\nget flush-all\r\nset flush-all 0 0 1\r\ny\r\nget flush-all\r\n",
		want: "STORED\r\nOK\r\nEND\r\nSTORED\r\nVALUE flush-all 0 1\r\ny\r\nEND\r\n"},
	{name: "flush-all-noreply", global: true,
		send: "set flush-all-noreply 0 0 1\r\nx\r\nflush_all noreply\r\nget flush-all-noreply\r\n",
		want: "STORED\r\nEND\r\n"},
	{name: "flush-all-zero", global: true,
		send: "set flush-all-zero 0 0 1\r\nx\r\nflush_all 0\r\nget flush-all-zero\r\nset flush-all-zero 0 0 1\r\nx\r\nflush_all 0 noreply\r\nget flush-all-zero\r\n",
		want: "STORED\r\nOK\r\nEND\r\nSTORED\r\nEND\r\n"},
	// memcached: a negative delay flushes at once; a third token other than
	// "noreply" is ignored.
	{name: "flush-all-negative-delay", global: true,
		send: "set flush-all-negative-delay 0 0 1\r\nx\r\nflush_all -1\r\nget flush-all-negative-delay\r\n",
		want: "STORED\r\nOK\r\nEND\r\n"},
	{name: "flush-all-ignored-token", global: true,
		send: "set flush-all-ignored-token 0 0 1\r\nx\r\nflush_all 0 abc\r\nget flush-all-ignored-token\r\n",
		want: "STORED\r\nOK\r\nEND\r\n"},
	{name: "flush-all-errors", global: true,
		send: "set flush-all-errors 0 0 1\r\nx\r\nflush_all abc\r\nflush_all noreplyx\r\nflush_all 1 2 3\r\nflush_all 0 noreply x\r\nflush_all abc noreply\r\nget flush-all-errors\r\n",
		want: "STORED\r\nCLIENT_ERROR invalid exptime argument\r\nCLIENT_ERROR invalid exptime argument\r\nERROR\r\nERROR\r\n" + valueReply("flush-all-errors", "x") + "END\r\n"},
	// A delayed flush (here at the last second of 2038-01-19, the largest
	// exptime memcached takes) hides nothing before it is due. It must stay
	// the last case: it changes the server for good.
	{name: "flush-all-future", global: true,
		send: "set flush-all-future 0 0 1\r\nx\r\nflush_all 2147483647\r\nget flush-all-future\r\n",
		want: "STORED\r\nOK\r\n" + valueReply("flush-all-future", "x") + "END\r\n"},
}

// TestConformanceMemcached proves every conformance case against the real
// memcached.
func TestConformanceMemcached(t *testing.T) {
	runConformance(t, startMemcached(t))
}

// TestConformanceCases checks the table itself, without a server.
func TestConformanceCases(t *testing.T) {
	if n := len(conformanceCases); n < 110 {
		t.Errorf("%d conformance cases, want at least 110", n)
	}
	seen := make(map[string]bool)
	sawGlobal := false
	for _, c := range conformanceCases {
		if c.name == "" || strings.ContainsAny(c.name, " \r\n") || len(c.name) > 64 {
			t.Errorf("bad case name %q", c.name)
		}
		if seen[c.name] {
			t.Errorf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		if c.global {
			sawGlobal = true
		} else if sawGlobal {
			t.Errorf("%s: global cases must come last", c.name)
		}
		if c.send == "" {
			t.Errorf("%s: nothing to send", c.name)
		}
		if c.want == "" && !c.close && len(c.then) == 0 && !strings.Contains(c.send, "noreply") {
			t.Errorf("%s: expects no reply but is neither a close nor a noreply case", c.name)
		}
		for _, key := range itemKeys(c) {
			if !strings.HasPrefix(key, c.name) {
				t.Errorf("%s: key %q does not start with the case name: cases must not share keys", c.name, quote(key))
			}
		}
	}
}

// itemKeys returns the keys that c's command lines name, as far as a rough
// look can tell: enough to keep cases from sharing keys. Keys that cannot
// reach the store (too long, undecodable base64) are left out.
func itemKeys(c conformanceCase) []string {
	var keys []string
	sends := []string{c.send}
	for _, ex := range c.then {
		sends = append(sends, ex.send)
	}
	for _, send := range sends {
		for _, line := range strings.Split(send, "\n") {
			line, _, _ = strings.Cut(strings.TrimSuffix(line, "\r"), "\x00")
			f := strings.Fields(strings.ReplaceAll(line, "\t", "\x01")) // a tab is part of a key
			if len(f) < 2 {
				continue
			}
			var names []string
			switch f[0] {
			case "set", "add", "replace", "append", "prepend", "cas", "delete", "incr", "decr", "touch",
				"mg", "ms", "md", "ma", "me":
				names = f[1:2]
			case "get", "gets":
				names = f[1:]
			case "gat", "gats":
				names = f[2:]
			}
			meta := len(f[0]) == 2 && f[0][0] == 'm'
			for _, k := range names {
				if meta && slices.Contains(f[2:], "b") {
					d, err := base64.StdEncoding.DecodeString(k)
					if err != nil {
						continue
					}
					k = string(d)
				}
				if len(k) > keyMaxLength || k == "noreply" { // "get k noreply" asks for a key "noreply", never stored
					continue
				}
				keys = append(keys, strings.ReplaceAll(k, "\x01", "\t"))
			}
		}
	}
	return keys
}

// TestConformanceMatcher checks the wildcard matcher the runner relies on.
func TestConformanceMatcher(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		version bool
		got     string
		vars    map[string]string
		want    matchState
		n       int
		bound   map[string]string
	}{
		{name: "literal-done", pattern: "END\r\n", got: "END\r\n", want: matchDone, n: 5},
		{name: "literal-more", pattern: "END\r\n", got: "EN", want: matchMore},
		{name: "literal-fail", pattern: "END\r\n", got: "ERROR\r\n", want: matchFail, n: 1},
		{name: "extra-bytes-done", pattern: "END\r\n", got: "END\r\nX", want: matchDone, n: 5},
		{name: "empty", pattern: "", got: "", want: matchDone},
		{name: "any-digits", pattern: "HD l{*} h0\r\n", got: "HD l123 h0\r\n", want: matchDone, n: 12},
		{name: "any-digits-need-one", pattern: "l{*}\r\n", got: "l\r\n", want: matchFail, n: 1},
		{name: "any-digits-more", pattern: "l{*}\r\n", got: "l12", want: matchMore},
		{name: "capture", pattern: "c{c} c{c}\r\n", got: "c42 c42\r\n", want: matchDone, n: 9, bound: map[string]string{"c": "42"}},
		{name: "capture-differs", pattern: "c{c} c{c}\r\n", got: "c42 c43\r\n", want: matchFail, n: 6},
		{name: "capture-bound-before", pattern: "c{c}\r\n", got: "c7\r\n", vars: map[string]string{"c": "8"}, want: matchFail, n: 1},
		{name: "version", pattern: "VERSION 1.6.18\r\nMN\r\n", version: true, got: "VERSION 1.6.99-spillway\r\nMN\r\n", want: matchDone, n: 29},
		{name: "version-wrong-major", pattern: "VERSION 1.6.18\r\n", version: true, got: "VERSION 2.0\r\n", want: matchFail, n: 8},
	}
	restTests := []struct{ pattern, got, want string }{
		{"VA 1 c{c} X W\r\n", "VA 1 c7 Z X\r\n", "X W\r\n"},
		{"HD c{c}\r\nVA c{c}\r\n", "HD c7\r\nVA c8\r\n", "7\r\n"},
		{"END\r\n", "ERROR\r\n", "ND\r\n"},
	}
	for _, tt := range restTests {
		if got := compilePattern(tt.pattern, false).rest([]byte(tt.got), nil); got != tt.want {
			t.Errorf("rest(%q, %q) = %q, want %q", tt.pattern, tt.got, got, tt.want)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := compilePattern(tt.pattern, tt.version)
			st, n, bound := p.match([]byte(tt.got), tt.vars)
			if st != tt.want || (st != matchMore && n != tt.n) {
				t.Fatalf("match(%q, %q) = %v at %d, want %v at %d", tt.pattern, tt.got, st, n, tt.want, tt.n)
			}
			for k, v := range tt.bound {
				if bound[k] != v {
					t.Errorf("bound[%q] = %q, want %q", k, bound[k], v)
				}
			}
		})
	}
}

// Timeouts of the runner. A correct server answers every case in
// milliseconds, so they cost a passing run nothing; they bound how long a
// broken server can stall a case, and are generous because a loopback
// handshake can stall for seconds on an overloaded CI machine. To fail fast
// while many cases fail, raise the parallelism: go test -parallel 64.
const (
	conformanceDialTimeout  = 5 * time.Second
	conformanceReplyTimeout = 5 * time.Second // per exchange (+1s per MiB moved), and for the final EOF or MN
	conformanceQuiet        = 100 * time.Millisecond
)

// runConformance runs every conformance case as a subtest against the
// memcached-protocol server at addr. Cases run in parallel on their own
// connections; global cases (flush_all) run afterwards, one at a time.
func runConformance(t *testing.T, addr string) {
	t.Helper()
	t.Run("cases", func(t *testing.T) {
		for _, c := range conformanceCases {
			if c.global {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				runConformanceCase(t, addr, c)
			})
		}
	})
	t.Run("global", func(t *testing.T) {
		for _, c := range conformanceCases {
			if c.global {
				t.Run(c.name, func(t *testing.T) { runConformanceCase(t, addr, c) })
			}
		}
	})
}

// runConformanceCase runs c on a new connection to addr.
func runConformanceCase(t *testing.T, addr string, c conformanceCase) {
	conn, err := net.DialTimeout("tcp", addr, conformanceDialTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()

	vars := make(map[string]string)
	steps := append([]exchange{{send: c.send, want: c.want}}, c.then...)
	for i, ex := range steps {
		step := ""
		if len(steps) > 1 {
			step = fmt.Sprintf(" (exchange %d of %d)", i+1, len(steps))
		}
		send, err := substitute(ex.send, vars)
		if err != nil {
			t.Fatalf("%s%s: %v", c.name, step, err)
		}
		p := compilePattern(ex.want, c.versionLine)
		got, st, n, bound, werr, rerr := exchangeOnce(conn, send, p, vars)
		switch {
		case st == matchFail:
			t.Fatalf("%s%s: reply differs at byte %d\nsent: %s\nwant: %s\ngot:  %s\nwant from there: %s\ngot from there:  %s",
				c.name, step, n, quote(send), quote(ex.want), quote(string(got)), quote(p.rest(got, vars)), quote(string(got[n:])))
		case st == matchMore:
			t.Fatalf("%s%s: reply incomplete (%v)\nsent: %s\nwant: %s\ngot:  %s", c.name, step, rerr, quote(send), quote(ex.want), quote(string(got)))
		case n < len(got):
			t.Fatalf("%s%s: extra bytes after the reply\nsent: %s\nwant: %s\ngot:  %s\nextra: %s",
				c.name, step, quote(send), quote(ex.want), quote(string(got)), quote(string(got[n:])))
		case werr != nil && !c.close:
			t.Fatalf("%s%s: write: %v", c.name, step, werr)
		}
		for k, v := range bound {
			vars[k] = v
		}
	}

	if err := conn.SetDeadline(time.Now().Add(conformanceReplyTimeout)); err != nil {
		t.Fatal(err)
	}
	if c.close {
		rest, err := io.ReadAll(conn)
		if err != nil && !isConnReset(err) {
			t.Fatalf("%s: the server must close the connection after the reply, but: %v (then got %s)", c.name, err, quote(string(rest)))
		}
		if len(rest) > 0 {
			t.Fatalf("%s: extra bytes before the close: %s", c.name, quote(string(rest)))
		}
		return
	}
	// Nothing more may come, and the connection must still serve requests.
	if _, err := io.WriteString(conn, "mn\r\n"); err != nil {
		t.Fatalf("%s: after the reply, writing mn: %v", c.name, err)
	}
	buf := make([]byte, 4)
	n, err := io.ReadFull(conn, buf)
	if err != nil || string(buf) != "MN\r\n" {
		more := readQuietly(conn)
		t.Fatalf("%s: after the reply, want only \"MN\\r\\n\" for a probing mn, got %s (%v): extra bytes, or the connection is closed or stuck",
			c.name, quote(string(buf[:n])+string(more)), err)
	}
}

// exchangeOnce writes send and reads until the reply matches p, cannot
// match any more, or the time is up. Writing runs concurrently, so a server
// that answers while a large request is still being sent cannot deadlock us.
func exchangeOnce(conn net.Conn, send string, p pattern, vars map[string]string) (got []byte, st matchState, n int, bound map[string]string, werr, rerr error) {
	// Allow a second more per MiB moved, for slow machines under -race.
	deadline := time.Now().Add(conformanceReplyTimeout + time.Duration((len(send)+p.size())/(1<<20))*time.Second)
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, matchMore, 0, nil, err, err
	}
	written := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, send)
		written <- err
	}()
	defer func() { werr = <-written }()

	buf := make([]byte, 256<<10)
	for {
		st, n, bound = p.match(got, vars)
		switch st {
		case matchDone:
			return got, st, n, bound, nil, nil
		case matchFail:
			// Read what else is coming, for the failure message.
			got = append(got, readQuietly(conn)...)
			return got, st, n, bound, nil, nil
		}
		k, err := conn.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			st, n, bound = p.match(got, vars)
			return got, st, n, bound, nil, err
		}
	}
}

// readQuietly returns what arrives until the connection is quiet for a moment.
func readQuietly(conn net.Conn) []byte {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		if err := conn.SetReadDeadline(time.Now().Add(conformanceQuiet)); err != nil {
			return out
		}
		k, err := conn.Read(buf)
		out = append(out, buf[:k]...)
		if err != nil || len(out) > 1<<20 {
			return out
		}
	}
}

// isConnReset reports whether err is the peer resetting the connection,
// which is how a close looks when the server had unread input.
func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

// substitute replaces {name} in send by the digits captured earlier.
func substitute(send string, vars map[string]string) (string, error) {
	var err error
	out := varToken.ReplaceAllStringFunc(send, func(tok string) string {
		name := tok[1 : len(tok)-1]
		v, ok := vars[name]
		if !ok {
			err = fmt.Errorf("send uses {%s}, which no earlier reply captured", name)
		}
		return v
	})
	return out, err
}

// varToken is a wildcard token in a want, or a variable in a send.
var varToken = regexp.MustCompile(`\{(\*|[a-z][a-z0-9]*)\}`)

// pattern is a compiled want string.
type pattern []segment

type segKind uint8

const (
	segLiteral  segKind = iota
	segDigits           // {*}
	segCapture          // {name}
	segLineRest         // the rest of a VERSION line
)

type segment struct {
	kind segKind
	text string // the literal, or the capture's name
}

type matchState uint8

const (
	matchMore matchState = iota // got is a prefix of a matching reply
	matchDone                   // got starts with a matching reply
	matchFail                   // got cannot match
)

func (s matchState) String() string {
	return [...]string{"more", "done", "fail"}[s]
}

// compilePattern parses want; with versionLine, "VERSION 1.6.18" matches
// "VERSION 1.6." followed by anything up to the end of the line.
func compilePattern(want string, versionLine bool) pattern {
	var p pattern
	literal := func(s string) {
		if !versionLine {
			p = append(p, segment{segLiteral, s})
			return
		}
		const full, prefix = "VERSION 1.6.18", "VERSION 1.6."
		for {
			i := strings.Index(s, full)
			if i < 0 {
				break
			}
			p = append(p, segment{segLiteral, s[:i+len(prefix)]}, segment{segLineRest, ""})
			s = s[i+len(full):]
		}
		p = append(p, segment{segLiteral, s})
	}
	last := 0
	for _, m := range varToken.FindAllStringSubmatchIndex(want, -1) {
		literal(want[last:m[0]])
		if name := want[m[2]:m[3]]; name == "*" {
			p = append(p, segment{segDigits, ""})
		} else {
			p = append(p, segment{segCapture, name})
		}
		last = m[1]
	}
	literal(want[last:])
	return p
}

// match matches got against p. With matchDone, n is the length of the
// matching reply; with matchFail, the offset of the first wrong byte.
// Captured digits are returned in bound; vars holds earlier captures.
func (p pattern) match(got []byte, vars map[string]string) (st matchState, n int, bound map[string]string) {
	st, n, bound, _, _ = p.matchAt(got, vars)
	return st, n, bound
}

// matchAt is match that also tells where in p it stopped: segment seg, at
// byte off of its text. Digit runs are matched greedily: every wildcard in
// the suite is followed by a non-digit.
func (p pattern) matchAt(got []byte, vars map[string]string) (st matchState, n int, bound map[string]string, seg, off int) {
	bound = make(map[string]string)
	pos := 0
	for i, s := range p {
		switch s.kind {
		case segLiteral:
			if k, ok := matchLiteral(got[pos:], s.text); !ok {
				return matchFail, pos + k, bound, i, k
			} else if k < len(s.text) {
				return matchMore, pos + k, bound, i, k
			}
			pos += len(s.text)
		case segCapture, segDigits:
			if v, ok := s.captured(vars, bound); ok {
				// Captured before: the same digits again, and no more.
				if k, ok := matchLiteral(got[pos:], v); !ok {
					return matchFail, pos + k, bound, i, 0
				} else if k < len(v) {
					return matchMore, pos + k, bound, i, 0
				}
				pos += len(v)
				if pos == len(got) {
					return matchMore, pos, bound, i, 0
				}
				if isDigit(got[pos]) {
					return matchFail, pos, bound, i, 0
				}
				continue
			}
			end := pos
			for end < len(got) && isDigit(got[end]) {
				end++
			}
			if end == len(got) {
				return matchMore, end, bound, i, 0
			}
			if end == pos {
				return matchFail, pos, bound, i, 0
			}
			if s.kind == segCapture {
				bound[s.text] = string(got[pos:end])
			}
			pos = end
		case segLineRest:
			end := pos
			for end < len(got) && got[end] != '\r' && got[end] != '\n' {
				end++
			}
			if end == len(got) {
				return matchMore, end, bound, i, 0
			}
			pos = end
		}
	}
	return matchDone, pos, bound, len(p), 0
}

// rest renders, for failure messages, the part of p from where matching got
// stopped: what the server should have sent from that byte on.
func (p pattern) rest(got []byte, vars map[string]string) string {
	_, _, bound, seg, off := p.matchAt(got, vars)
	var b strings.Builder
	for i := seg; i < len(p); i++ {
		s := p[i]
		switch s.kind {
		case segLiteral:
			if i == seg {
				b.WriteString(s.text[off:])
			} else {
				b.WriteString(s.text)
			}
		case segDigits:
			b.WriteString("{*}")
		case segCapture:
			if v, ok := s.captured(vars, bound); ok {
				b.WriteString(v)
			} else {
				b.WriteString("{" + s.text + "}")
			}
		case segLineRest:
			b.WriteString("<rest of line>")
		}
	}
	return b.String()
}

// size is the length of the literal parts of p.
func (p pattern) size() int {
	n := 0
	for _, s := range p {
		if s.kind == segLiteral {
			n += len(s.text)
		}
	}
	return n
}

// captured returns the digits a capture segment matched earlier, if any.
func (s segment) captured(vars, bound map[string]string) (string, bool) {
	if s.kind != segCapture {
		return "", false
	}
	if v, ok := vars[s.text]; ok {
		return v, true
	}
	v, ok := bound[s.text]
	return v, ok
}

// matchLiteral compares the start of got with lit. It returns how many bytes
// of lit got holds and true if they all match, or the offset of the first
// wrong byte and false. Equal runs are compared at once, not byte by byte:
// replies run to megabytes and are matched again after every read.
func matchLiteral(got []byte, lit string) (int, bool) {
	n := min(len(got), len(lit))
	if string(got[:n]) == lit[:n] {
		return n, true
	}
	for i := range n {
		if got[i] != lit[i] {
			return i, false
		}
	}
	panic("unreachable")
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// quote renders s as a Go string literal, cut short and with long runs of
// one byte abbreviated as {'x'×N}, so megabyte payloads stay readable.
func quote(s string) string {
	const maxOut = 4000
	var b strings.Builder
	b.WriteByte('"')
	lit := 0 // start of the pending literal
	flush := func(end int) {
		q := strconv.Quote(s[lit:end])
		b.WriteString(q[1 : len(q)-1])
	}
	for i := 0; i < len(s) && b.Len() < maxOut; {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i >= 16 {
			flush(i)
			fmt.Fprintf(&b, "{%q×%d}", s[i], j-i)
			lit = j
		}
		i = j
	}
	if b.Len() < maxOut {
		flush(len(s))
	} else {
		b.WriteString("…")
	}
	b.WriteByte('"')
	if out := b.String(); len(out) > maxOut+64 {
		return out[:maxOut] + "…\""
	}
	return b.String()
}

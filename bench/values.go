package bench

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// A value is fully determined by its key, the run that wrote it, a version
// and its size, so any get hit can be checked without remembering what was
// sent:
//
//	<key>:<run, 8 hex>:<version>:<filler ...><crc32 of all before, 8 hex>
//
// The filler is a fixed pattern started at an offset taken from the header,
// so two versions of a key differ all along the value, not only in the
// header. Values shorter than the header and checksum are grown to fit.

const (
	runLen   = 8 // hex digits of the run id
	crcLen   = 8 // hex digits of the trailing checksum
	hexDigit = "0123456789abcdef"
)

// pattern is the filler alphabet: printable, so a value dumped by a
// debugging session reads as text.
var pattern = []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")

// errCorrupt marks a value that is not one this tool could have written for
// the key: the run fails.
var errCorrupt = errors.New("corrupt value")

// minValueSize is the smallest value appendValue writes for a key of this
// length at this version.
func minValueSize(keyLen int, ver uint32) int {
	digits := 1
	for v := ver; v >= 10; v /= 10 {
		digits++
	}
	return keyLen + 1 + runLen + 1 + digits + 1 + crcLen
}

// appendValue appends the value of (key, run, ver) of the given size (at
// least minValueSize) to dst.
func appendValue(dst, key []byte, run, ver uint32, size int) []byte {
	if m := minValueSize(len(key), ver); size < m {
		size = m
	}
	start := len(dst)
	dst = append(dst, key...)
	dst = append(dst, ':')
	dst = appendHex32(dst, run)
	dst = append(dst, ':')
	dst = strconv.AppendUint(dst, uint64(ver), 10)
	dst = append(dst, ':')
	fill := size - (len(dst) - start) - crcLen
	off := int(crc32.ChecksumIEEE(dst[start:]))
	for i := 0; i < fill; i++ {
		dst = append(dst, pattern[(off+i)%len(pattern)])
	}
	return appendHex32(dst, crc32.ChecksumIEEE(dst[start:]))
}

func appendHex32(dst []byte, v uint32) []byte {
	for shift := 28; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigit[(v>>uint(shift))&0xf])
	}
	return dst
}

func parseHex32(b []byte) (uint32, bool) {
	if len(b) != 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// checkValue reports whether val is a value this tool could have written for
// key: right key, intact checksum and filler, and, when it carries this run's
// id, a version that had been issued (issued is the highest version this run
// has issued for the key). Values from earlier runs are accepted when they are
// self-consistent, since the cache legitimately keeps them. The error wraps
// errCorrupt.
func checkValue(key, val []byte, run uint32, issued uint32) error {
	bad := func(why string) error {
		return fmt.Errorf("%w for key %q: %s (%d bytes: %.64q)", errCorrupt, key, why, len(val), val)
	}
	if len(val) < len(key)+1+runLen+1+1+1+crcLen {
		return bad("too short")
	}
	if !bytes.HasPrefix(val, key) || val[len(key)] != ':' {
		return bad("value belongs to another key")
	}
	rest := val[len(key)+1:]
	gotRun, ok := parseHex32(rest[:runLen])
	if !ok || rest[runLen] != ':' {
		return bad("bad run id")
	}
	rest = rest[runLen+1:]
	colon := bytes.IndexByte(rest, ':')
	if colon < 1 || colon > 10 {
		return bad("bad version")
	}
	ver, err := strconv.ParseUint(string(rest[:colon]), 10, 32)
	if err != nil {
		return bad("bad version")
	}
	body := val[:len(val)-crcLen]
	sum, ok := parseHex32(val[len(val)-crcLen:])
	if !ok || sum != crc32.ChecksumIEEE(body) {
		return bad("checksum mismatch")
	}
	header := val[:len(key)+1+runLen+1+colon+1]
	if len(header) > len(body) {
		return bad("truncated")
	}
	off := int(crc32.ChecksumIEEE(header))
	for i, c := range body[len(header):] {
		if c != pattern[(off+i)%len(pattern)] {
			return bad("filler mismatch")
		}
	}
	if gotRun == run && uint32(ver) > issued {
		return bad(fmt.Sprintf("version %d never written (latest %d)", ver, issued))
	}
	return nil
}

// originRun is the run id of values an origin makes: no run uses it, so
// such values are checked only for being self-consistent.
const originRun = 0

// OriginValue returns a value for key that a benchmark run accepts as valid,
// for an origin (such as "spillway bench --origin-latency") that serves the
// keys a run reads before it has written them.
func OriginValue(key string, size int) []byte {
	return appendValue(nil, []byte(key), originRun, 0, size)
}

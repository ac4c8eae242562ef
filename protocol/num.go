package protocol

import "bytes"

// Numbers are parsed exactly as memcached's safe_strto* helpers (util.c) do
// on a 64-bit build, quirks included, so that every argument memcached
// accepts is accepted here with the same value:
//
//   - leading C whitespace and a '+' or '-' sign are allowed;
//   - the digits may be followed by C whitespace and anything after it
//     ("5\tjunk" is 5);
//   - values are parsed as 64-bit and then truncated to the 32-bit field:
//     flags 4294967296 become 0, exptime 2147483648 becomes -2147483648,
//     <bytes> 4294967297 becomes 1;
//   - unsigned values reject a '-' only when the result would be negative
//     as a signed number ("-0" is 0, "-18446744073709551615" is 1).

// cspace is C's isspace in the "C" locale.
func cspace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

// scan mimics strtoull/strtoll(s, &end, 10): it returns the magnitude, the
// sign, what follows the digits, whether any digit was seen and whether the
// magnitude overflowed 64 bits.
func scan(s []byte) (mag uint64, neg bool, rest []byte, ok, overflow bool) {
	i := 0
	for i < len(s) && cspace(s[i]) {
		i++
	}
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if mag > (1<<64-1-d)/10 {
			overflow = true
		}
		mag = mag*10 + d
	}
	return mag, neg, s[i:], i > start, overflow
}

// tail reports whether what follows the digits is acceptable to memcached:
// nothing, or C whitespace.
func tail(rest []byte) bool { return len(rest) == 0 || cspace(rest[0]) }

// strtoull is safe_strtoull: a 64-bit unsigned decimal.
func strtoull(s []byte) (uint64, bool) {
	mag, neg, rest, ok, overflow := scan(s)
	if !ok || overflow || !tail(rest) {
		return 0, false
	}
	v := mag
	if neg {
		v = -mag
	}
	if int64(v) < 0 && bytes.IndexByte(s, '-') >= 0 {
		return 0, false
	}
	return v, true
}

// strtoul is safe_strtoul on LP64: parsed as 64 bits, stored in 32.
func strtoul(s []byte) (uint32, bool) {
	v, ok := strtoull(s)
	return uint32(v), ok
}

// strtol is safe_strtol on LP64: parsed as a signed 64-bit long (ERANGE
// outside it), stored in an int32. The result is returned widened.
func strtol(s []byte) (int64, bool) {
	mag, neg, rest, ok, overflow := scan(s)
	if !ok || overflow || !tail(rest) {
		return 0, false
	}
	if !neg && mag > 1<<63-1 || neg && mag > 1<<63 {
		return 0, false
	}
	v := int64(mag)
	if neg {
		v = -v
	}
	return int64(int32(v)), true
}

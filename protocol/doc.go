// Package protocol reads requests and writes replies in memcached's text
// protocol, classic and meta, and in its binary protocol, byte for byte as
// memcached 1.6.18 does. It does no I/O of its own beyond the io.Reader
// and io.Writer it is given, and knows nothing of storage or routing.
//
// A connection loop pairs a Reader with a Writer:
//
//	for {
//		err := r.Read(&req)
//		if err != nil {
//			w.Error(err) // the exact reply, or nothing under noreply
//			if protocol.Fatal(err) {
//				break // flush what is buffered, then close
//			}
//		} else {
//			handle(&req, w)
//		}
//		if r.Buffered() == 0 {
//			w.Flush() // once per batch of pipelined requests
//		}
//	}
//
// Reading the get path allocates nothing: Parse splits the line in place
// and the Request's slices alias the Reader's buffer until the next Read.
// Only a storage payload is copied, into a fresh slice the caller keeps.
//
// # Grammar
//
// Words are separated by one or more spaces (only spaces: a tab belongs to
// its word, as in memcached). Lines end in "\r\n" or "\n"; a data block
// must end in "\r\n". A NUL byte ends the line early, as memcached reads
// the line as a C string.
//
//	get <key>+\r\n
//	gets <key>+\r\n
//	gat <exptime> <key>*\r\n
//	gats <exptime> <key>*\r\n
//	set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//	add <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//	replace <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//	append <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//	prepend <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//	cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]\r\n<data>\r\n
//	delete <key> [0] [noreply]\r\n
//	incr <key> <value> [noreply]\r\n
//	decr <key> <value> [noreply]\r\n
//	touch <key> <exptime> [noreply]\r\n
//	flush_all [<delay>] [noreply]\r\n
//	verbosity <level> [noreply]\r\n
//	version\r\n
//	quit\r\n
//	stats [<arg>]*\r\n
//	mn\r\n
//	mg <key> <flag>*\r\n
//	ms <key> <datalen> <flag>*\r\n<data>\r\n
//	md <key> <flag>*\r\n
//	ma <key> <flag>*\r\n
//	me <key> [b]\r\n
//
// Keys are at most 250 bytes; memcached checks nothing else about them
// (control characters are accepted), and neither does Parse; see ValidKey.
// The optional word after a storage, touch, incr, decr or verbosity
// command is ignored unless it is "noreply". Numbers follow C's strtol
// rules and are truncated to 32 bits where memcached stores 32 bits (see
// num.go): flags 4294967296 are stored as 0, exactly as memcached does.
//
// The client side is smaller: a ReplyReader reads a server's replies, one
// line at a time with the data block of a VALUE or VA reply, and
// ParseValueLine and MetaReplyFlag take those lines apart (see reply.go).
// A node that passes a client's write on rebuilds its line with
// AppendRequest, which Parse reads back as the same Request (less
// noreply), and writes keys of its own with AppendKey: base64 with the b
// flag when ValidKey says the key cannot stand in a line.
//
// # Errors
//
// Every protocol error is the reply memcached sends for it (Writer.Error).
// Under noreply, memcached hides every reply of a classic command, errors
// included, once it has seen the word; such errors come back wrapped (see
// Quiet) and Writer.Error writes nothing. Errors are recoverable except
// ErrLineTooLong and I/O errors (Fatal). After a malformed storage line the
// data block is not skipped: memcached reads it as the next command, and
// so does Reader.
//
// # Binary protocol
//
// A connection whose first byte is BinaryMagic (Reader.IsBinary) speaks
// the binary protocol for its whole life, as in memcached. Reader.ReadBinary
// reads its requests, checking every length as memcached does (the shapes
// are listed in binary.go); BinaryRequest.Twin turns each into the meta or
// text request that does the same (binary_twin.go), which a server runs as
// it runs any other, and Writer.BinaryReply writes the twin's reply as the
// binary response: memcached's status, quiet commands answered only on an
// error or a hit, the opaque echoed, the CAS returned. Reading a request
// allocates nothing but a storage command's value.
//
// # Where it differs from memcached
//
//   - An unterminated gat/gats line may grow past MaxLineLen like get/gets
//     (memcached closes the connection unless the line starts with "get "
//     or "gets ").
//   - Multi-key lines are capped at Limits.MaxGetLine (64 KiB); memcached
//     grows its buffer without bound.
//   - Limits.MaxItemSize counts the payload alone; memcached's 1 MiB also
//     covers its item header and the key, so it refuses values some 50
//     bytes smaller.
//   - ma with an opaque token over 31 bytes is refused before the
//     arithmetic; memcached refuses it after doing it.
//   - Binary: an unknown command's body is skipped exactly (memcached
//     skips bodylen bytes after its extras and key, eating into the next
//     request), and an exptime after January 2038 (over 2^31-1) is taken
//     as 2^31-1.
//
// # Memory
//
// A Reader holds a 16 KiB read buffer (memcached's READ_BUFFER_SIZE), plus
// up to MaxGetLine for a multi-key line that outgrows it; a Writer holds a
// 64 KiB buffer. A storage payload is allocated only once its size has
// been checked against MaxItemSize.
//
// # Left out
//
// SASL/auth (binary SASL requests are "Unknown command", as in a
// memcached started without -S), UDP framing, and memcached's
// administrative commands (slabs, lru, lru_crawler, watch, cache_memlimit,
// extstore, ...), which get "ERROR" ("shutdown" gets memcached's "ERROR:
// shutdown not enabled"). The meta flags of later memcached releases (E,
// x, S, ...) are "invalid flag", as in 1.6.18.
package protocol

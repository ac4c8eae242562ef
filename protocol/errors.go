package protocol

import (
	"errors"
	"io"
)

// protoError is an error whose text is the exact reply line memcached sends
// for it (without "\r\n"). An empty reply means memcached sends nothing.
type protoError struct {
	reply string
	fatal bool // close the connection after the reply
}

func (e *protoError) Error() string {
	if e.reply == "" {
		return "protocol: request line too long"
	}
	return e.reply
}

// quietError is a protocol error the client asked not to hear about: a
// classic command carrying "noreply" suppresses every reply, errors included
// (memcached's out_string skips the write when c->noreply is set). It is a
// one-pointer struct, so turning it into an error does not allocate.
type quietError struct{ err *protoError }

func (e quietError) Error() string { return e.err.Error() + " (noreply)" }
func (e quietError) Unwrap() error { return e.err }

// The concrete values, so that parsers can wrap them without assertions.
var (
	errUnknown  = &protoError{reply: "ERROR"}
	errBadFmt   = &protoError{reply: "CLIENT_ERROR bad command line format"}
	errBadChunk = &protoError{reply: "CLIENT_ERROR bad data chunk"}
	errTooLarge = &protoError{reply: "SERVER_ERROR object too large for cache"}
	errLineLong = &protoError{fatal: true}
)

// Errors returned by Parse and Reader.Read. Compare with errors.Is: under
// noreply they come back wrapped so that Writer.Error stays silent.
var (
	// ErrUnknownCommand is an unknown command or a known one with the wrong
	// number of tokens. Reply "ERROR"; never suppressed by noreply.
	ErrUnknownCommand error = errUnknown

	// ErrBadFormat is a malformed argument: a key over 250 bytes, a
	// non-numeric or negative <bytes>, flags or exptime that are not numbers.
	// Reply "CLIENT_ERROR bad command line format".
	ErrBadFormat error = errBadFmt

	// ErrBadDataChunk means the <bytes>+2 bytes after a storage command did
	// not end in "\r\n". Reply "CLIENT_ERROR bad data chunk". The whole
	// block was consumed; as in memcached, the bytes after it are read as
	// the next command (a stray "\n" there earns a further "ERROR").
	ErrBadDataChunk error = errBadChunk

	// ErrTooLarge means a storage payload exceeded Limits.MaxItemSize.
	// Reply "SERVER_ERROR object too large for cache". The payload was read
	// and discarded; the connection stays usable. Command and Key stay set:
	// memcached also drops the key's current item on a too-large set or ms,
	// so that a failed update leaves no stale value behind.
	ErrTooLarge error = errTooLarge

	// ErrLineTooLong means more than MaxLineLen bytes arrived without a
	// newline (more than Limits.MaxGetLine for get/gets/gat/gats). memcached
	// closes the connection without a reply, so Writer.Error writes nothing
	// and Fatal reports true.
	ErrLineTooLong error = errLineLong
)

// Less common replies; unexported because only their text matters.
var (
	errNoShutdown   = &protoError{reply: "ERROR: shutdown not enabled"}
	errBadExptime   = &protoError{reply: "CLIENT_ERROR invalid exptime argument"}
	errBadDelta     = &protoError{reply: "CLIENT_ERROR invalid numeric delta argument"}
	errDeleteUsage  = &protoError{reply: "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"}
	errDupFlag      = &protoError{reply: "CLIENT_ERROR duplicate flag"}
	errInvalidFlag  = &protoError{reply: "CLIENT_ERROR invalid flag"}
	errBadToken     = &protoError{reply: "CLIENT_ERROR bad token in command line format"}
	errDecodeKey    = &protoError{reply: "CLIENT_ERROR error decoding key"}
	errMLength      = &protoError{reply: "CLIENT_ERROR incorrect length for M token"}
	errBadInitial   = &protoError{reply: "CLIENT_ERROR invalid numeric initial value"}
	errBadDeltaMeta = &protoError{reply: "CLIENT_ERROR invalid numeric delta value"}
	errOpaqueLong   = &protoError{reply: "CLIENT_ERROR opaque token too long"}
	errMgTooMany    = &protoError{reply: "CLIENT_ERROR options flags are too long"} // mg words it differently
	errMetaTooMany  = &protoError{reply: "CLIENT_ERROR options flags too long"}
	errMetaFlag     = &protoError{reply: "CLIENT_ERROR invalid or duplicate flag"} // md, ma: any flag error
	errMsMode       = &protoError{reply: "CLIENT_ERROR invalid mode for ms M token"}
	errMaMode       = &protoError{reply: "CLIENT_ERROR invalid mode for ma M token"}
)

// ClientError returns an error that Writer.Error writes as "CLIENT_ERROR <msg>".
func ClientError(msg string) error { return &protoError{reply: "CLIENT_ERROR " + msg} }

// ServerError returns an error that Writer.Error writes as "SERVER_ERROR <msg>".
func ServerError(msg string) error { return &protoError{reply: "SERVER_ERROR " + msg} }

// Fatal reports whether the connection must be closed after err's reply:
// true for ErrLineTooLong and for every error that is not a protocol error
// (io.EOF, network errors), false for nil and for the other protocol errors.
func Fatal(err error) bool {
	switch e := err.(type) {
	case nil, quietError:
		return false
	case *protoError:
		return e.fatal
	case *binaryError:
		return e.fatal
	}
	var pe *protoError
	if errors.As(err, &pe) {
		return pe.fatal
	}
	return true
}

// Quiet reports whether err is a protocol error whose reply memcached
// suppresses because the request carried "noreply"; Writer.Error writes
// nothing for it.
func Quiet(err error) bool {
	var q quietError
	return errors.As(err, &q)
}

// quiet wraps err so that Writer.Error writes nothing when noreply is set.
func quiet(err *protoError, noreply bool) error {
	if noreply {
		return quietError{err}
	}
	return err
}

// unexpected turns io.EOF inside a request into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

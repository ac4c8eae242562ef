package protocol

import (
	"bytes"
	"io"
	"testing"
)

func BenchmarkParseGet(b *testing.B) {
	line := []byte("get user:1001 user:1002 user:1003")
	var req Request
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(line, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseMetaGet(b *testing.B) {
	line := []byte("mg user:1001 v f t c k O123456")
	var req Request
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(line, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadGet(b *testing.B) {
	in := []byte("get user:1001 user:1002 user:1003\r\n")
	rd := NewReader(&loopReader{b: bytes.Repeat(in, 64)}, Limits{})
	var req Request
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := rd.Read(&req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadSet(b *testing.B) {
	in := append([]byte("set user:1001 0 0 100\r\n"), bytes.Repeat([]byte("v"), 100)...)
	in = append(in, "\r\n"...)
	rd := NewReader(&loopReader{b: bytes.Repeat(in, 64)}, Limits{})
	var req Request
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := rd.Read(&req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteValue(b *testing.B) {
	w := NewWriter(io.Discard)
	key, val := []byte("user:1001"), bytes.Repeat([]byte("v"), 100)
	b.SetBytes(int64(len(val)))
	b.ReportAllocs()
	for b.Loop() {
		w.Value(key, 42, val)
	}
}

func BenchmarkAppendRequest(b *testing.B) {
	var req Request
	if err := Parse([]byte("ms user:1001 100 T60 F3 C12345 q O123"), &req); err != nil {
		b.Fatal(err)
	}
	req.Data = bytes.Repeat([]byte("v"), 100)
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequest(buf[:0], &req, nil)
	}
}

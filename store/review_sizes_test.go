package store

import (
	"bytes"
	"strconv"
	"testing"
)

// TestReviewSizesAroundLines: values of every size near the lines the
// Segments engine draws (the large-item line, a segment, the varint
// steps of the value length), set, read, appended across the large line
// and back by a set, in stores small and large: each reads back whole.
func TestReviewSizesAroundLines(t *testing.T) {
	for _, maxBytes := range []int64{256 << 10, 1 << 20, 4 << 20, 64 << 20} {
		t.Run(strconv.FormatInt(maxBytes, 10), func(t *testing.T) {
			s, g, _ := newSegStore(t, maxBytes, evictS3FIFO)
			key := "k"
			var sizes []int
			for _, line := range []int{0, 127, 16383, g.large - itemSize(len(key), 0, 0, 0), g.large, g.segSize, g.segSize + g.large} {
				for d := -3; d <= 3; d++ {
					if n := line + d; n >= 0 {
						sizes = append(sizes, n)
					}
				}
			}
			for _, n := range sizes {
				v := bytes.Repeat([]byte{byte('a' + n%26)}, n)
				s.Set(Item{Key: key, Value: v, Flags: uint32(n)})
				it, ok := s.Get(key)
				if int64(itemSize(len(key), n, uint32(n), 0)) > maxBytes/2 {
					continue // may be refused
				}
				if !ok || !bytes.Equal(it.Value, v) || it.Flags != uint32(n) {
					t.Fatalf("set %d bytes: got %d bytes, %v", n, len(it.Value), ok)
				}
				for _, add := range []int{1, 2, 40} {
					if _, err := s.Append(Item{Key: key, Value: bytes.Repeat([]byte("+"), add)}); err != nil {
						t.Fatalf("append %d to %d bytes: %v", add, len(v), err)
					}
					v = append(v, bytes.Repeat([]byte("+"), add)...)
					if it, ok := s.Get(key); !ok || !bytes.Equal(it.Value, v) {
						t.Fatalf("after append: %d bytes, %v; want %d", len(it.Value), ok, len(v))
					}
				}
			}
			checkSegments(t, g)
		})
	}
}

package store

import "testing"

// allocSize is what the allocator spends: never less than asked, the
// class append gives a new slice of that length, whole pages past 32 KiB.
func TestAllocSize(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0}, {1, 8}, {8, 8}, {9, 16}, {111, 112}, {4105, 4864},
		{32 << 10, 32 << 10}, {32<<10 + 1, 40 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 8<<10},
	} {
		if got := allocSize(c.n); got != c.want {
			t.Errorf("allocSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	for n := 1; n <= 40<<10; n += 97 {
		got := allocSize(n)
		if got < n || got > n+n/8+8<<10 {
			t.Fatalf("allocSize(%d) = %d", n, got)
		}
		if n <= 32<<10 && got != cap(append([]byte(nil), make([]byte, n)...)) {
			t.Fatalf("allocSize(%d) = %d, not the allocator's class", n, got)
		}
	}
}

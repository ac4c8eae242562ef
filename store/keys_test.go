package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestKeys(t *testing.T) {
	s, err := New(Config{MaxBytes: 64 << 20, Engine: Segments})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var want []string
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		s.Set(Item{Key: k, Value: []byte("v")})
		want = append(want, k)
	}
	s.Set(Item{Key: "k1", Value: make([]byte, 300<<10)}) // rewritten, large
	for _, k := range []string{"k2", "k3"} {
		if err := s.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	want = slices.DeleteFunc(want, func(k string) bool { return k == "k2" || k == "k3" })
	var got []string
	if err := s.Keys(func(k string) bool { got = append(got, k); return true }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Keys listed %d keys, want %d (the rewritten once, the deleted not)", len(got), len(want))
	}
	n := 0
	s.Keys(func(string) bool { n++; return n < 10 })
	if n != 10 {
		t.Errorf("Keys went on after fn returned false: %d calls", n)
	}

	r, err := New(Config{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Keys(func(string) bool { return true }); !errors.Is(err, ErrNoKeys) {
		t.Errorf("Keys of a Ristretto store: %v, want ErrNoKeys", err)
	}
}

package ring_test

import (
	"fmt"
	"math"

	"spillway/ring"
)

func ExampleNew() {
	r := ring.New([]ring.Node{
		{ID: "10.0.0.1:11211"},
		{ID: "10.0.0.2:11211"},
		{ID: "10.0.0.3:11211", Weight: 2}, // twice the keys, twice the capacity
	}, ring.Config{})
	fmt.Println(r.Owner("user:42"))
	fmt.Println(r.Successors("user:42", 2))
	// Output:
	// 10.0.0.1:11211
	// [10.0.0.3:11211 10.0.0.2:11211]
}

func ExamplePicker() {
	r := ring.New([]ring.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}, ring.Config{})
	p, err := ring.NewPicker(r, ring.PickerConfig{Epsilon: 0.25, Load: ring.InFlight})
	if err != nil {
		panic(err)
	}
	id, primary, release, err := p.Pick("user:42")
	if err != nil {
		panic(err) // ring.ErrNoNodes: nobody to ask
	}
	defer release() // when the request to id completes
	fmt.Println(id, primary)

	// On a membership change, build the next ring and swap it in.
	p.Swap(ring.New([]ring.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}, ring.Config{}))
	fmt.Println(p.Ring().Len())
	// Output:
	// b true
	// 4
}

func ExampleRing_Assign() {
	r := ring.New([]ring.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}, ring.Config{VNodes: 4})
	var parts []string
	for i := range 12 {
		parts = append(parts, fmt.Sprintf("partition-%d", i))
	}
	count := func(ids []string) map[string]int {
		m := map[string]int{}
		for _, id := range ids {
			m[id]++
		}
		return m
	}
	fmt.Println("plain:  ", count(r.Assign(parts, math.Inf(1))))
	fmt.Println("bounded:", count(r.Assign(parts, 0))) // at most ceil(12/3) = 4 each
	// Output:
	// plain:   map[a:4 b:6 c:2]
	// bounded: map[a:4 b:4 c:4]
}

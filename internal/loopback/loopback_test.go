package loopback

import "testing"

func TestIs(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.0.0.2": true, "::1": true,
		"10.0.0.1": false, "0.0.0.0": false, "": false, "example.com": false, "[::1]": false,
	} {
		if got := Is(host); got != want {
			t.Errorf("Is(%q) = %v, want %v", host, got, want)
		}
	}
}

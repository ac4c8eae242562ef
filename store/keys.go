package store

import "errors"

// ErrNoKeys is Keys's answer for a store that cannot list its keys: the
// Ristretto engine's (copies), whose cache does not expose them.
var ErrNoKeys = errors.New("store: this engine cannot list its keys")

// Keys calls fn with the key of every item the store holds, shard by
// shard, until fn returns false. An item may be expired, or a key written
// or deleted while Keys runs listed or not: look each key up (Peek) for
// what it holds now. A shard is locked while its keys are copied out, not
// while fn runs.
func (s *Store) Keys(fn func(key string) bool) error {
	k, ok := s.eng.(interface{ keys(func(string) bool) })
	if !ok {
		return ErrNoKeys
	}
	k.keys(fn)
	return nil
}

func (g *segEngine) keys(fn func(string) bool) {
	var batch []string
	for i := range g.shards {
		sh := &g.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		if !sh.closed {
			for id := range sh.segs.len() {
				seg := sh.segs.get(uint32(id))
				if seg == nil {
					continue
				}
				for off := 0; off < seg.used; {
					v := decode(seg.mem, off)
					off = v.end()
					if !v.dead() {
						batch = append(batch, string(v.keyOf(seg.mem)))
					}
				}
			}
		}
		sh.mu.Unlock()
		for _, k := range batch {
			if !fn(k) {
				return
			}
		}
	}
}

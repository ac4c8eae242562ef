package store

import "errors"

// policy is a Segments eviction policy.
type policy uint8

// newSegments is not built yet.
func newSegments(s *Store, p policy) (engine, error) {
	return nil, errors.New("store: the Segments engine is not built yet")
}

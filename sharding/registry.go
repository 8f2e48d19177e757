package sharding

import (
	"fmt"
	"slices"
	"sync"
)

// Registry maps scheme ids to schemes. It is safe for concurrent use. The
// zero value is an empty registry.
type Registry struct {
	mu   sync.RWMutex
	byID map[SchemeID]Scheme
}

// NewRegistry returns a registry holding the given schemes.
func NewRegistry(schemes ...Scheme) (*Registry, error) {
	r := &Registry{}
	for _, s := range schemes {
		if err := r.Register(s); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// DefaultRegistry returns a new registry holding the Builtin schemes; users
// Register theirs on it.
func DefaultRegistry() *Registry {
	r := &Registry{byID: make(map[SchemeID]Scheme)}
	for _, s := range Builtin() {
		r.byID[s.ID] = s
	}
	return r
}

// Register adds a scheme. An id is never re-bound: registering a taken id
// fails with ErrDuplicateScheme.
func (r *Registry) Register(s Scheme) error {
	if err := s.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byID[s.ID]; ok {
		return fmt.Errorf("%w: %d is %s; pick another id for %q", ErrDuplicateScheme, s.ID, old, s.Name)
	}
	if r.byID == nil {
		r.byID = make(map[SchemeID]Scheme)
	}
	r.byID[s.ID] = s
	return nil
}

// Lookup returns the scheme with the given id.
func (r *Registry) Lookup(id SchemeID) (Scheme, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.byID[id]
	if !ok {
		return Scheme{}, fmt.Errorf("%w: %d; known ids: %v", ErrUnknownScheme, id, r.idsLocked())
	}
	return s, nil
}

// IDs returns the registered ids in increasing order.
func (r *Registry) IDs() []SchemeID {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.idsLocked()
}

func (r *Registry) idsLocked() []SchemeID {
	ids := make([]SchemeID, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

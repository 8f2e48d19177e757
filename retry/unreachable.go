package retry

import (
	"sync"
	"time"
)

// PassOver is how long an address that did not answer is passed over
// while another can take the call.
const PassOver = 3 * time.Second

// Unreachable remembers the addresses that did not answer a call, for
// PassOver each: a caller choosing among a replicaset's members passes
// them over, so that a dead leader the routing still names is asked once,
// not on every attempt, and another member serves the call or names the
// new leader. Its zero value is ready; it is safe for concurrent use.
type Unreachable struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Mark records that addr did not answer.
func (u *Unreachable) Mark(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.at == nil {
		u.at = map[string]time.Time{}
	}
	u.at[addr] = time.Now()
}

// Answered forgets that addr did not answer.
func (u *Unreachable) Answered(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.at, addr)
}

// Recent reports whether addr did not answer within PassOver.
func (u *Unreachable) Recent(addr string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.at[addr]
	if ok && time.Since(at) > PassOver {
		delete(u.at, addr)
		return false
	}
	return ok
}

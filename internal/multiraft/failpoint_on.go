//go:build failpoints

package multiraft

import "sync"

// Failpoints holds test hooks by failpoint name. A hook may sleep (a slow
// disk or network) or return an error; an error stops the host at that
// point as if the process had been killed there. This implementation
// exists only in binaries built with the "failpoints" tag.
type Failpoints struct {
	mu    sync.Mutex
	hooks map[string]func() error
}

// Enabled reports whether failpoints are compiled in.
func (f *Failpoints) Enabled() bool { return true }

// Set installs hook at failpoint name (nil removes it).
func (f *Failpoints) Set(name string, hook func() error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hooks == nil {
		f.hooks = make(map[string]func() error)
	}
	if hook == nil {
		delete(f.hooks, name)
		return
	}
	f.hooks[name] = hook
}

func (f *Failpoints) eval(name string) error {
	f.mu.Lock()
	hook := f.hooks[name]
	f.mu.Unlock()
	if hook == nil {
		return nil
	}
	return hook()
}

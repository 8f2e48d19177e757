//go:build failpoints

package failpoint

import (
	"os"
	"sync"
	"syscall"
)

// Points holds test hooks by failpoint name. A hook may sleep (a slow
// disk or network), return an error (the caller stops there as if the
// process had been killed), or kill the process (Kill). The zero value is
// ready to use.
type Points struct {
	mu    sync.Mutex
	hooks map[string]func() error
}

// Enabled reports whether failpoints are compiled in.
func (p *Points) Enabled() bool { return p != nil }

// Set installs hook at failpoint name (nil removes it).
func (p *Points) Set(name string, hook func() error) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hooks == nil {
		p.hooks = make(map[string]func() error)
	}
	if hook == nil {
		delete(p.hooks, name)
		return
	}
	p.hooks[name] = hook
}

// Eval runs the hook at name, if any, and returns its error.
func (p *Points) Eval(name string) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	hook := p.hooks[name]
	p.mu.Unlock()
	if hook == nil {
		return nil
	}
	return hook()
}

// Kill is a hook that kills this process with SIGKILL, as kill -9 would.
func Kill() error {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardkit/shardkit/cache/lease"
)

func TestLeaseLostExitsWithItsCode(t *testing.T) {
	lostCtx, cancelLost := context.WithCancelCause(context.Background())
	cancelLost(fmt.Errorf("ping: %w", lease.ErrLost))
	stopped, stop := context.WithCancel(context.Background())
	stop()
	tests := []struct {
		name string
		ctx  context.Context
		kerr error
		lost bool
	}{
		{"cancelled by OnLost", lostCtx, nil, true},
		{"keeper ended lost", stopped, fmt.Errorf("run: %w", lease.ErrLost), true},
		{"stopped", stopped, nil, false},
		{"keeper failed otherwise", stopped, errors.New("release: boom"), false},
		{"running", context.Background(), nil, false},
	}
	for _, tc := range tests {
		err := leaseLost(tc.ctx, tc.kerr)
		if !tc.lost {
			if err != nil {
				t.Errorf("%s: leaseLost = %v, want nil", tc.name, err)
			}
			continue
		}
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitLeaseLost || !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s: leaseLost = %v, want exit code %d wrapping ErrLost", tc.name, err, exitLeaseLost)
		}
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/numerator/coordinator"
)

// statusOnly is a coordinator whose Status answers st or err; nothing else
// may be called.
type statusOnly struct {
	coordinator.Coordinator
	st  coordinator.Status
	err error
}

func (s statusOnly) Status(context.Context) (coordinator.Status, error) { return s.st, s.err }

func TestReportFailedTrustsTheRecord(t *testing.T) {
	const loc, ticket = "/states/new", 7
	ours := coordinator.Status{State: coordinator.State{Location: loc, Ticket: ticket}}
	other := coordinator.Status{State: coordinator.State{Location: "/states/old", Ticket: 5}}
	stale := fmt.Errorf("%w: refused", coordinator.ErrStale)
	lost := fmt.Errorf("%w: no answer", coordinator.ErrUnavailable)
	tests := []struct {
		name     string
		coord    statusOnly
		rerr     error
		recorded bool
		words    string
	}{
		{"refused but recorded", statusOnly{st: ours}, stale, true, ""},
		{"unanswered but recorded", statusOnly{st: ours}, lost, true, ""},
		{"refused", statusOnly{st: other}, stale, false, "therefore not valid"},
		{"unanswered", statusOnly{st: other}, lost, false, "unknown"},
		{"refused, status unknown", statusOnly{err: lost}, stale, false, "unknown"},
	}
	for _, tc := range tests {
		st, err := reportFailed(t.Context(), tc.coord, ticket, loc, tc.rerr)
		if tc.recorded {
			if err != nil || st.Location != loc {
				t.Errorf("%s: reportFailed = %+v, %v; want the recorded state", tc.name, st, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.words) || !errors.Is(err, tc.rerr) {
			t.Errorf("%s: reportFailed = %v; want an error saying %q and wrapping %v", tc.name, err, tc.words, tc.rerr)
		}
		if tc.words == "unknown" && strings.Contains(err.Error(), "not valid") {
			t.Errorf("%s: %v claims the state is not valid", tc.name, err)
		}
	}
}

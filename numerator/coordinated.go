package numerator

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/shardkit/shardkit/numerator/coordinator"
)

// RunCoordinated is one master's run under a coordinator (N7): it takes
// the write lock (coordinator.RunMaster: waiting, renewing, reporting),
// starts from the coordinator's last consistent state, runs, and records
// the new state under its ticket.
//
// The input state is the recorded state: copied to t.InputState first
// when both are set and differ (the master's working copy), else read
// where it is recorded. On any error the coordinator is told the run
// failed (the recorded state stays and the lock is released); a run whose
// lock was lost returns an error wrapping coordinator.ErrStale, and its
// output is not recorded.
func RunCoordinated(ctx context.Context, c coordinator.Coordinator, t Tables, o Options, mo coordinator.MasterOptions) (Result, coordinator.State, error) {
	var res Result
	st, err := coordinator.RunMaster(ctx, c, mo, func(ctx context.Context, l coordinator.Lease) (coordinator.Report, error) {
		tables := t
		if loc := l.State.Location; loc != "" {
			if tables.InputState != "" && tables.InputState != loc {
				if err := CopyTable(loc, tables.InputState); err != nil {
					return coordinator.Report{}, fmt.Errorf("copying the last consistent state %s to the input state %s: %w", loc, tables.InputState, err)
				}
			} else {
				tables.InputState = loc
			}
		}
		r, err := Run(ctx, tables, o)
		if err != nil {
			return coordinator.Report{}, err
		}
		res = r
		loc, err := filepath.Abs(tables.OutputState)
		if err != nil {
			return coordinator.Report{}, err
		}
		return coordinator.Report{Location: loc, Version: r.State.Version.String()}, nil
	})
	return res, st, err
}

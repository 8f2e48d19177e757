package numerator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shardkit/shardkit/numerator/internal/fsutil"
)

// A run works in directories it owns (fsutil.Owned): its outputs under
// temporary names next to the final ones (OUTPUT.tmp-HEX), a copy of the
// input state (INPUT.tmp-HEX) and its spill files
// (TEMPDIR/shardkit-numerator-spill.tmp-HEX), each with a lock file that
// the run holds with flock while it lives. A run killed (kill -9, a lost
// machine) leaves them behind; the next run removes those next to its own
// locations (cleanLeftovers), and CleanLeftovers removes every one in the
// directories given (shardkit numerator unlock). A live run's are never
// touched.

// cleanLeftovers removes the dead runs' working directories next to the
// run's outputs and in its temp directory.
func cleanLeftovers(t Tables, o Options) ([]string, error) {
	var removed []string
	var errs []error
	for _, base := range []string{t.OutputState, t.NewDocs, t.ExpiredDocs, filepath.Join(o.TempDir, spillBase)} {
		if base == "" {
			continue
		}
		r, err := fsutil.CleanDead(base)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// CleanLeftovers removes, in each of dirs, the working directories of
// numerator runs that died (outputs under temporary names, copies of an
// input state, spill directories); directories of live runs are left
// alone. It returns what it removed.
func CleanLeftovers(dirs ...string) ([]string, error) {
	var removed []string
	var errs []error
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w; name an existing directory that holds the outputs or spill files", ErrBadOptions, err))
			continue
		}
		if !st.IsDir() {
			errs = append(errs, fmt.Errorf("%w: %s is not a directory; name the directory that holds the outputs", ErrBadOptions, d))
			continue
		}
		r, err := fsutil.CleanDeadIn(d)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

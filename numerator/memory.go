package numerator

import "fmt"

// A process running the numerator needs memory beyond the rows it holds:
//
//   - about 35 MiB for the binary's pages and the Go runtime before any
//     work (the shardkit binary; measured with getrusage);
//   - about 60 MiB of read and write buffers while two shards are read
//     and written at once (record batches of 16K rows in flight, each
//     output part's row group of 16K rows);
//   - the plan of every shard until it is written (a byte per input row
//     and a bit per doc_id) and the garbage collector's slack.
//
// ProcessBudget turns a limit on the whole process (--memory-limit) into
// the budget for rows (Options.MemoryLimit) and the Go runtime's soft
// limit (debug.SetMemoryLimit).
const (
	// MemoryReserve is what a process limit keeps for everything but rows.
	MemoryReserve = 160 << 20
	// MinProcessMemory is the smallest process limit that is met: below it
	// the reserve leaves too little for rows.
	MinProcessMemory = MemoryReserve + 32<<20
	// runtimeOutsideLimit is the resident memory the Go runtime's limit
	// does not count (the binary's pages).
	runtimeOutsideLimit = 64 << 20
)

// ProcessBudget splits a process memory limit: rows get half of it, or
// the limit less MemoryReserve when that is smaller; the Go runtime's soft
// limit is the limit less the binary's pages. A limit below
// MinProcessMemory is refused with ErrBadOptions.
func ProcessBudget(limit int64) (rows, goLimit int64, err error) {
	if limit < MinProcessMemory {
		return 0, 0, fmt.Errorf("%w: a memory limit of %d MiB is below the workable minimum of %d MiB: the binary and the Go runtime take about 35 MiB and reading and writing two shards at once about 60 MiB before any row is held; give at least %dMiB",
			ErrBadOptions, limit>>20, MinProcessMemory>>20, MinProcessMemory>>20)
	}
	return min(limit/2, limit-MemoryReserve), limit - runtimeOutsideLimit, nil
}

//go:build !unix

package replicaset

import "time"

// processCPU is not measured here.
func processCPU() (time.Duration, bool) { return 0, false }

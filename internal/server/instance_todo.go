package server

import (
	"context"
	"errors"
)

// runInstance is being written (issue 3); this file goes away with it.
func runInstance(context.Context, InstanceConfig, string) error {
	return errors.New("shardkit run: the cluster instance is not built yet")
}

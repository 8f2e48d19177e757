package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The helpers shared by the data commands (space, insert, select, call,
// ...): their client, their exit codes, their JSON input and output.

// exitUsage is the exit code of a data command whose command line is wrong
// (a flag, an argument, JSON that does not parse or fit the space's
// format, a request the cluster refuses as invalid); every other failure
// exits 1.
const exitUsage = 2

// dataTimeout is the default --timeout of the data commands.
const (
	dataTimeout     = 10 * time.Second
	dataTimeoutHelp = "how long the command may take (each instance asked gets an equal share, at least 1s, so a dead one leaves time for the next)"
)

// maxArgBytes bounds a JSON argument read from stdin ("-"): more than the
// largest write (replicaset.MaxBatchBytes) with room for JSON's overhead.
const maxArgBytes = 16 << 20

func usageError(err error) error { return &ExitError{Code: exitUsage, Err: err} }

func usagef(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

// asDataCommand gives cmd exactly the positional arguments names (its
// flag errors exit 2 through root's FlagErrorFunc).
func asDataCommand(cmd *cobra.Command, names ...string) *cobra.Command {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		name := commandName(cmd)
		switch len(names) {
		case 0:
			return usagef("%s takes no arguments, got %q", name, args)
		case 1:
			return usagef("%s takes one argument, %s; got %d", name, names[0], len(args))
		}
		return usagef("%s takes %d arguments, %s; got %d", name, len(names), strings.Join(names, " "), len(args))
	}
	return cmd
}

// commandName is cmd's path without the program's name ("space create"):
// Main already puts "shardkit: " before every message.
func commandName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// prefixExit puts what failed before the message of an *ExitError.
func prefixExit(what string, err error) error {
	var exit *ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return &ExitError{Code: exit.Code, Err: fmt.Errorf("%s: %w", what, exit.Err), Quiet: exit.Quiet}
}

// dataClient makes a data command's client and the context that bounds
// the command. --timeout bounds the whole command; each instance asked
// gets an equal share of it (at least a second), so that an instance that
// does not answer leaves time to ask the next --peer.
func (f *clusterFlags) dataClient(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	cl, err := f.client(ctx)
	if err != nil {
		return nil, nil, nil, usageError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// dataError turns a failed call into one line (what failed, then the
// cluster's own account) and its exit code: 2 when the request itself is
// wrong (client.ErrInvalid), 1 otherwise.
func dataError(what string, timeout time.Duration, err error) error {
	code := 1
	if errors.Is(err, client.ErrInvalid) {
		code = exitUsage
	}
	return &ExitError{Code: code, Err: fmt.Errorf("%s: %w", what, callError(timeout, err))}
}

// lookupSpace returns the cluster's definition of the space name.
func lookupSpace(ctx context.Context, cl *client.Client, timeout time.Duration, name string) (client.SpaceDef, error) {
	defs, err := cl.Spaces(ctx)
	if err != nil {
		return client.SpaceDef{}, dataError("list spaces", timeout, err)
	}
	for _, d := range defs {
		if d.Name == name {
			return d, nil
		}
	}
	return client.SpaceDef{}, &ExitError{Code: 1, Err: fmt.Errorf("no space %q (shardkit space list shows the spaces)", name)}
}

// keyFormat returns the format of a space's primary key, part by part.
func keyFormat(d client.SpaceDef) tuple.Format {
	out := make(tuple.Format, 0, len(d.PrimaryKey))
	for _, name := range d.PrimaryKey {
		if i, ok := d.Format.Index(name); ok {
			out = append(out, d.Format[i])
		}
	}
	return out
}

// jsonArg is a JSON argument as given, or read from stdin when it is "-".
func jsonArg(cmd *cobra.Command, arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxArgBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read stdin: %w", err)
	}
	if len(data) > maxArgBytes {
		return nil, fmt.Errorf("stdin holds more than %d bytes", maxArgBytes)
	}
	return data, nil
}

// checkStdin refuses more than one argument read from stdin.
func checkStdin(args []string) error {
	n := 0
	for _, a := range args {
		if a == "-" {
			n++
		}
	}
	if n > 1 {
		return usagef("only one argument can be read from stdin (-), got %d", n)
	}
	return nil
}

// parseMode parses --mode: ro or rw.
func parseMode(s string) (client.Mode, error) {
	switch s {
	case "rw":
		return client.RW, nil
	case "ro":
		return client.RO, nil
	}
	return 0, usagef("invalid --mode %q: want ro (a replica; may be stale) or rw (the leader; linearizable)", s)
}

// writeTuples prints results as a JSON array of their tuples ([] when
// none), or with versions as [{"tuple":[...],"version":N}, ...].
func writeTuples(out io.Writer, versions bool, rs ...client.Result) error {
	b := []byte{'['}
	n := 0
	for _, r := range rs {
		if r.Tuple == nil {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		if !versions {
			b = tuple.AppendJSON(b, r.Tuple)
			continue
		}
		b = append(b, `{"tuple":`...)
		b = tuple.AppendJSON(b, r.Tuple)
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, r.Version, 10)
		b = append(b, '}')
	}
	b = append(b, ']', '\n')
	_, err := out.Write(b)
	return err
}

// writeReadInfo prints who served a read and how fresh it is, as one JSON
// line.
func writeReadInfo(out io.Writer, i client.ReadInfo) error {
	b, err := json.Marshal(struct {
		Replicaset      string `json:"replicaset"`
		Instance        string `json:"instance"`
		Leader          bool   `json:"leader"`
		AppliedIndex    uint64 `json:"applied_index"`
		LagEntries      uint64 `json:"lag_entries"`
		LeaderContactMs int64  `json:"leader_contact_ms"`
	}{i.Replicaset, i.Instance, i.Leader, i.AppliedIndex, i.LagEntries, i.LeaderContact})
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

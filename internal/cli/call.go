package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

type callOptions struct {
	clusterFlags
	list       bool
	mode       string
	bucket     uint32
	replicaset string
}

const callLong = `
PROC is a procedure registered in the instances' binary (the built-ins are
count(space), echo(args...) and buckets(); docs/data.md shows how to build a
binary with your own). ARGS is a JSON array of its arguments: integers,
doubles, strings, booleans and null. --mode rw runs it on a replicaset's
leader, ro on a replica (an rw procedure is refused in ro mode).`

func newCallCmd(procs *proc.Registry) *cobra.Command {
	var o callOptions
	cmd := &cobra.Command{
		Use:   "call [flags] PROC ARGS",
		Short: "Run a stored procedure on one replicaset and print its result",
		Long: `Run a stored procedure on one replicaset (any, or the one of --bucket or
--replicaset) and print its result, a JSON array.
` + callLong + ` The default mode is the procedure's own.

call --list lists the procedures compiled into this binary, which the
instances it runs serve; it asks no cluster (one running another binary may
serve others).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return writeProcedures(cmd.OutOrStdout(), procs)
			}
			return runCall(cmd, &o, args)
		},
	}
	asDataCommand(cmd, "PROC", "ARGS")
	exact := cmd.Args
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if o.list && len(args) > 0 {
			return usagef("call --list takes no arguments, got %q", args)
		}
		if o.list {
			return nil
		}
		return exact(cmd, args)
	}
	f := cmd.Flags()
	f.BoolVar(&o.list, "list", false, "list the procedures of this binary (name, mode, what it does)")
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.StringVar(&o.mode, "mode", "", "ro or rw (default: the procedure's own)")
	f.Uint32Var(&o.bucket, "bucket", 0, "run on the replicaset holding this bucket")
	f.StringVar(&o.replicaset, "replicaset", "", "run on this replicaset")
	return cmd
}

func runCall(cmd *cobra.Command, o *callOptions, args []string) error {
	fl := cmd.Flags()
	switch {
	case fl.Changed("bucket") && fl.Changed("replicaset"):
		return usagef("give --bucket or --replicaset, not both: --bucket %d runs the procedure on the replicaset holding that bucket, --replicaset %s on that replicaset", o.bucket, o.replicaset)
	case fl.Changed("bucket") && o.bucket == 0:
		return usagef("invalid --bucket 0: buckets are numbered from 1 to the cluster's bucket count (`shardkit rebalance status` shows it); without --bucket the procedure runs on any replicaset")
	case fl.Changed("replicaset") && o.replicaset == "":
		return usagef("invalid --replicaset \"\": give a replicaset id (`shardkit status` lists them)")
	}
	callArgs, err := procArgs(cmd, args)
	if err != nil {
		return err
	}
	opts := client.CallOptions{Bucket: o.bucket, Replicaset: o.replicaset}
	if o.mode != "" {
		m, err := parseMode(o.mode)
		if err != nil {
			return err
		}
		opts.Mode = &m
	}
	cl, ctx, done, err := o.dataClient(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	res, err := cl.Call(ctx, args[0], callArgs, opts)
	if err != nil {
		return dataError("call "+args[0], o.timeout, err)
	}
	_, err = cmd.OutOrStdout().Write(append(tuple.AppendJSON(nil, res), '\n'))
	return err
}

// writeProcedures lists procs: name, mode and doc, by name.
func writeProcedures(out io.Writer, procs *proc.Registry) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tDOC")
	for _, p := range procs.List() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Mode, oneLine(p.Doc))
	}
	return tw.Flush()
}

// procArgs parses PROC's ARGS (no format: each value as JSON writes it).
func procArgs(cmd *cobra.Command, args []string) (tuple.Tuple, error) {
	if err := checkStdin(args[1:]); err != nil {
		return nil, err
	}
	data, err := jsonArg(cmd, args[1])
	if err != nil {
		return nil, usageError(err)
	}
	t, err := tuple.ParseJSONArgs(data)
	if err != nil {
		return nil, usagef("%s %s: %w", commandName(cmd), args[0], err)
	}
	return t, nil
}

type mapCallOptions struct {
	clusterFlags
	mode string
}

func newMapCallCmd() *cobra.Command {
	var o mapCallOptions
	cmd := &cobra.Command{
		Use:   "map-call [flags] PROC ARGS",
		Short: "Run a stored procedure on every replicaset that holds buckets",
		Long: `Run a stored procedure on every replicaset that holds buckets and print one
line per replicaset, by id: {"replicaset":"r1","result":[...]}, or
{"replicaset":"r2","error":"..."} where it failed. A failure on some
replicasets exits 1 naming them (after the lines of all).
` + callLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			callArgs, err := procArgs(cmd, args)
			if err != nil {
				return err
			}
			mode, err := parseMode(o.mode)
			if err != nil {
				return err
			}
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := cl.MapCall(ctx, args[0], callArgs, mode)
			if werr := writeMapCall(cmd.OutOrStdout(), res); werr != nil {
				return werr
			}
			if err != nil {
				if errors.Is(err, client.ErrPartial) {
					return &ExitError{Code: 1, Err: errors.New(oneLine(err.Error()))}
				}
				return dataError("map-call "+args[0], o.timeout, err)
			}
			return nil
		},
	}
	asDataCommand(cmd, "PROC", "ARGS")
	f := cmd.Flags()
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.StringVar(&o.mode, "mode", "rw", "rw: each replicaset's leader; ro: a replica of each")
	return cmd
}

// writeMapCall prints one JSON line per replicaset.
func writeMapCall(out io.Writer, res []client.ReplicasetResult) error {
	var b []byte
	for _, r := range res {
		b = append(b, `{"replicaset":`...)
		b = appendJSONString(b, r.Replicaset)
		if r.Err != nil {
			b = append(b, `,"error":`...)
			b = appendJSONString(b, oneLine(r.Err.Error()))
		} else {
			b = append(b, `,"result":`...)
			b = tuple.AppendJSON(b, r.Result)
		}
		b = append(b, "}\n"...)
	}
	_, err := out.Write(b)
	return err
}

// appendJSONString appends s as a JSON string, as tuples write strings.
func appendJSONString(b []byte, s string) []byte {
	t := tuple.AppendJSON(nil, tuple.Tuple{tuple.String(s)})
	return append(b, t[1:len(t)-1]...)
}

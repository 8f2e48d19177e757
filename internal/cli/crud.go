package cli

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// dataOptions are the flags of insert, replace, select, update, upsert and
// delete.
type dataOptions struct {
	clusterFlags
	versions  bool
	ifVersion uint64
	ifAbsent  bool
	mode      string
	readInfo  bool
}

// dataOp is one of those commands: its arguments after SPACE, and what it
// does with them once the space's definition is known.
type dataOp struct {
	use, short      string
	args            []string // after SPACE
	ifVersion, mode bool     // takes --if-version, --mode
	ifAbsent        bool     // takes --if-absent
	do              func(x *dataCall) (client.Result, error)
	what            string // "insert into": names the call in errors
}

// dataCall is one run of a data command.
type dataCall struct {
	ctx  context.Context
	cmd  *cobra.Command
	def  client.SpaceDef
	sp   *client.Space
	args []string // after SPACE
	opts []client.WriteOption
	mode client.Mode
	info *client.ReadInfo // who served a read
}

func (x *dataCall) json(i int) ([]byte, error) {
	data, err := jsonArg(x.cmd, x.args[i])
	if err != nil {
		return nil, usageError(err)
	}
	return data, nil
}

func (x *dataCall) tuple(i int) (tuple.Tuple, error) {
	data, err := x.json(i)
	if err != nil {
		return nil, err
	}
	t, err := tuple.ParseJSONTuple(data, x.def.Format)
	if err != nil {
		return nil, usageError(jsonError("the tuple", err, "the format", x.def.Format))
	}
	return t, nil
}

func (x *dataCall) key(i int) ([]tuple.Value, error) {
	data, err := x.json(i)
	if err != nil {
		return nil, err
	}
	return parseKey(data, x.def)
}

// parseKey reads a primary key of the space def from JSON (a wrong one is
// a usage error naming the key's format).
func parseKey(data []byte, def client.SpaceDef) ([]tuple.Value, error) {
	kf := keyFormat(def)
	k, err := tuple.ParseJSONKey(data, kf)
	if err != nil {
		return nil, usageError(jsonError("the key", err, "the primary key", kf))
	}
	return k, nil
}

func (x *dataCall) ops(i int) ([]tuple.Op, error) {
	data, err := x.json(i)
	if err != nil {
		return nil, err
	}
	ops, err := tuple.ParseJSONOps(data, x.def.Format)
	if err != nil {
		return nil, usageError(jsonError("the update", err, "", nil))
	}
	return ops, nil
}

var dataOps = []dataOp{
	{
		use: "insert", args: []string{"TUPLE"}, what: "insert into", ifAbsent: true,
		short: "Insert a tuple; refused if a tuple with its key exists (skipped with --if-absent)",
		do: func(x *dataCall) (client.Result, error) {
			t, err := x.tuple(0)
			if err != nil {
				return client.Result{}, err
			}
			return x.sp.Insert(x.ctx, t, x.opts...)
		},
	},
	{
		use: "replace", args: []string{"TUPLE"}, what: "replace in", ifVersion: true,
		short: "Insert a tuple or overwrite the one with its key",
		do: func(x *dataCall) (client.Result, error) {
			t, err := x.tuple(0)
			if err != nil {
				return client.Result{}, err
			}
			return x.sp.Replace(x.ctx, t, x.opts...)
		},
	},
	{
		use: "select", args: []string{"KEY"}, what: "select from", mode: true,
		short: "Read the tuple with a full primary key",
		do: func(x *dataCall) (client.Result, error) {
			k, err := x.key(0)
			if err != nil {
				return client.Result{}, err
			}
			r, info, err := x.sp.Select(x.ctx, k, x.mode)
			x.info = &info
			if !r.Found {
				r.Tuple = nil
			}
			return r, err
		},
	},
	{
		use: "update", args: []string{"KEY", "OPS"}, what: "update of", ifVersion: true,
		short: "Apply update operations to the tuple with a key; [] when there is none",
		do: func(x *dataCall) (client.Result, error) {
			k, err := x.key(0)
			if err != nil {
				return client.Result{}, err
			}
			ops, err := x.ops(1)
			if err != nil {
				return client.Result{}, err
			}
			return x.sp.Update(x.ctx, k, ops, x.opts...)
		},
	},
	{
		use: "upsert", args: []string{"TUPLE", "OPS"}, what: "upsert into", ifVersion: true,
		short: "Insert a tuple, or apply update operations to the one with its key",
		do: func(x *dataCall) (client.Result, error) {
			t, err := x.tuple(0)
			if err != nil {
				return client.Result{}, err
			}
			ops, err := x.ops(1)
			if err != nil {
				return client.Result{}, err
			}
			return x.sp.Upsert(x.ctx, t, ops, x.opts...)
		},
	},
	{
		use: "delete", args: []string{"KEY"}, what: "delete from", ifVersion: true,
		short: "Delete the tuple with a key and print it; [] when there is none",
		do: func(x *dataCall) (client.Result, error) {
			k, err := x.key(0)
			if err != nil {
				return client.Result{}, err
			}
			return x.sp.Delete(x.ctx, k, x.opts...)
		},
	},
}

const dataLong = `
SPACE names a space (shardkit space list). TUPLE is a JSON array of the
tuple's fields, KEY a JSON array of the primary key's parts, OPS a JSON
array of update operations such as [["=","name","x"],["+","price",1.5]];
values are converted by the space's field types (bytes as base64, uuids as
8-4-4-4-12 hex digits). An argument "-" is read from stdin.

Prints a JSON array of the tuples concerned ([] when none); --versions
prints each as {"tuple":[...],"version":N}. A refusal exits non-zero with
one line on stderr: 2 when the command line or the request is wrong (a
value that does not fit its field names the field), 1 when the cluster
refuses or cannot serve it. See docs/data.md.`

func newDataCmds() []*cobra.Command {
	out := make([]*cobra.Command, 0, len(dataOps)+1)
	for _, op := range dataOps {
		out = append(out, newDataCmd(op))
	}
	return append(out, newScanCmd(), newBatchCmd(), newWatchCmd())
}

func newDataCmd(op dataOp) *cobra.Command {
	var o dataOptions
	use := op.use + " [flags] SPACE"
	for _, a := range op.args {
		use += " " + a
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: op.short,
		Long:  op.short + ".\n" + dataLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runData(cmd, op, &o, args)
		},
	}
	asDataCommand(cmd, append([]string{"SPACE"}, op.args...)...)
	f := cmd.Flags()
	if op.use == "select" {
		selectRange(cmd, &o)
	}
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.BoolVar(&o.versions, "versions", false, `print each tuple as {"tuple":[...],"version":N}`)
	if op.ifVersion {
		f.Uint64Var(&o.ifVersion, "if-version", 0, "apply only if the tuple's version is N (0: only if there is no tuple); the version is printed by --versions")
	}
	if op.ifAbsent {
		f.BoolVar(&o.ifAbsent, "if-absent", false, `skip the insert when a tuple with its key exists, and print {"inserted":BOOL,"tuple":[...],"version":N} (the tuple inserted, or the one that exists)`)
	}
	if op.mode {
		f.StringVar(&o.mode, "mode", "rw", "rw: the replicaset's leader (linearizable); ro: a replica (may be stale)")
		f.BoolVar(&o.readInfo, "read-info", false, `print on stderr who served the read and how fresh it is: {"replicaset","instance","leader","applied_index","lag_entries","leader_contact_ms"}`)
	}
	return cmd
}

func runData(cmd *cobra.Command, op dataOp, o *dataOptions, args []string) error {
	if err := checkStdin(args); err != nil {
		return err
	}
	x := &dataCall{cmd: cmd, args: args[1:], mode: client.RW}
	if op.mode {
		m, err := parseMode(o.mode)
		if err != nil {
			return err
		}
		x.mode = m
	}
	if op.ifVersion && cmd.Flags().Changed("if-version") {
		x.opts = append(x.opts, client.IfVersion(o.ifVersion))
	}
	if op.ifAbsent && o.ifAbsent {
		x.opts = append(x.opts, client.IfAbsent())
	}
	cl, ctx, done, err := o.dataClient(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	x.ctx = ctx
	what := op.what + " " + args[0]
	if x.def, err = lookupSpace(ctx, cl, o.timeout, args[0]); err != nil {
		return prefixExit(what, err)
	}
	x.sp = cl.Space(x.def.Name)
	r, err := op.do(x)
	if err != nil {
		var exit *ExitError
		if errors.As(err, &exit) { // the command line, refused before any call
			return prefixExit(what, exit)
		}
		return dataError(what, o.timeout, err)
	}
	if o.readInfo && x.info != nil {
		if err := writeReadInfo(cmd.ErrOrStderr(), *x.info); err != nil {
			return err
		}
	}
	if op.ifAbsent && o.ifAbsent {
		return writeInserted(cmd.OutOrStdout(), r)
	}
	return writeTuples(cmd.OutOrStdout(), o.versions, r)
}

// writeInserted prints the result of an insert --if-absent: whether it
// inserted, and the tuple with the key (inserted, or found) with its
// version.
func writeInserted(out io.Writer, r client.Result) error {
	b := append([]byte(`{"inserted":`), strconv.FormatBool(!r.Found)...)
	b = append(b, `,"tuple":`...)
	b = tuple.AppendJSON(b, r.Tuple)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, r.Version, 10)
	_, err := out.Write(append(b, '}', '\n'))
	return err
}

// jsonError says what is wrong with a JSON argument (what: "the tuple"),
// and for a value that does not fit, the format it must fit (named
// fname).
func jsonError(what string, err error, fname string, f tuple.Format) error {
	msg := err.Error()
	if !strings.HasPrefix(msg, what) {
		msg = what + ": " + msg
	}
	if fname != "" && errors.Is(err, tuple.ErrMismatch) {
		msg += " (" + fname + ": " + formatString(f) + ")"
	}
	return errors.New(msg)
}

// formatString writes a format as --field takes it: id:unsigned, name:string?.
func formatString(f tuple.Format) string {
	s := ""
	for i, fd := range f {
		if i > 0 {
			s += ", "
		}
		s += fd.String()
	}
	return s
}

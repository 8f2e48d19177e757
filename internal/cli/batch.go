package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// maxBatchOps bounds the ops of one batch command, as the server bounds a
// write (replicaset.MaxBatchOps).
const maxBatchOps = 1000

// batchKinds are the kinds of op of a batch, by their JSON key.
var batchKinds = []string{"insert", "replace", "update", "upsert", "delete", "check"}

// batchOp is one op of `shardkit batch`, parsed.
type batchOp struct {
	kind      string // one of batchKinds
	space     string
	tuple     tuple.Tuple   // insert, replace, upsert
	key       []tuple.Value // update, delete, check
	ops       []tuple.Op    // update, upsert
	ifVersion *uint64
	ifAbsent  bool
	where     []client.Condition // check
}

// parseBatch reads the ops of a batch: a JSON array of objects, each with
// one kind key (its value the tuple or the key) and that kind's options:
//
//	{"insert": TUPLE, "if_absent": true}
//	{"replace": TUPLE, "if_version": N}
//	{"update": KEY, "ops": OPS, "if_version": N}
//	{"upsert": TUPLE, "ops": OPS}
//	{"delete": KEY, "if_version": N}
//	{"check": KEY, "if_version": N, "where": [["field", "<=", value], [3, "!=", null]]}
//
// Any op may name "space" (else space). defs gives a space's definition.
// Errors name the op (1-based) and what in it is wrong.
func parseBatch(data []byte, space string, defs func(name string) (client.SpaceDef, bool)) ([]batchOp, error) {
	var raw []json.RawMessage
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		return nil, fmt.Errorf("the ops must be a JSON array of objects such as {\"insert\": [...]}")
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("the ops are not valid JSON: %w", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("the ops are an empty array; a batch needs at least one op")
	}
	if len(raw) > maxBatchOps {
		return nil, fmt.Errorf("%d ops; a batch has at most %d", len(raw), maxBatchOps)
	}
	out := make([]batchOp, 0, len(raw))
	for i, r := range raw {
		op, err := parseBatchOp(r, space, defs)
		if err != nil {
			return nil, fmt.Errorf("op %d%s: %w", i+1, op.label(), err)
		}
		out = append(out, op)
	}
	return out, nil
}

// label names a parsed op's kind and space for a message: " (check in
// fence)", or "" when they are not known yet.
func (op batchOp) label() string {
	if op.kind == "" {
		return ""
	}
	return " (" + op.kind + " in " + op.space + ")"
}

func parseBatchOp(raw json.RawMessage, space string, defs func(string) (client.SpaceDef, bool)) (batchOp, error) {
	op := batchOp{space: space}
	var fields map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return op, fmt.Errorf("must be an object such as {\"insert\": [...]}, got %s", shortJSON(raw))
	}
	var kinds []string
	for _, k := range batchKinds {
		if _, ok := fields[k]; ok {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) != 1 {
		return op, fmt.Errorf("names %d kinds of op (%s); give exactly one of %s", len(kinds), strings.Join(kinds, ", "), strings.Join(batchKinds, ", "))
	}
	op.kind = kinds[0]
	if s, ok := fields["space"]; ok {
		if json.Unmarshal(s, &op.space) != nil || op.space == "" {
			return op, fmt.Errorf("\"space\" must be a space's name, got %s", shortJSON(s))
		}
	}
	allowed := map[string][]string{
		"insert":  {"if_absent"},
		"replace": {"if_version"},
		"update":  {"ops", "if_version"},
		"upsert":  {"ops"},
		"delete":  {"if_version"},
		"check":   {"if_version", "where"},
	}[op.kind]
	for k := range fields {
		if k != op.kind && k != "space" && !slices.Contains(allowed, k) {
			return op, fmt.Errorf("unknown key %q for a %s; it takes %s", k, op.kind, strings.Join(append([]string{`"space"`}, quoteAll(allowed)...), ", "))
		}
	}
	def, ok := defs(op.space)
	if !ok {
		return op, fmt.Errorf("no space %q (shardkit space list shows the spaces)", op.space)
	}
	var err error
	body := fields[op.kind]
	switch op.kind {
	case "insert", "replace", "upsert":
		if op.tuple, err = tuple.ParseJSONTuple(body, def.Format); err != nil {
			return op, jsonError("the tuple", err, "the format", def.Format)
		}
	default:
		kf := keyFormat(def)
		if op.key, err = tuple.ParseJSONKey(body, kf); err != nil {
			return op, jsonError("the key", err, "the primary key", kf)
		}
	}
	if o, ok := fields["ops"]; ok {
		if op.ops, err = tuple.ParseJSONOps(o, def.Format); err != nil {
			return op, jsonError("the update", err, "", nil)
		}
	} else if op.kind == "update" || op.kind == "upsert" {
		return op, fmt.Errorf("an %s needs \"ops\", the update operations", op.kind)
	}
	if v, ok := fields["if_version"]; ok {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return op, fmt.Errorf("\"if_version\" must be an unsigned integer (0: no tuple), got %s", shortJSON(v))
		}
		op.ifVersion = &n
	}
	if v, ok := fields["if_absent"]; ok {
		if json.Unmarshal(v, &op.ifAbsent) != nil || v[0] == 'n' {
			return op, fmt.Errorf("\"if_absent\" must be true or false, got %s", shortJSON(v))
		}
	}
	if w, ok := fields["where"]; ok {
		if op.where, err = parseWhere(w, def.Format); err != nil {
			return op, err
		}
	}
	if op.kind == "check" && op.ifVersion == nil && len(op.where) == 0 {
		return op, fmt.Errorf("a check needs \"if_version\" or \"where\" conditions")
	}
	return op, nil
}

// parseWhere reads a check's conditions: [[FIELD, CMP, VALUE], ...], the
// field by name or 1-based number, the value converted by the field's
// type.
func parseWhere(data []byte, f tuple.Format) ([]client.Condition, error) {
	var conds []json.RawMessage
	if data[0] != '[' || json.Unmarshal(data, &conds) != nil {
		return nil, fmt.Errorf("\"where\" must be an array of conditions such as [\"price\", \"<=\", 5], got %s", shortJSON(data))
	}
	out := make([]client.Condition, 0, len(conds))
	for n, raw := range conds {
		var parts []json.RawMessage
		if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil || len(parts) != 3 {
			return nil, fmt.Errorf("condition %d must be [field, comparison, value] such as [\"price\", \"<=\", 5], got %s", n+1, shortJSON(raw))
		}
		var c client.Condition
		var i int
		var name string
		switch {
		case json.Unmarshal(parts[0], &name) == nil && parts[0][0] == '"':
			idx, ok := f.Index(name)
			if !ok {
				return nil, fmt.Errorf("condition %d: no field %q (the fields: %s)", n+1, name, formatString(f))
			}
			c.Field, i = name, idx
		default:
			num, err := strconv.Atoi(string(parts[0]))
			if err != nil || num < 1 || num > len(f) {
				return nil, fmt.Errorf("condition %d: the field must be a name or a number from 1 to %d, got %s", n+1, len(f), shortJSON(parts[0]))
			}
			c.Number, i = num, num-1
		}
		var sym string
		cmp, ok := client.Compare(0), false
		if json.Unmarshal(parts[1], &sym) == nil && parts[1][0] == '"' {
			cmp, ok = client.ParseCompare(sym)
		}
		if !ok {
			return nil, fmt.Errorf("condition %d (field %s): unknown comparison %s; one of = != < <= > >=", n+1, f[i].Name, shortJSON(parts[1]))
		}
		c.Compare = cmp
		vals, err := tuple.ParseJSONTuple(append(append([]byte{'['}, parts[2]...), ']'), f[i:i+1])
		if err != nil {
			return nil, fmt.Errorf("condition %d (%s %s): %s", n+1, f[i].Name, sym, valueError(err, f[i]))
		}
		c.Value = vals[0]
		out = append(out, c)
	}
	return out, nil
}

// valueError is the message of a value that does not fit field fd, without
// the field's position in the one-field format it was parsed by.
func valueError(err error, fd tuple.Field) string {
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, "element 1 ("+fd.Name+"): "); ok {
		msg = rest
	}
	return msg + " (the field is " + fd.String() + ")"
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = strconv.Quote(x)
	}
	return out
}

// shortJSON writes a JSON value for a message, cut short when long.
func shortJSON(b []byte) string {
	const max = 40
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return "nothing"
	}
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// batchResult is one op's result as `shardkit batch` prints it.
type batchResult struct {
	Op      string          `json:"op"`
	Found   bool            `json:"found"`
	Tuple   json.RawMessage `json:"tuple"`
	Version uint64          `json:"version"`
}

func writeBatchResults(out io.Writer, ops []batchOp, res []client.Result) error {
	rs := make([]batchResult, len(res))
	for i, r := range res {
		rs[i] = batchResult{Op: ops[i].kind, Found: r.Found, Tuple: json.RawMessage("null"), Version: r.Version}
		if r.Tuple != nil {
			rs[i].Tuple = tuple.AppendJSON(nil, r.Tuple)
		}
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

const batchLong = `Apply ops to one bucket atomically: all of them or none.

OPS is a JSON array of ops ("-": read from stdin), each an object with one
kind of op and its options; "space" names another space than SPACE (the
ops' keys must share a bucket: equal sharding keys):

  {"insert": TUPLE}                  refused when the key exists;
  {"insert": TUPLE, "if_absent": true}   skipped when it exists
  {"replace": TUPLE, "if_version": N}
  {"update": KEY, "ops": OPS, "if_version": N}
  {"upsert": TUPLE, "ops": OPS}
  {"delete": KEY, "if_version": N}
  {"check": KEY, "if_version": N, "where": [[FIELD, CMP, VALUE], ...]}

A check writes nothing: the batch is refused unless the key's tuple has
version N (0: no tuple) and each condition holds (FIELD a name or a
number from 1, CMP one of = != < <= > >=, VALUE of the field's type; a
condition on a missing tuple fails). Update ops include ["max", FIELD, V]
and ["min", FIELD, V].

Prints one JSON array with each op's result, in order:
{"op":KIND,"found":BOOL,"tuple":[...]|null,"version":N}; "found" is
whether the key had a tuple before the op (for an insert with if_absent:
that it was skipped); a check's tuple is null. Exits 2 when OPS is wrong (naming the op), 1 when
the cluster refuses the batch (a failed check names the op, the condition
and the value found). See docs/data.md.`

func newBatchCmd() *cobra.Command {
	var o clusterFlags
	cmd := &cobra.Command{
		Use:   "batch [flags] SPACE OPS",
		Short: "Apply ops (insert, replace, update, upsert, delete, check) to one bucket atomically",
		Long:  batchLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBatch(cmd, &o, args)
		},
	}
	asDataCommand(cmd, "SPACE", "OPS")
	o.register(cmd.Flags(), dataTimeout, dataTimeoutHelp)
	return cmd
}

func runBatch(cmd *cobra.Command, o *clusterFlags, args []string) error {
	what := "batch in " + args[0]
	data, err := jsonArg(cmd, args[1])
	if err != nil {
		return prefixExit(what, usageError(err))
	}
	cl, ctx, done, err := o.dataClient(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	list, err := cl.Spaces(ctx)
	if err != nil {
		return dataError("list spaces", o.timeout, err)
	}
	defs := func(name string) (client.SpaceDef, bool) {
		for _, d := range list {
			if d.Name == name {
				return d, true
			}
		}
		return client.SpaceDef{}, false
	}
	if _, ok := defs(args[0]); !ok {
		return &ExitError{Code: 1, Err: fmt.Errorf("%s: no space %q (shardkit space list shows the spaces)", what, args[0])}
	}
	ops, err := parseBatch(data, args[0], defs)
	if err != nil {
		return prefixExit(what, usageError(err))
	}
	b := cl.Batch()
	for _, op := range ops {
		var opts []client.WriteOption
		if op.ifVersion != nil && op.kind != "check" {
			opts = append(opts, client.IfVersion(*op.ifVersion))
		}
		switch op.kind {
		case "insert":
			if op.ifAbsent {
				opts = append(opts, client.IfAbsent())
			}
			b.Insert(op.space, op.tuple, opts...)
		case "replace":
			b.Replace(op.space, op.tuple, opts...)
		case "update":
			b.Update(op.space, op.key, op.ops, opts...)
		case "upsert":
			b.Upsert(op.space, op.tuple, op.ops, opts...)
		case "delete":
			b.Delete(op.space, op.key, opts...)
		case "check":
			conds := op.where
			if op.ifVersion != nil {
				conds = append([]client.Condition{client.VersionIs(*op.ifVersion)}, conds...)
			}
			b.Check(op.space, op.key, conds...)
		}
	}
	res, err := b.Do(ctx)
	if err != nil {
		return dataError(what, o.timeout, err)
	}
	return writeBatchResults(cmd.OutOrStdout(), ops, res)
}

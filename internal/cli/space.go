package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
)

func newSpaceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "space",
		Short: "Create, list, drop and count spaces",
		Long: `Spaces hold the cluster's tuples. A space has a format (its fields, each
with a type), a primary key (some of its fields) and a sharding key (some
of the primary key's fields: tuples with equal sharding keys share a
bucket, in any space). See docs/data.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q; want create, list, drop or count", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSpaceCreateCmd(), newSpaceListCmd(), newSpaceDropCmd(), newSpaceCountCmd())
	return cmd
}

type spaceCreateOptions struct {
	clusterFlags
	fields      []string
	primary     string
	sharding    string
	ifNotExists bool
}

func newSpaceCreateCmd() *cobra.Command {
	var o spaceCreateOptions
	cmd := &cobra.Command{
		Use:   "create [flags] NAME --field NAME:TYPE[?] ... --primary F[,F...]",
		Short: "Create a space",
		Long: `Create a space. Each --field declares a field, in tuple order, as name:type,
or name:type? for a field that may be null (or missing at the end of a
tuple); the types are unsigned, integer, double, string, boolean, bytes,
uuid. --primary names the primary key's fields in key order (not
nullable). --sharding-key names the fields that choose a tuple's bucket, in hash
order: primary-key fields in any position (default: all of them). With --if-not-exists, a
space of the same definition is no error.

  shardkit space create offers --field shop:unsigned --field offer:string \
      --field price:double? --primary shop,offer --sharding-key shop
  shardkit space create queue --field stage:string --field due_at:unsigned \
      --field entity_id:string --primary stage,due_at,entity_id --sharding-key entity_id`,
		RunE: func(cmd *cobra.Command, args []string) error {
			def, err := parseSpaceDef(args[0], o.fields, o.primary, o.sharding)
			if err != nil {
				return usageError(fmt.Errorf("space %s: %w", args[0], err))
			}
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			got, err := cl.CreateSpace(ctx, def, o.ifNotExists)
			if err != nil {
				return dataError("create space "+def.Name, o.timeout, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "space %s: id %d, schema version %d\n", got.Name, got.ID, got.SchemaVersion)
			return err
		},
	}
	asDataCommand(cmd, "NAME")
	f := cmd.Flags()
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.StringArrayVar(&o.fields, "field", nil, "a field as name:type or name:type? (repeat it, or separate fields with commas)")
	f.StringVar(&o.primary, "primary", "", "the primary key's fields, comma-separated, in key order")
	f.StringVar(&o.sharding, "sharding-key", "", "the sharding key's fields, in hash order: primary-key fields in any position (default: all of them)")
	f.BoolVar(&o.ifNotExists, "if-not-exists", false, "succeed if a space of the same definition exists")
	return cmd
}

type spaceListOptions struct {
	clusterFlags
	format string
}

// spaceJSON is a space as `space list --format json` prints it. The names
// are stable: fields may be added, never renamed.
type spaceJSON struct {
	Name          string      `json:"name"`
	ID            uint32      `json:"id"`
	Fields        []fieldJSON `json:"fields"`
	PrimaryKey    []string    `json:"primary_key"`
	ShardingKey   []string    `json:"sharding_key"`
	SchemaVersion uint64      `json:"schema_version"`
}

type fieldJSON struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

func toSpaceJSON(d client.SpaceDef) spaceJSON {
	s := spaceJSON{Name: d.Name, ID: d.ID, SchemaVersion: d.SchemaVersion, Fields: []fieldJSON{},
		PrimaryKey: append([]string{}, d.PrimaryKey...), ShardingKey: d.ShardingFields()}
	for _, f := range d.Format {
		s.Fields = append(s.Fields, fieldJSON{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	return s
}

func newSpaceListCmd() *cobra.Command {
	var o spaceListOptions
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List the spaces",
		Long: `List the spaces, by id: their fields, primary and sharding keys. --format
json prints a JSON array of {"name","id","fields":[{"name","type","nullable"}],
"primary_key","sharding_key","schema_version"}.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.format != "table" && o.format != "json" {
				return usagef("invalid --format %q: want table or json", o.format)
			}
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			defs, err := cl.Spaces(ctx)
			if err != nil {
				return dataError("list spaces", o.timeout, err)
			}
			if o.format == "json" {
				return writeSpacesJSON(cmd.OutOrStdout(), defs)
			}
			return writeSpacesTable(cmd.OutOrStdout(), defs)
		},
	}
	asDataCommand(cmd)
	f := cmd.Flags()
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.StringVar(&o.format, "format", "table", "table or json")
	return cmd
}

func writeSpacesJSON(out io.Writer, defs []client.SpaceDef) error {
	list := make([]spaceJSON, 0, len(defs))
	for _, d := range defs {
		list = append(list, toSpaceJSON(d))
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(list)
}

func writeSpacesTable(out io.Writer, defs []client.SpaceDef) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tFIELDS\tPRIMARY KEY\tSHARDING KEY")
	for _, d := range defs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", d.Name, d.ID, strings.ReplaceAll(formatString(d.Format), ", ", ","),
			strings.Join(d.PrimaryKey, ","), strings.Join(d.ShardingFields(), ","))
	}
	return tw.Flush()
}

type spaceDropOptions struct {
	clusterFlags
	force bool
}

func newSpaceDropCmd() *cobra.Command {
	var o spaceDropOptions
	cmd := &cobra.Command{
		Use:   "drop [flags] NAME",
		Short: "Drop a space; refused while it holds tuples unless --force",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			n, err := cl.DropSpace(ctx, args[0], o.force)
			if err != nil {
				return dataError("drop space "+args[0], o.timeout, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "space %s dropped (it held %s)\n", args[0], count(n, "tuple"))
			return err
		},
	}
	asDataCommand(cmd, "NAME")
	f := cmd.Flags()
	o.register(f, dataTimeout, dataTimeoutHelp)
	f.BoolVar(&o.force, "force", false, "drop the space with its tuples")
	return cmd
}

func newSpaceCountCmd() *cobra.Command {
	var o clusterFlags
	cmd := &cobra.Command{
		Use:   "count [flags] NAME",
		Short: "Print the number of tuples of a space in the cluster",
		Long: `Print the number of tuples of a space in the cluster (the built-in
count_buckets procedure on every replicaset's leader, each bucket counted
once, also while buckets move). The last line printed is the number.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := o.dataClient(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := lookupSpace(ctx, cl, o.timeout, args[0]); err != nil {
				return prefixExit("count of "+args[0], err)
			}
			n, err := cl.Count(ctx, args[0])
			if err != nil {
				return dataError("count of "+args[0], o.timeout, err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
			return err
		},
	}
	asDataCommand(cmd, "NAME")
	o.register(cmd.Flags(), dataTimeout, dataTimeoutHelp)
	return cmd
}

package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// parseSpaceDef turns the flags of `space create` into a space definition:
// the fields of --field (each name:type or name:type?, the flag repeated
// or its values comma-separated), the primary key's fields named by
// --primary, and the sharding key's by --sharding-key: primary-key fields
// in any position, in the order they are hashed (empty: the whole primary
// key). The space's name is the cluster's to check. Every refusal names
// the flag.
func parseSpaceDef(name string, fields []string, primary, sharding string) (client.SpaceDef, error) {
	d := client.SpaceDef{Name: name}
	for _, spec := range splitList(fields) {
		if spec == "" {
			return d, fmt.Errorf("--field: an empty field spec; write name:type or name:type?, e.g. price:double")
		}
		f, err := tuple.ParseField(spec)
		if err != nil {
			return d, fmt.Errorf("--field: %w", err)
		}
		d.Format = append(d.Format, f)
	}
	if len(d.Format) == 0 {
		return d, fmt.Errorf("--field is required: declare each field as name:type or name:type? (types: unsigned, integer, double, string, boolean, bytes, uuid)")
	}
	if err := d.Format.Validate(); err != nil {
		return d, fmt.Errorf("--field: %w", err)
	}
	if strings.TrimSpace(primary) == "" {
		return d, fmt.Errorf("--primary is required: name the primary key's fields in key order, e.g. --primary %s", d.Format[0].Name)
	}
	pk, err := keyFields("--primary", primary, d.Format)
	if err != nil {
		return d, err
	}
	for _, name := range pk {
		if i, _ := d.Format.Index(name); d.Format[i].Nullable {
			return d, fmt.Errorf("--primary: field %s is nullable (%s); primary key fields cannot be", name, d.Format[i])
		}
	}
	if len(pk) > tuple.MaxKeyParts {
		return d, fmt.Errorf("--primary: a key of %d fields is longer than %d", len(pk), tuple.MaxKeyParts)
	}
	d.PrimaryKey = pk
	if strings.TrimSpace(sharding) == "" {
		return d, nil // the whole primary key
	}
	sk, err := keyFields("--sharding-key", sharding, d.Format)
	if err != nil {
		return d, err
	}
	for _, name := range sk {
		if !slices.Contains(pk, name) {
			return d, fmt.Errorf("--sharding-key: field %s is not in --primary %s; the sharding key is made of primary-key fields (e.g. --sharding-key %s)",
				name, strings.Join(pk, ","), pk[len(pk)-1])
		}
	}
	d.ShardingKey = sk
	return d, nil
}

// keyFields parses a comma-separated list of distinct field names of f.
func keyFields(flag, list string, f tuple.Format) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("%s %q: an empty field name; write the names separated by commas, e.g. %s", flag, list, f[0].Name)
		}
		if _, ok := f.Index(name); !ok {
			return nil, fmt.Errorf("%s: no field %q; the fields are %s", flag, name, fieldNames(f))
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("%s: field %s is named twice", flag, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// splitList splits each value of a repeatable flag at commas.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			out = append(out, strings.TrimSpace(part))
		}
	}
	return out
}

func fieldNames(f tuple.Format) string {
	names := make([]string, len(f))
	for i, fd := range f {
		names[i] = fd.Name
	}
	return strings.Join(names, ", ")
}

package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxConfigFileBytes bounds the --config file.
const maxConfigFileBytes = 1 << 20

// fileValue is one key of the config file: its raw value(s) and line.
type fileValue struct {
	vals []string
	line int
}

type fileValues map[string]fileValue

// parseConfigYAML reads the --config file: one YAML mapping whose keys are
// `shardkit run` flag names. Values are scalars; peer may also be a
// sequence and failure-domain a mapping. Unknown and repeated keys are
// refused; a null value leaves the setting unset.
func parseConfigYAML(name string, data []byte) (fileValues, error) {
	if len(data) > maxConfigFileBytes {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", name, maxConfigFileBytes)
	}
	known := map[string]runSetting{}
	var keys []string
	for _, s := range runSettings() {
		known[s.name] = s
		keys = append(keys, s.name)
	}
	slices.Sort(keys)

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return fileValues{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("config file %s: %s", name, oneLine(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config file %s: want exactly one YAML document", name)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return fileValues{}, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return fileValues{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config file %s line %d: want a mapping of flag names to values", name, root.Line)
	}

	out := fileValues{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolveAlias(root.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("config file %s line %d: keys must be flag names", name, k.Line)
		}
		key := k.Value
		s, ok := known[key]
		if !ok {
			return nil, fmt.Errorf("config file %s line %d: unknown key %q; known keys: %s", name, k.Line, key, strings.Join(keys, ", "))
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("config file %s line %d: key %q given twice", name, k.Line, key)
		}
		if v == nil {
			return nil, fmt.Errorf("config file %s line %d: %s: bad alias", name, k.Line, key)
		}
		vals, err := nodeValues(s, v)
		if err != nil {
			return nil, fmt.Errorf("config file %s line %d: %s: %w", name, v.Line, key, err)
		}
		if vals == nil {
			continue // null: unset
		}
		out[key] = fileValue{vals: vals, line: k.Line}
	}
	return out, nil
}

// nodeValues turns a value node into raw setting values; nil for null.
func nodeValues(s runSetting, v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if isNull(v) {
			return nil, nil
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		if !s.repeatable {
			return nil, errors.New("takes one value, not a list")
		}
		vals := []string{}
		for _, e := range v.Content {
			e = resolveAlias(e)
			if e == nil || e.Kind != yaml.ScalarNode || isNull(e) {
				return nil, errors.New("list items must be plain values")
			}
			vals = append(vals, e.Value)
		}
		if len(vals) == 0 {
			return nil, errors.New("empty list")
		}
		return vals, nil
	case yaml.MappingNode:
		if s.name != "failure-domain" {
			return nil, errors.New("takes a plain value, not a mapping")
		}
		vals := []string{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := resolveAlias(v.Content[i]), resolveAlias(v.Content[i+1])
			if k == nil || val == nil || k.Kind != yaml.ScalarNode || val.Kind != yaml.ScalarNode || isNull(val) {
				return nil, errors.New("want a mapping of names to plain values")
			}
			// The pair is checked by the failure-domain parser; a key or
			// value holding ',' or '=' fails there.
			vals = append(vals, k.Value+"="+val.Value)
		}
		if len(vals) == 0 {
			return nil, errors.New("empty mapping")
		}
		return vals, nil
	}
	return nil, errors.New("unsupported value")
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// resolveAlias follows aliases (a bounded number of hops).
func resolveAlias(n *yaml.Node) *yaml.Node {
	for range 16 {
		if n == nil || n.Kind != yaml.AliasNode {
			return n
		}
		n = n.Alias
	}
	return nil
}

// oneLine joins a multi-line message into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r", ""))
	return strings.ReplaceAll(s, "\n", "; ")
}

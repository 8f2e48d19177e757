package cli

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// writeProtoJSONLine prints a message of the API as one JSON line, as the
// commands' --format json does: every field, zero or not, under its proto
// name, in field number order (encoding/json on the generated structs
// drops zero fields, and cannot write +Inf; protojson writes 64-bit
// integers as strings). Numbers are JSON numbers, a double that is NaN or
// infinite is the string "NaN", "Infinity" or "-Infinity", a message not
// set is written with its zero fields, a list is [] when empty, an enum is
// its name, bytes are base64. Of a oneof only the field set is written.
func writeProtoJSONLine(w io.Writer, m proto.Message) error {
	b := appendProtoJSON(nil, m.ProtoReflect())
	_, err := w.Write(append(b, '\n'))
	return err
}

func appendProtoJSON(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, string(fd.Name()))
		b = append(b, ':')
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			b = append(b, '[')
			for j := range l.Len() {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendProtoValue(b, fd, l.Get(j))
			}
			b = append(b, ']')
		case fd.IsMap():
			b = appendProtoMap(b, fd, v.Map())
		default:
			b = appendProtoValue(b, fd, v)
		}
	}
	return append(b, '}')
}

// appendProtoMap writes a map as an object, its keys in sorted order.
func appendProtoMap(b []byte, fd protoreflect.FieldDescriptor, m protoreflect.Map) []byte {
	keys := make([]string, 0, m.Len())
	vals := map[string]protoreflect.Value{}
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		s := k.String()
		keys = append(keys, s)
		vals[s] = v
		return true
	})
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendProtoValue(b, fd.MapValue(), vals[k])
	}
	return append(b, '}')
}

func appendProtoValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		switch {
		case math.IsNaN(f):
			return append(b, `"NaN"`...)
		case math.IsInf(f, 1):
			return append(b, `"Infinity"`...)
		case math.IsInf(f, -1):
			return append(b, `"-Infinity"`...)
		}
		n, _ := json.Marshal(f) // finite: as encoding/json writes it
		return append(b, n...)
	case protoreflect.StringKind:
		return appendJSONString(b, v.String())
	case protoreflect.BytesKind:
		return appendJSONString(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendJSONString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProtoJSON(b, v.Message())
	}
	return append(b, "null"...)
}

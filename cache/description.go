package cache

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
)

// Description is what a service tells the template about itself (SPEC C2):
// K is its key (may be large: a whole hit), ID the entry id unique within a
// request, V the value; Req and Resp are its generated request and response
// message pointer types.
type Description[K any, ID comparable, V any, Req, Resp proto.Message] struct {
	// Method is the full gRPC method name, "/package.Service/Method".
	Method string
	// ShardingKey returns the key's position in the uint64 space.
	ShardingKey func(K) uint64
	// EntryID returns the key's id; keys with equal ids are asked once.
	EntryID func(K) ID
	// Serialize fills req with keys (none: a ping).
	Serialize func(keys []K, req Req) error
	// Deserialize puts the answer's values into values and returns the
	// server's shard and whether it matched all keys (false: some key is
	// outside its shard; the client does not retry that host).
	Deserialize func(resp Resp, values map[ID]V) (shard Shard, allMatched bool, err error)
}

func (d *Description[K, ID, V, Req, Resp]) validate() error {
	var missing []string
	if !strings.HasPrefix(d.Method, "/") || strings.Count(d.Method, "/") != 2 {
		return fmt.Errorf("%w: Description.Method %q: want the full gRPC name \"/package.Service/Method\"", ErrInvalid, d.Method)
	}
	if d.ShardingKey == nil {
		missing = append(missing, "ShardingKey")
	}
	if d.EntryID == nil {
		missing = append(missing, "EntryID")
	}
	if d.Serialize == nil {
		missing = append(missing, "Serialize")
	}
	if d.Deserialize == nil {
		missing = append(missing, "Deserialize")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: Description lacks %s", ErrInvalid, strings.Join(missing, ", "))
	}
	return nil
}

// newMessage returns a new empty message of M's type (a generated pointer
// type; the zero value of M is a typed nil whose reflection knows the type).
func newMessage[M proto.Message]() M {
	var zero M
	return zero.ProtoReflect().Type().New().Interface().(M)
}

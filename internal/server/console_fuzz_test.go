package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FuzzDecodeBody: any body is either refused with InvalidArgument naming
// what was wrong, or decoded into a value that encodes and decodes back to
// itself; nothing panics, and a body over maxBody is never accepted.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"weight": 0}`, `{"locked": true}`, `{"to": "r2"}`, `{"pinned": false}`, `{"force": true, "lose_buckets": true}`,
		`{"step": "plan"}`, `{}`, ``, `[]`, `{"weight": -1}`, `{"weight": 1} {}`, `{"to": "\ud800"}`, `{"weight": 1e3}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&expelBody{}, &weightBody{}, &lockBody{}, &moveBody{}, &pinBody{}, &reshardBody{}} {
			err := decodeBody(bytes.NewReader(body), v)
			if err != nil {
				if st, ok := status.FromError(err); !ok || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "request body") {
					t.Fatalf("%T from %q: refused with %v", v, body, err)
				}
				continue
			}
			if len(body) > maxBody+1 {
				t.Fatalf("%T: a body of %d bytes was accepted", v, len(body))
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := decodeBody(bytes.NewReader(b), again); err != nil || !reflect.DeepEqual(v, again) {
				t.Fatalf("%T from %q: %+v re-encoded as %s decodes to %+v, %v", v, body, v, b, again, err)
			}
		}
	})
}

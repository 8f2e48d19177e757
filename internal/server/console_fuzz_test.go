package server

import (
	"bytes"
	"encoding/json"
	"net/url"
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

// FuzzParseLoginForm: any login body is refused with a message that never
// holds the password sent, or gives one user, password and token that
// pass the form's own checks; nothing panics.
func FuzzParseLoginForm(f *testing.F) {
	f.Add("application/x-www-form-urlencoded", "user=rita&password=secret+1&token=abc")
	f.Add("application/x-www-form-urlencoded; charset=utf-8", "user=rita&user=ada&password=x")
	f.Add("text/plain", "user=rita&password=x")
	f.Add("application/x-www-form-urlencoded", "user=a%20b&password=%ff%fe&token=")
	f.Add("application/x-www-form-urlencoded", "password=hunter22&x=1")
	f.Fuzz(func(t *testing.T, contentType, body string) {
		form, err := parseLoginForm(contentType, strings.NewReader(body))
		if err != nil {
			if pw := passwordIn(body); len(pw) >= 4 && strings.Contains(err.Error(), pw) {
				t.Fatalf("the refusal %q holds the password %q", err, pw)
			}
			return
		}
		if form.User == "" || form.Password == "" || len(form.Password) > 256 || len(body) > maxLoginBody {
			t.Fatalf("accepted %+v from %q", form, body)
		}
	})
}

// passwordIn is the password field of a form body ("" when none parses).
func passwordIn(body string) string {
	vals, err := url.ParseQuery(body)
	if err != nil {
		return ""
	}
	return vals.Get("password")
}

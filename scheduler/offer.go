package scheduler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// Sentinel errors. Stores and the Runner wrap them with details; test with
// errors.Is.
var (
	// ErrConflict: the offer (or the stage's state) changed since it was
	// read; read it again and run the stage again.
	ErrConflict = errors.New("scheduler: version conflict")
	// ErrFenced: the write carried a shard lease that is no longer the
	// shard's current one (another runner claimed it, or it was released);
	// nothing was written.
	ErrFenced = errors.New("scheduler: shard lease lost")
	// ErrNotFound: no such offer (or queue entry, or dead letter).
	ErrNotFound = errors.New("scheduler: not found")
	// ErrInvalid: a bad argument or a malformed answer of a stage.
	ErrInvalid = errors.New("scheduler: invalid")
)

// Offer is the entity stages work on. Its Body is a JSON object: the
// scheduler reads its top-level fields to apply patches and to tell stages
// which fields changed (field interest); it never interprets their values.
// A protobuf offer is stored as its protojson form.
type Offer struct {
	ID string
	// Version grows by one on every change of the body; 0 for an offer
	// that does not exist.
	Version int64
	Body    []byte
	// Chain is how many stage-made changes followed each other since the
	// last outside write, timer or rescan (the loop guard's measure).
	Chain int
}

// State is one stage's private state of one offer: any protobuf message,
// packed. Version grows on every write; 0 when the stage has none yet.
type State struct {
	Value   *anypb.Any
	Version int64
}

// Patch sets top-level fields of an offer's body (a nil value deletes the
// field). A stage may patch only the fields it declares as its own
// (StageConfig.OwnFields); a patch is applied to the offer's current body
// without the version check.
type Patch map[string]json.RawMessage

// Fields returns the patch's field names, sorted.
func (p Patch) Fields() []string {
	out := make([]string, 0, len(p))
	for f := range p {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// MaxIDLen bounds an offer id and a stage id, in bytes.
const MaxIDLen = 256

// ValidateID refuses an empty, overlong or non-UTF-8 offer or stage id.
func ValidateID(kind, id string) error {
	if id == "" || len(id) > MaxIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s id %q must be 1..%d bytes of UTF-8", ErrInvalid, kind, id, MaxIDLen)
	}
	return nil
}

// ShardOf is the shard of an offer: xxhash64(offer id) mod shards (S10).
// Every store and runner of one deployment must agree on it.
func ShardOf(offerID string, shards int) int {
	return int(xxhash.Sum64String(offerID) % uint64(shards)) //nolint:gosec // shards > 0 and fits an int
}

// fields decodes a body's top-level fields. An empty body is an empty
// object.
func fields(body []byte) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) == 0 {
		return m, nil
	}
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: an offer's body is not UTF-8 (JSON text is)", ErrInvalid)
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: an offer's body must be a JSON object: %w", ErrInvalid, err)
	}
	if m == nil { // the body was JSON null
		return nil, fmt.Errorf("%w: an offer's body must be a JSON object, not null", ErrInvalid)
	}
	return m, nil
}

// CheckBody refuses a body that is not a JSON object.
func CheckBody(body []byte) error {
	_, err := fields(body)
	return err
}

// ApplyPatch returns body with p applied. The result's fields are in sorted
// order (encoding/json's map order).
func ApplyPatch(body []byte, p Patch) ([]byte, error) {
	m, err := fields(body)
	if err != nil {
		return nil, err
	}
	for f, v := range p {
		if v == nil {
			delete(m, f)
			continue
		}
		if !json.Valid(v) || !utf8.Valid(v) {
			return nil, fmt.Errorf("%w: patch of field %q: value is not JSON in UTF-8", ErrInvalid, f)
		}
		m[f] = v
	}
	// Without HTML escaping: a value is kept as it was written ("&" stays
	// "&", not "\u0026"), so that ChangedFields sees no change in it.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("%w: patch: %w", ErrInvalid, err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// ChangedFields lists the top-level fields whose values differ between two
// bodies (compared as compact JSON), sorted. Both must be JSON objects.
func ChangedFields(before, after []byte) ([]string, error) {
	a, err := fields(before)
	if err != nil {
		return nil, err
	}
	b, err := fields(after)
	if err != nil {
		return nil, err
	}
	var out []string
	for f, v := range a {
		w, ok := b[f]
		if !ok || !sameJSON(v, w) {
			out = append(out, f)
		}
	}
	for f := range b {
		if _, ok := a[f]; !ok {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out, nil
}

func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// MergeFields is the union of two changed-field lists, where nil means
// "every field" (an offer's creation, or a change whose fields are
// unknown). The result is sorted.
func MergeFields(a, b []string) []string {
	if a == nil || b == nil {
		return nil
	}
	out := append(slices.Clone(a), b...)
	sort.Strings(out)
	return slices.Compact(out)
}

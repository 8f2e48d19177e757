package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":1,"bucket_count":3,"files":[{"name":"a.data","size":9,"sha256":"` + string(bytes.Repeat([]byte("0"), 64)) + `","records":1,"buckets":[1,2]}]}`))
	f.Add([]byte(`{"format":1,"bucket_count":1,"spaces":[{"name":"s"}],"replicasets":[{"id":"rs1","weight":1}]}`))
	f.Add([]byte(`{}`))
	sha := string(bytes.Repeat([]byte("a"), 64))
	f.Add([]byte(`{"format":2,"kind":"full","bucket_count":2,"files":[{"name":"a.data","size":9,"sha256":"` + sha + `","records":1,"buckets":[1,2],"revisions":[4,0]}]}`))
	f.Add([]byte(`{"format":2,"kind":"incremental","base":{"dir":"../full","manifest_sha256":"` + sha + `"},"bucket_count":2,` +
		`"files":[{"name":"a.data","size":9,"sha256":"` + sha + `","records":2,"buckets":[1,2],"revisions":[4,9],"changes":[2]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		// What parses writes back to what parses the same.
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(out)
		if err != nil {
			t.Fatalf("a parsed manifest written back does not parse: %v", err)
		}
		if len(m2.Files) != len(m.Files) || m2.BucketCount != m.BucketCount || m2.Kind != m.Kind || m2.Incremental() != m.Incremental() ||
			(m.Base != nil && *m2.Base != *m.Base) {
			t.Fatalf("round trip changed the manifest: %+v -> %+v", m, m2)
		}
		for i, f := range m.Files {
			if !slices.Equal(f.Revisions, m2.Files[i].Revisions) || !slices.Equal(f.Changes, m2.Files[i].Changes) {
				t.Fatalf("round trip changed file %d: %+v -> %+v", i, f, m2.Files[i])
			}
		}
	})
}

func FuzzRecordReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewRecordWriter(&buf)
	_ = w.Write(chunk(1, false, "a"))
	_ = w.Write(chunk(1, true, "b", "c"))
	_ = w.Write(&rspb.CopyChunk{Bucket: 2, Changes: true, Last: true, Revision: 3, Tuples: chunk(2, false, "d").GetTuples(),
		Deleted: []*rspb.TupleKey{{SpaceId: 512, Key: []byte("e")}}})
	_ = w.Flush()
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:20])
	f.Add(fileMagic)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewRecordReader(bytes.NewReader(data))
		for range 1 << 16 {
			c, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errorsIsDamaged(err) {
					t.Fatalf("an error that is not ErrDamaged: %v", err)
				}
				return
			}
			// A record read is one the writer writes the same.
			var out bytes.Buffer
			rw, _ := NewRecordWriter(&out)
			if err := rw.Write(c); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func errorsIsDamaged(err error) bool { return errors.Is(err, ErrDamaged) }

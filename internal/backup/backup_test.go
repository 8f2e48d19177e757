package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

func chunk(b uint32, last bool, keys ...string) *rspb.CopyChunk {
	c := &rspb.CopyChunk{Bucket: b, Last: last}
	for _, k := range keys {
		c.Tuples = append(c.Tuples, &rspb.CopiedTuple{SpaceId: 512, Key: []byte(k), Version: 1, Tuple: []byte("t" + k)})
	}
	if last {
		c.Revision = 7
	}
	return c
}

func TestRecordsRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewRecordWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	in := []*rspb.CopyChunk{chunk(1, false, "a", "b"), chunk(1, true, "c"), chunk(2, true)}
	for _, c := range in {
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != int64(buf.Len()) || w.Records() != 3 {
		t.Fatalf("size %d records %d; wrote %d bytes", w.Size(), w.Records(), buf.Len())
	}
	r := NewRecordReader(bytes.NewReader(buf.Bytes()))
	for i, want := range in {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("record %d: %v, want %v", i, got, want)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last record: %v, want EOF", err)
	}
}

func TestRecordReaderRefusesDamage(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewRecordWriter(&buf)
	_ = w.Write(chunk(1, true, "a", "b"))
	_ = w.Flush()
	good := buf.Bytes()
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"cut in the payload": {good[:len(good)-3], "cut short"},
		"cut in the header":  {good[:len(fileMagic)+5], "cut short after 5 bytes"},
		"flipped byte":       {flip(good, len(good)-2), "CRC32C"},
		"not a backup file":  {[]byte("hello, world"), "does not begin"},
		"huge length":        {append(bytes.Clone(fileMagic), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0), "at most"},
	} {
		_, err := NewRecordReader(bytes.NewReader(tc.data)).Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x40
	return b
}

// writeBackup writes a backup of 4 buckets in two files into a new
// directory.
func writeBackup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	m := &Manifest{Format: FormatVersion, Kind: KindFull, Created: time.Unix(1700000000, 0).UTC(), BucketCount: 4}
	for i, bs := range [][]uint32{{1, 2}, {3, 4}} {
		fw, err := CreateFile(dir, []string{"rs1-0.data", "rs2-0.data"}[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if err := fw.Write(chunk(b, false, "x", "y")); err != nil {
				t.Fatal(err)
			}
			if err := fw.Write(chunk(b, true, "z")); err != nil {
				t.Fatal(err)
			}
		}
		e, err := fw.Close()
		if err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, e)
	}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestManifestRoundTrip(t *testing.T) {
	dir := writeBackup(t)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 || m.Files[1].Records != 4 || m.Files[0].Rows[512] != 6 || len(m.Files[1].Buckets) != 2 {
		t.Fatalf("read back %+v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("the temporary manifest is left: %v", err)
	}
	r, err := Verify(dir)
	if err != nil || len(r.Problems) > 0 {
		t.Fatalf("a sound backup: %v, %q", err, r.Problems)
	}
	n := 0
	if err := Each(dir, m, func(string, *rspb.CopyChunk) error { n++; return nil }); err != nil || n != 8 {
		t.Fatalf("Each: %d chunks, %v", n, err)
	}
}

func TestVerifyNamesDamage(t *testing.T) {
	for name, tc := range map[string]struct {
		damage func(dir string) error
		want   []string
	}{
		"truncated": {func(dir string) error {
			p := filepath.Join(dir, "rs2-0.data")
			st, _ := os.Stat(p)
			return os.Truncate(p, st.Size()-10)
		}, []string{"rs2-0.data: ", "truncated", "cut short", "buckets are in no file"}},
		"flipped byte": {func(dir string) error {
			p := filepath.Join(dir, "rs1-0.data")
			b, _ := os.ReadFile(p)
			return os.WriteFile(p, flip(b, 30), 0o644)
		}, []string{"rs1-0.data: ", "CRC32C", "damaged"}},
		"missing file": {func(dir string) error {
			return os.Remove(filepath.Join(dir, "rs1-0.data"))
		}, []string{"rs1-0.data: missing", "2 of 4 buckets are in no file (the first: 1)"}},
	} {
		dir := writeBackup(t)
		if err := tc.damage(dir); err != nil {
			t.Fatal(err)
		}
		r, err := Verify(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		all := strings.Join(r.Problems, "\n")
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: the problems %q do not say %q", name, r.Problems, w)
			}
		}
	}
}

func TestVerifyNamesIncomplete(t *testing.T) {
	dir := writeBackup(t)
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err == nil || !strings.Contains(err.Error(), "incomplete backup") {
		t.Fatalf("no manifest: %v", err)
	}
}

func TestVerifyNamesBucketHeldInPart(t *testing.T) {
	dir := t.TempDir()
	fw, err := CreateFile(dir, "a.data")
	if err != nil {
		t.Fatal(err)
	}
	_ = fw.Write(chunk(1, true))
	_ = fw.Write(chunk(2, false, "k"))
	if _, err := fw.Close(); err == nil || !strings.Contains(err.Error(), "part of 1 buckets") {
		t.Fatalf("a file with half a bucket closed: %v", err)
	}
}

func TestParseManifestRefuses(t *testing.T) {
	sha := strings.Repeat("a", 64)
	for name, tc := range map[string]struct{ json, want string }{
		"not json":       {`{`, "not valid JSON"},
		"format":         {`{"format":3,"bucket_count":1}`, "format is 3"},
		"no kind":        {`{"format":2,"bucket_count":1}`, `kind is ""`},
		"kind in 1":      {`{"format":1,"kind":"full","bucket_count":1}`, "has a kind or a base"},
		"no base":        {`{"format":2,"kind":"incremental","bucket_count":1}`, "names no base"},
		"base sha":       {`{"format":2,"kind":"incremental","base":{"dir":"../a","manifest_sha256":"x"},"bucket_count":1}`, "names no base"},
		"full with base": {`{"format":2,"kind":"full","base":{"dir":"../a","manifest_sha256":"` + sha + `"},"bucket_count":1}`, "full backup and names a base"},
		"revisions":      {`{"format":2,"kind":"full","bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[1,2],"revisions":[3]}]}`, "1 revisions for 2 buckets"},
		"revisions in 1": {`{"format":1,"bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[1],"revisions":[3]}]}`, "which format 1 does not"},
		"changes full":   {`{"format":2,"kind":"full","bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[1],"revisions":[3],"changes":[1]}]}`, "change sets in a full backup"},
		"changes other":  {`{"format":2,"kind":"incremental","base":{"dir":"a","manifest_sha256":"` + sha + `"},"bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[1],"revisions":[3],"changes":[2]}]}`, "bucket 2 a change set, and not among its buckets"},
		"no buckets":     {`{"format":1}`, "bucket_count is 0"},
		"unknown field":  {`{"format":1,"bucket_count":1,"extra":1}`, "unknown field"},
		"path":           {`{"format":1,"bucket_count":1,"files":[{"name":"../x","size":8,"sha256":"` + sha + `"}]}`, `name "../x"`},
		"sha":            {`{"format":1,"bucket_count":1,"files":[{"name":"x","size":8,"sha256":"zz"}]}`, `sha256 "zz"`},
		"bucket range":   {`{"format":1,"bucket_count":1,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[2]}]}`, "bucket 2, outside 1..1"},
		"bucket twice":   {`{"format":1,"bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `","buckets":[1]},{"name":"y","size":8,"sha256":"` + sha + `","buckets":[1]}]}`, "bucket 1 in both"},
		"file twice":     {`{"format":1,"bucket_count":2,"files":[{"name":"x","size":8,"sha256":"` + sha + `"},{"name":"x","size":8,"sha256":"` + sha + `"}]}`, `file "x" twice`},
		"trailing data":  {`{"format":1,"bucket_count":1} {}`, "after its object"},
		"manifest named": {`{"format":1,"bucket_count":1,"files":[{"name":"manifest.json","size":8,"sha256":"` + sha + `"}]}`, "not manifest.json"},
	} {
		if _, err := ParseManifest([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

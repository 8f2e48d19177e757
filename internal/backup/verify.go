package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Report is what Verify found: a backup is sound when Problems is empty.
type Report struct {
	Manifest *Manifest
	// Problems names each missing or damaged file and each bucket missing
	// or held twice.
	Problems []string
}

// Verify checks the backup in dir: the manifest; every file's size and
// SHA-256; every record's CRC; that each file holds the buckets its entry
// names, each whole (a last chunk) or as the change set it names, with
// its revision, and the records it counts; and that every bucket
// 1..bucket_count appears exactly once. Of an incremental backup it
// checks its chain (Chain) and each base's files as well, each problem
// naming the base. A directory without a manifest is an error (an
// incomplete backup); any other problem is in the report.
func Verify(dir string) (*Report, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	r := &Report{Manifest: m, Problems: verifyFiles(dir, m)}
	if !m.Incremental() {
		return r, nil
	}
	chain, err := Chain(dir, m)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r, nil
	}
	for _, l := range chain[:len(chain)-1] {
		for _, p := range verifyFiles(l.Dir, l.Manifest) {
			r.Problems = append(r.Problems, fmt.Sprintf("the base %s: %s", l.Dir, p))
		}
	}
	return r, nil
}

// verifyFiles checks the files of the backup in dir, whose manifest is m.
func verifyFiles(dir string, m *Manifest) []string {
	var probs []string
	seen := map[uint32]string{}
	for _, f := range m.Files {
		probs = append(probs, verifyFile(dir, f, seen)...)
	}
	missing := 0
	first := uint32(0)
	for b := uint32(1); b <= m.BucketCount; b++ {
		if _, ok := seen[b]; !ok {
			if missing == 0 {
				first = b
			}
			missing++
		}
	}
	if missing > 0 {
		probs = append(probs, fmt.Sprintf("%d of %d buckets are in no file (the first: %d)", missing, m.BucketCount, first))
	}
	return probs
}

func verifyFile(dir string, f FileEntry, seen map[uint32]string) []string {
	path := filepath.Join(dir, f.Name)
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return []string{fmt.Sprintf("%s: missing", f.Name)}
	}
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", f.Name, err)}
	}
	defer fh.Close()
	var probs []string
	if st, err := fh.Stat(); err == nil && st.Size() != f.Size {
		probs = append(probs, fmt.Sprintf("%s: %d bytes, the manifest says %d (truncated or grown)", f.Name, st.Size(), f.Size))
	}
	sum := sha256.New()
	rr := NewRecordReader(io.TeeReader(fh, sum))
	named := map[uint32]bool{}
	revision := map[uint32]uint64{}
	for i, b := range f.Buckets {
		named[b] = true
		if i < len(f.Revisions) {
			revision[b] = f.Revisions[i]
		}
	}
	kindSaid := map[uint32]bool{}
	whole := map[uint32]bool{}
	records := 0
	for {
		c, err := rr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", f.Name, err))
			// The sha256 of the whole file is still worth reporting.
			_, _ = io.Copy(sum, fh)
			break
		}
		records++
		b := c.GetBucket()
		switch {
		case !named[b]:
			probs = append(probs, fmt.Sprintf("%s: a record of bucket %d, which the manifest does not name for this file", f.Name, b))
			named[b] = true // said once
		case whole[b]:
			probs = append(probs, fmt.Sprintf("%s: a record of bucket %d after its last chunk", f.Name, b))
		case c.GetChanges() != f.changeSet(b) && !kindSaid[b]:
			probs = append(probs, fmt.Sprintf("%s: a record of bucket %d is a change set: %v, the manifest says %v", f.Name, b, c.GetChanges(), f.changeSet(b)))
			kindSaid[b] = true
		case !c.GetChanges() && len(c.GetDeleted()) > 0 && !kindSaid[b]:
			probs = append(probs, fmt.Sprintf("%s: a record of bucket %d names deleted keys and is not a change set", f.Name, b))
			kindSaid[b] = true
		}
		if c.GetLast() {
			whole[b] = true
			if want, ok := revision[b]; ok && c.GetRevision() != want {
				probs = append(probs, fmt.Sprintf("%s: bucket %d has revision %d, the manifest says %d", f.Name, b, c.GetRevision(), want))
			}
		}
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != f.SHA256 {
		probs = append(probs, fmt.Sprintf("%s: sha256 %s, the manifest says %s (damaged)", f.Name, got, f.SHA256))
	}
	if records != f.Records {
		probs = append(probs, fmt.Sprintf("%s: %d whole records, the manifest says %d", f.Name, records, f.Records))
	}
	for _, b := range f.Buckets {
		if other, dup := seen[b]; dup {
			probs = append(probs, fmt.Sprintf("%s: bucket %d is also in %s", f.Name, b, other))
			continue
		}
		if !whole[b] {
			probs = append(probs, fmt.Sprintf("%s: bucket %d has no last chunk (held in part)", f.Name, b))
			continue
		}
		seen[b] = f.Name
	}
	return probs
}

// Each calls fn with every chunk of the backup's files in order, checking
// each record's CRC (not the files' SHA-256: Verify does).
func Each(dir string, m *Manifest, fn func(file string, c *rspb.CopyChunk) error) error {
	for _, f := range m.Files {
		fh, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			return fmt.Errorf("backup: %s: %w", f.Name, err)
		}
		rr := NewRecordReader(fh)
		for {
			c, err := rr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fh.Close()
				return fmt.Errorf("backup: %s: %w", f.Name, err)
			}
			if err := fn(f.Name, c); err != nil {
				fh.Close()
				return err
			}
		}
		fh.Close()
	}
	return nil
}

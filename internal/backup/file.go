package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// FileWriter writes one data file of a backup and its manifest entry.
type FileWriter struct {
	f       *os.File
	name    string
	sum     hash.Hash
	rw      *RecordWriter
	buckets []uint32
	open    map[uint32]bool // buckets with chunks written and no last one yet
	rows    map[uint32]uint64
	revs    map[uint32]uint64 // the buckets' revisions, from their last chunks
	changes []uint32          // the buckets written as change sets
}

// CreateFile creates dir/name (which must not exist).
func CreateFile(dir, name string) (*FileWriter, error) {
	if !fileName.MatchString(name) || name == ManifestName {
		return nil, fmt.Errorf("backup: %q is not a data file name", name)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	fw := &FileWriter{f: f, name: name, sum: sha256.New(), open: map[uint32]bool{}, rows: map[uint32]uint64{}, revs: map[uint32]uint64{}}
	if fw.rw, err = NewRecordWriter(io.MultiWriter(f, fw.sum)); err != nil {
		f.Close()
		return nil, err
	}
	return fw, nil
}

// Write appends a chunk of a bucket.
func (fw *FileWriter) Write(c *rspb.CopyChunk) error {
	if err := fw.rw.Write(c); err != nil {
		return err
	}
	for _, t := range c.GetTuples() {
		fw.rows[t.GetSpaceId()]++
	}
	fw.open[c.GetBucket()] = true
	if c.GetLast() {
		delete(fw.open, c.GetBucket())
		fw.buckets = append(fw.buckets, c.GetBucket())
		fw.revs[c.GetBucket()] = c.GetRevision()
		if c.GetChanges() {
			fw.changes = append(fw.changes, c.GetBucket())
		}
	}
	return nil
}

// Size is the bytes written so far.
func (fw *FileWriter) Size() int64 { return fw.rw.Size() }

// Close flushes and syncs the file and returns its manifest entry. A
// bucket with chunks and no last chunk is an error: the file would hold
// part of it.
func (fw *FileWriter) Close() (FileEntry, error) {
	err := fw.rw.Flush()
	if err == nil {
		err = fw.f.Sync()
	}
	if cerr := fw.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FileEntry{}, err
	}
	if len(fw.open) > 0 {
		return FileEntry{}, fmt.Errorf("backup: file %s holds part of %d buckets (no last chunk)", fw.name, len(fw.open))
	}
	slices.Sort(fw.buckets)
	slices.Sort(fw.changes)
	revs := make([]uint64, len(fw.buckets))
	for i, b := range fw.buckets {
		revs[i] = fw.revs[b]
	}
	return FileEntry{Name: fw.name, Size: fw.rw.Size(), SHA256: hex.EncodeToString(fw.sum.Sum(nil)),
		Records: fw.rw.Records(), Buckets: fw.buckets, Rows: fw.rows, Revisions: revs, Changes: fw.changes}, nil
}

// Abort closes and removes the file.
func (fw *FileWriter) Abort() {
	fw.f.Close()
	os.Remove(fw.f.Name())
}

package backup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// ManifestName is the manifest's file name in a backup directory.
const ManifestName = "manifest.json"

// FormatVersion is the manifest's format version this package writes.
// It reads it and FormatFull1, the format before incremental backups.
const FormatVersion = 2

// FormatFull1 is the first format: a full backup, with no kind, no base
// and no revisions per bucket.
const FormatFull1 = 1

// The kinds of backup a manifest of FormatVersion says it is.
const (
	// KindFull holds every bucket whole.
	KindFull = "full"
	// KindIncremental holds, per bucket, its changes since its base
	// backup (Manifest.Base), or the bucket whole where the changes
	// could not be told (FileEntry.Changes names the change sets).
	KindIncremental = "incremental"
)

// Manifest describes a complete backup. It is written last: a directory
// without one is an incomplete backup.
type Manifest struct {
	Format int `json:"format"`
	// Kind is KindFull or KindIncremental (empty in FormatFull1: full).
	Kind string `json:"kind,omitempty"`
	// Base is an incremental's base backup (nil for a full one).
	Base *BaseRef `json:"base,omitempty"`
	// Created is when the capture began: every write acknowledged before
	// it is in the backup.
	Created     time.Time `json:"created"`
	BucketCount uint32    `json:"bucket_count"`
	// SchemaVersion is group 0's schema version the spaces are of.
	SchemaVersion uint64 `json:"schema_version"`
	// Spaces are the cluster's spaces as the routing table gives them
	// (data.v1.Space in protojson): what restore creates.
	Spaces []json.RawMessage `json:"spaces"`
	// Replicasets are the source cluster's replicasets and weights, for
	// the record: a restore spreads the buckets by the new cluster's.
	Replicasets []ReplicasetWeight `json:"replicasets"`
	// Users are the cluster's users (the CNs of client certificates) and
	// their roles, root included, which every cluster has. A user's
	// console password is not in the backup: the cluster keeps only its
	// hash and gives it to no one; HasPassword says one must be set again.
	Users []User      `json:"users"`
	Files []FileEntry `json:"files"`
}

// BaseRef names the backup an incremental one holds the changes since.
type BaseRef struct {
	// Dir is the base's directory: as given when the incremental was
	// taken if absolute, else relative to the incremental's own
	// directory (so that backups kept side by side move together).
	Dir string `json:"dir"`
	// ManifestSHA256 is the SHA-256 of the base's manifest.json: a base
	// swapped for another backup (or retaken) is refused.
	ManifestSHA256 string `json:"manifest_sha256"`
}

// Incremental reports whether m is an incremental backup.
func (m *Manifest) Incremental() bool { return m.Kind == KindIncremental }

// User is one user of the source cluster.
type User struct {
	Name        string `json:"name"`
	Role        string `json:"role"`
	HasPassword bool   `json:"has_password,omitempty"`
}

// ReplicasetWeight is one replicaset of the source cluster.
type ReplicasetWeight struct {
	ID     string `json:"id"`
	Weight uint32 `json:"weight"`
}

// FileEntry is one data file.
type FileEntry struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Records int    `json:"records"`
	// Buckets are the buckets whose chunks the file holds, each whole
	// (its last chunk included).
	Buckets []uint32 `json:"buckets"`
	// Rows counts the file's tuples by space id.
	Rows map[uint32]uint64 `json:"rows"`
	// Revisions are the buckets' revisions at their capture, in the order
	// of Buckets (FormatVersion; none in FormatFull1): what an
	// incremental taken from this backup asks the changes since.
	Revisions []uint64 `json:"revisions,omitempty"`
	// Changes are the buckets of Buckets the file holds as their changes
	// since the base (CopyChunk.changes; an incremental's only); the
	// others it holds whole.
	Changes []uint32 `json:"changes,omitempty"`
}

// changeSet reports whether the file holds bucket b as a change set.
func (f *FileEntry) changeSet(b uint32) bool { return slices.Contains(f.Changes, b) }

var fileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseManifest decodes and checks a manifest: its format version, and
// that every file entry is a plain name in the directory with a SHA-256,
// that no bucket is outside 1..bucket_count, and no file or bucket is
// named twice. Buckets missing are Verify's to name.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("backup: the manifest is not valid JSON of the format: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("backup: the manifest has data after its object")
	}
	switch {
	case m.Format != FormatVersion && m.Format != FormatFull1:
		return nil, fmt.Errorf("backup: the manifest's format is %d; this shardkit reads %d and %d", m.Format, FormatFull1, FormatVersion)
	case m.Format == FormatFull1 && (m.Kind != "" || m.Base != nil):
		return nil, fmt.Errorf("backup: the manifest is of format %d (full backups only) and has a kind or a base", FormatFull1)
	case m.Format == FormatVersion && m.Kind != KindFull && m.Kind != KindIncremental:
		return nil, fmt.Errorf("backup: the manifest's kind is %q: want %q or %q", m.Kind, KindFull, KindIncremental)
	case m.Incremental() && (m.Base == nil || m.Base.Dir == "" || !sha256Hex.MatchString(m.Base.ManifestSHA256)):
		return nil, fmt.Errorf("backup: the manifest is of an incremental backup and names no base (a directory and its manifest's sha256 in 64 lowercase hex digits): %+v", m.Base)
	case !m.Incremental() && m.Base != nil:
		return nil, fmt.Errorf("backup: the manifest is of a full backup and names a base (%s)", m.Base.Dir)
	}
	if m.BucketCount == 0 {
		return nil, fmt.Errorf("backup: the manifest's bucket_count is 0")
	}
	files := map[string]bool{}
	buckets := map[uint32]string{}
	for i, f := range m.Files {
		switch {
		case !fileName.MatchString(f.Name) || f.Name == ManifestName:
			return nil, fmt.Errorf("backup: the manifest's file %d has the name %q: want a plain file name in the directory, not %s", i, f.Name, ManifestName)
		case files[f.Name]:
			return nil, fmt.Errorf("backup: the manifest names file %q twice", f.Name)
		case !sha256Hex.MatchString(f.SHA256):
			return nil, fmt.Errorf("backup: the manifest's file %q has sha256 %q: want 64 lowercase hex digits", f.Name, f.SHA256)
		case f.Size < int64(len(fileMagic)) || f.Records < 0:
			return nil, fmt.Errorf("backup: the manifest's file %q has size %d and %d records", f.Name, f.Size, f.Records)
		}
		files[f.Name] = true
		switch {
		case m.Format == FormatFull1 && (len(f.Revisions) > 0 || len(f.Changes) > 0):
			return nil, fmt.Errorf("backup: the manifest's file %q has revisions or changes, which format %d does not", f.Name, FormatFull1)
		case m.Format == FormatVersion && len(f.Revisions) != len(f.Buckets):
			return nil, fmt.Errorf("backup: the manifest's file %q has %d revisions for %d buckets", f.Name, len(f.Revisions), len(f.Buckets))
		case !m.Incremental() && len(f.Changes) > 0:
			return nil, fmt.Errorf("backup: the manifest's file %q names change sets in a full backup", f.Name)
		}
		held := map[uint32]bool{}
		for _, b := range f.Buckets {
			held[b] = true
		}
		for _, b := range f.Changes {
			if !held[b] {
				return nil, fmt.Errorf("backup: the manifest's file %q names bucket %d a change set, and not among its buckets (or twice)", f.Name, b)
			}
			delete(held, b)
		}
		for _, b := range f.Buckets {
			if b == 0 || b > m.BucketCount {
				return nil, fmt.Errorf("backup: the manifest's file %q names bucket %d, outside 1..%d", f.Name, b, m.BucketCount)
			}
			if other, dup := buckets[b]; dup {
				return nil, fmt.Errorf("backup: the manifest names bucket %d in both %q and %q", b, other, f.Name)
			}
			buckets[b] = f.Name
		}
	}
	return &m, nil
}

// ReadManifest reads dir's manifest; a directory without one is an
// incomplete backup, and the error says so.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("backup: %s has no %s: an incomplete backup (its capture did not finish), or not a backup", dir, ManifestName)
	}
	if err != nil {
		return nil, err
	}
	return ParseManifest(data)
}

// WriteManifest writes m into dir atomically: a temporary file, synced,
// renamed over the name, and the directory synced.
func WriteManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if _, err := ParseManifest(data); err != nil {
		return fmt.Errorf("backup: refusing to write a manifest it could not read back: %w", err)
	}
	tmp := filepath.Join(dir, ManifestName+".tmp")
	if err := writeSynced(tmp, data); err != nil {
		_ = os.Remove(tmp) // a full disk: not left behind
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestName)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Package backup writes, reads and checks shardkit backups
// (docs/design/backup.md): a directory of data files, each a sequence of
// records (a bucket's rspb.CopyChunk, framed with its length and a
// CRC32C), and a manifest.json written last, atomically, that names every
// file with its size, SHA-256, record count and buckets. A directory
// without a manifest is an incomplete backup.
//
// The package is internal: a backup is taken and restored through the
// shardkit binary (internal/cli), whose capture reads the replicasets'
// BucketService, which only instances and admins may call; no user
// program needs the format.
package backup

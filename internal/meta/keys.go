package meta

import (
	"encoding/binary"

	"github.com/shardkit/shardkit/internal/storage"
)

// Keys of group 0's state, all under "m/":
//
//	m/props          ClusterProperties
//	m/clock          latest leader-stamped time (8 bytes, big-endian)
//	m/index          log index of the last applied command (8 bytes)
//	m/i/<id>         Instance
//	m/r/<id>         Replicaset
//	m/b/<bucket>     replicaset id of a bucket (4-byte big-endian bucket)
//	m/l/<name>       Lease
//	m/s/<name>       Space
//	m/mv/<bucket>    Move in progress (4-byte big-endian bucket)
//	m/g/<bucket>     a bucket's generation after its last move (8 bytes; absent: 1)
//	m/p/<bucket>     a pinned bucket (empty value)
//	m/u/<name>       User
const prefix = storage.PrefixMeta

var (
	keyProps = []byte(prefix + "props")
	keyClock = []byte(prefix + "clock")
	keyIndex = []byte(prefix + "index")
)

const (
	prefixInstance   = prefix + "i/"
	prefixReplicaset = prefix + "r/"
	prefixBucket     = prefix + "b/"
	prefixLease      = prefix + "l/"
	prefixSpace      = prefix + "s/"
	prefixMove       = prefix + "mv/"
	prefixGen        = prefix + "g/"
	prefixPin        = prefix + "p/"
	prefixUser       = prefix + "u/"
)

func keyInstance(id string) []byte   { return append([]byte(prefixInstance), id...) }
func keyReplicaset(id string) []byte { return append([]byte(prefixReplicaset), id...) }
func keyLease(name string) []byte    { return append([]byte(prefixLease), name...) }
func keySpace(name string) []byte    { return append([]byte(prefixSpace), name...) }
func keyUser(name string) []byte     { return append([]byte(prefixUser), name...) }
func keyMove(b uint32) []byte        { return binary.BigEndian.AppendUint32([]byte(prefixMove), b) }
func keyGen(b uint32) []byte         { return binary.BigEndian.AppendUint32([]byte(prefixGen), b) }
func keyPin(b uint32) []byte         { return binary.BigEndian.AppendUint32([]byte(prefixPin), b) }
func keyBucket(b uint32) []byte      { return binary.BigEndian.AppendUint32([]byte(prefixBucket), b) }

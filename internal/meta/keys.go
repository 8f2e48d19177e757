package meta

import "encoding/binary"

// Keys of group 0's state, all under "m/":
//
//	m/props          ClusterProperties
//	m/clock          latest leader-stamped time (8 bytes, big-endian)
//	m/index          log index of the last applied command (8 bytes)
//	m/i/<id>         Instance
//	m/r/<id>         Replicaset
//	m/b/<bucket>     replicaset id of a bucket (4-byte big-endian bucket)
//	m/l/<name>       Lease
const prefix = "m/"

var (
	keyProps = []byte("m/props")
	keyClock = []byte("m/clock")
	keyIndex = []byte("m/index")
)

const (
	prefixInstance   = "m/i/"
	prefixReplicaset = "m/r/"
	prefixBucket     = "m/b/"
	prefixLease      = "m/l/"
)

func keyInstance(id string) []byte   { return append([]byte(prefixInstance), id...) }
func keyReplicaset(id string) []byte { return append([]byte(prefixReplicaset), id...) }
func keyLease(name string) []byte    { return append([]byte(prefixLease), name...) }
func keyBucket(b uint32) []byte      { return binary.BigEndian.AppendUint32([]byte(prefixBucket), b) }

package numerator

import (
	"fmt"
	"strconv"
)

// Keys of the Parquet key-value metadata that every part file of a state
// carries (docs/numerator.md).
const (
	metaPrefix         = "shardkit.numerator."
	metaFormat         = metaPrefix + "format"
	metaTable          = metaPrefix + "table"
	metaVersion        = metaPrefix + "version"
	metaRun            = metaPrefix + "run"
	metaTTL            = metaPrefix + "ttl"
	metaSchemeName     = metaPrefix + "scheme_name"
	metaShards         = metaPrefix + "shards"
	metaLastRebuildRun = metaPrefix + "last_rebuild_run"
	metaShard          = metaPrefix + "shard"
	metaOrder          = metaPrefix + "order"

	formatV1 = "1"
	// orderV1: a part holds one shard's rows in (KeyHash, key) order.
	orderV1 = "key_hash,business_id,offer_id,shop_id,warehouse_id"
)

// Table names in metaTable.
const (
	tableState   = "state"
	tableNewDocs = "new_docs"
	tableExpired = "expired_docs"
)

func (m StateMeta) keyValues(table string, shard uint32) map[string]string {
	return map[string]string{
		metaFormat:         formatV1,
		metaTable:          table,
		metaVersion:        m.Version.String(),
		metaRun:            strconv.FormatUint(m.Run, 10),
		metaTTL:            strconv.FormatUint(m.TTL, 10),
		metaSchemeName:     m.SchemeName,
		metaShards:         strconv.FormatUint(uint64(m.Shards), 10),
		metaLastRebuildRun: strconv.FormatUint(m.LastRebuildRun, 10),
		metaShard:          strconv.FormatUint(uint64(shard), 10),
		metaOrder:          orderV1,
	}
}

// parseStateMeta reads a state part's metadata. get returns a key's value
// and whether it is present.
func parseStateMeta(get func(string) (string, bool)) (StateMeta, error) {
	var m StateMeta
	need := func(k string) (string, error) {
		v, ok := get(k)
		if !ok {
			return "", fmt.Errorf("%w: metadata key %s is missing; is this a numerator state?", ErrBadState, k)
		}
		return v, nil
	}
	num := func(k string, bits int) (uint64, error) {
		v, err := need(k)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return 0, fmt.Errorf("%w: metadata %s=%q is not a number: %w", ErrBadState, k, v, err)
		}
		return n, nil
	}
	f, err := need(metaFormat)
	if err != nil {
		return m, err
	}
	if f != formatV1 {
		return m, fmt.Errorf("%w: state format %q; this binary reads format %s, upgrade it", ErrBadState, f, formatV1)
	}
	if t, err := need(metaTable); err != nil {
		return m, err
	} else if t != tableState {
		return m, fmt.Errorf("%w: the file is a %q table, not a state", ErrBadState, t)
	}
	v, err := need(metaVersion)
	if err != nil {
		return m, err
	}
	if m.Version, err = ParseVersion(v); err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if m.Run, err = num(metaRun, 64); err != nil {
		return m, err
	}
	if m.TTL, err = num(metaTTL, 64); err != nil {
		return m, err
	}
	if m.LastRebuildRun, err = num(metaLastRebuildRun, 64); err != nil {
		return m, err
	}
	shards, err := num(metaShards, 32)
	if err != nil {
		return m, err
	}
	if shards == 0 {
		return m, fmt.Errorf("%w: metadata says 0 shards", ErrBadState)
	}
	m.Shards = uint32(shards)
	if m.SchemeName, err = need(metaSchemeName); err != nil {
		return m, err
	}
	if m.LastRebuildRun > m.Run {
		return m, fmt.Errorf("%w: last rebuild run %d is after the state's run %d", ErrBadState, m.LastRebuildRun, m.Run)
	}
	return m, nil
}

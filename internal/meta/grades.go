package meta

import (
	"fmt"
	"strings"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// Grade variant names, exactly as users see them.
var variantNames = map[metapb.GradeVariant]string{
	metapb.GradeVariant_GRADE_VARIANT_OFFLINE:              "Offline",
	metapb.GradeVariant_GRADE_VARIANT_RAFT_SYNCED:          "RaftSynced",
	metapb.GradeVariant_GRADE_VARIANT_REPLICATED:           "Replicated",
	metapb.GradeVariant_GRADE_VARIANT_SHARDING_INITIALIZED: "ShardingInitialized",
	metapb.GradeVariant_GRADE_VARIANT_ONLINE:               "Online",
	metapb.GradeVariant_GRADE_VARIANT_EXPELLED:             "Expelled",
}

// VariantName returns a grade variant's user-facing name.
func VariantName(v metapb.GradeVariant) string {
	if n, ok := variantNames[v]; ok {
		return n
	}
	return "Unknown"
}

// ParseVariant parses a user-facing grade name (case-insensitive).
func ParseVariant(s string) (metapb.GradeVariant, error) {
	for v, n := range variantNames {
		if strings.EqualFold(n, s) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown grade %q (want Offline, RaftSynced, Replicated, ShardingInitialized, Online or Expelled)", s)
}

// Shorthands for the variants.
const (
	Offline             = metapb.GradeVariant_GRADE_VARIANT_OFFLINE
	RaftSynced          = metapb.GradeVariant_GRADE_VARIANT_RAFT_SYNCED
	Replicated          = metapb.GradeVariant_GRADE_VARIANT_REPLICATED
	ShardingInitialized = metapb.GradeVariant_GRADE_VARIANT_SHARDING_INITIALIZED
	Online              = metapb.GradeVariant_GRADE_VARIANT_ONLINE
	Expelled            = metapb.GradeVariant_GRADE_VARIANT_EXPELLED
)

// FormatGrade renders a grade as Variant(incarnation).
func FormatGrade(g *metapb.Grade) string {
	return fmt.Sprintf("%s(%d)", VariantName(g.GetVariant()), g.GetIncarnation())
}

// newTarget applies K11 to a target change: a target of Online bumps the
// incarnation by one; any other target copies the current grade's.
func newTarget(inst *metapb.Instance, v metapb.GradeVariant) *metapb.Grade {
	if v == Online {
		return &metapb.Grade{Variant: v, Incarnation: inst.GetTargetGrade().GetIncarnation() + 1}
	}
	return &metapb.Grade{Variant: v, Incarnation: inst.GetCurrentGrade().GetIncarnation()}
}

// newCurrent applies K11 to a current change: it copies the target's incarnation.
func newCurrent(inst *metapb.Instance, v metapb.GradeVariant) *metapb.Grade {
	return &metapb.Grade{Variant: v, Incarnation: inst.GetTargetGrade().GetIncarnation()}
}

// SameGrade reports whether two grades are equal.
func SameGrade(a, b *metapb.Grade) bool {
	return a.GetVariant() == b.GetVariant() && a.GetIncarnation() == b.GetIncarnation()
}

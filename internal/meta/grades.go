package meta

import (
	"fmt"
	"strings"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// Grade variant names, exactly as users see them.
var variantNames = map[clusterv1.GradeVariant]string{
	clusterv1.GradeVariant_GRADE_VARIANT_OFFLINE:              "Offline",
	clusterv1.GradeVariant_GRADE_VARIANT_RAFT_SYNCED:          "RaftSynced",
	clusterv1.GradeVariant_GRADE_VARIANT_REPLICATED:           "Replicated",
	clusterv1.GradeVariant_GRADE_VARIANT_SHARDING_INITIALIZED: "ShardingInitialized",
	clusterv1.GradeVariant_GRADE_VARIANT_ONLINE:               "Online",
	clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED:             "Expelled",
}

// VariantName returns a grade variant's user-facing name.
func VariantName(v clusterv1.GradeVariant) string {
	if n, ok := variantNames[v]; ok {
		return n
	}
	return "Unknown"
}

// ParseVariant parses a user-facing grade name (case-insensitive).
func ParseVariant(s string) (clusterv1.GradeVariant, error) {
	for v, n := range variantNames {
		if strings.EqualFold(n, s) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown grade %q (want Offline, RaftSynced, Replicated, ShardingInitialized, Online or Expelled)", s)
}

// Shorthands for the variants.
const (
	Offline             = clusterv1.GradeVariant_GRADE_VARIANT_OFFLINE
	RaftSynced          = clusterv1.GradeVariant_GRADE_VARIANT_RAFT_SYNCED
	Replicated          = clusterv1.GradeVariant_GRADE_VARIANT_REPLICATED
	ShardingInitialized = clusterv1.GradeVariant_GRADE_VARIANT_SHARDING_INITIALIZED
	Online              = clusterv1.GradeVariant_GRADE_VARIANT_ONLINE
	Expelled            = clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED
)

// FormatGrade renders a grade as Variant(incarnation).
func FormatGrade(g *clusterv1.Grade) string {
	return fmt.Sprintf("%s(%d)", VariantName(g.GetVariant()), g.GetIncarnation())
}

// newTarget applies K11 to a target change: a target of Online bumps the
// incarnation by one; any other target copies the current grade's.
func newTarget(inst *clusterv1.Instance, v clusterv1.GradeVariant) *clusterv1.Grade {
	if v == Online {
		return &clusterv1.Grade{Variant: v, Incarnation: inst.GetTargetGrade().GetIncarnation() + 1}
	}
	return &clusterv1.Grade{Variant: v, Incarnation: inst.GetCurrentGrade().GetIncarnation()}
}

// newCurrent applies K11 to a current change: it copies the target's incarnation.
func newCurrent(inst *clusterv1.Instance, v clusterv1.GradeVariant) *clusterv1.Grade {
	return &clusterv1.Grade{Variant: v, Incarnation: inst.GetTargetGrade().GetIncarnation()}
}

// SameGrade reports whether two grades are equal.
func SameGrade(a, b *clusterv1.Grade) bool {
	return a.GetVariant() == b.GetVariant() && a.GetIncarnation() == b.GetIncarnation()
}

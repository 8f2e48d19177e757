package statusview

import (
	"bytes"
	"strings"
	"testing"
)

// The legend under the instances counts them in English.
func TestTableLegendCountsInstances(t *testing.T) {
	for _, tt := range []struct {
		n         int
		lastKnown bool
		want      string
	}{
		{1, false, "(* the Raft leader; 1 instance)"},
		{2, false, "(* the Raft leader; 2 instances)"},
		{1, true, "(* the Raft leader; ? the last known grade; 1 instance)"},
		{3, true, "(* the Raft leader; ? the last known grade; 3 instances)"},
	} {
		v := View{ClusterID: "c", GradesLastKnown: tt.lastKnown}
		for i := range tt.n {
			v.Instances = append(v.Instances, Instance{InstanceID: "i" + string(rune('1'+i)), RaftID: uint64(i + 1)})
		}
		var out bytes.Buffer
		if err := WriteTable(&out, v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tt.want+"\n") {
			t.Errorf("%d instances (last known %v): no line %q in\n%s", tt.n, tt.lastKnown, tt.want, out.String())
		}
	}
}

//go:build failpoints

package server

import (
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/failpoint"
)

// SHARDKIT_FAILPOINTS sets its failpoints as the instance starts; a pair
// it cannot parse is refused by name.
func TestFailpointsFromEnv(t *testing.T) {
	t.Setenv(EnvFailpoints, " a/b=error ; c=sleep 1ms;")
	fp := &failpoint.Points{}
	if err := setFailpointsFromEnv(fp); err != nil {
		t.Fatal(err)
	}
	if err := fp.Eval("a/b"); err == nil {
		t.Errorf("failpoint a/b returns nil, want the injected error")
	}
	if err := fp.Eval("c"); err != nil {
		t.Errorf("failpoint c (sleep) returns %v", err)
	}
	if err := fp.Eval("unset"); err != nil {
		t.Errorf("a failpoint the variable does not name returns %v", err)
	}
	for spec, want := range map[string]string{
		"noaction":     `"noaction" is not name=action`,
		"x=explode":    "failpoint x: unknown failpoint action",
		"=error":       `"=error" is not name=action`,
		"y=sleep soon": "failpoint y:",
	} {
		t.Setenv(EnvFailpoints, spec)
		err := setFailpointsFromEnv(&failpoint.Points{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%q: error %v, want one containing %q", EnvFailpoints, spec, err, want)
		}
	}
}

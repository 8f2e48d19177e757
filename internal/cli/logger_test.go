package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The JSON log writes durations as the text log does, not as nanoseconds.
func TestJSONLogWritesDurationsAsText(t *testing.T) {
	for _, tt := range []struct{ format, want string }{
		{"json", `"took":"1m21.422s"`},
		{"text", `took=1m21.422s`},
	} {
		var buf bytes.Buffer
		newLogger("info", tt.format, &buf).Info("done", "took", 81422*time.Millisecond)
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("%s log %q lacks %s", tt.format, buf.String(), tt.want)
		}
	}
}

package cli

import (
	"io"
	"log/slog"
)

// durationsAsText writes a duration as Go writes it ("1.5s", "81.422s"),
// as the text format does: JSON's default is an integer of nanoseconds,
// which a reader of the log cannot take in at a glance.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// newLogger builds the log of `shardkit run` on w (stderr) from the
// already validated level (debug|info|warn|error) and format (text|json).
func newLogger(level, format string, w io.Writer) *slog.Logger {
	var l slog.Level
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		opts.ReplaceAttr = durationsAsText
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

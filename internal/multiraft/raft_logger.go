package multiraft

import (
	"context"
	"fmt"
	"log/slog"
	"os"
)

// raftLogger adapts slog to raft.Logger. Raft's info messages (elections,
// configuration) are kept at info level; its debug chatter at debug.
// Its panics carry a *raftPanic (see recoverRound).
type raftLogger struct {
	l     *slog.Logger
	group GroupID
}

func newRaftLogger(l *slog.Logger, g GroupID) raftLogger {
	return raftLogger{l: l.With("component", "raft"), group: g}
}

func (r raftLogger) log(level slog.Level, v ...any) {
	if r.l.Enabled(context.Background(), level) {
		r.l.Log(context.Background(), level, fmt.Sprint(v...))
	}
}

func (r raftLogger) logf(level slog.Level, format string, v ...any) {
	if r.l.Enabled(context.Background(), level) {
		r.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
	}
}

func (r raftLogger) Debug(v ...any)                   { r.log(slog.LevelDebug, v...) }
func (r raftLogger) Debugf(format string, v ...any)   { r.logf(slog.LevelDebug, format, v...) }
func (r raftLogger) Info(v ...any)                    { r.log(slog.LevelInfo, v...) }
func (r raftLogger) Infof(format string, v ...any)    { r.logf(slog.LevelInfo, format, v...) }
func (r raftLogger) Warning(v ...any)                 { r.log(slog.LevelWarn, v...) }
func (r raftLogger) Warningf(format string, v ...any) { r.logf(slog.LevelWarn, format, v...) }
func (r raftLogger) Error(v ...any)                   { r.log(slog.LevelError, v...) }
func (r raftLogger) Errorf(format string, v ...any)   { r.logf(slog.LevelError, format, v...) }

func (r raftLogger) Fatal(v ...any) {
	r.log(slog.LevelError, v...)
	os.Exit(1)
}

func (r raftLogger) Fatalf(format string, v ...any) {
	r.logf(slog.LevelError, format, v...)
	os.Exit(1)
}

// Panic and Panicf do not log: the panic carries the message, and either
// recoverRound turns it into the host's failure (which its owner reports)
// or the runtime prints it.
func (r raftLogger) Panic(v ...any) { panic(newRaftPanic(r.group, fmt.Sprint(v...), v)) }

func (r raftLogger) Panicf(format string, v ...any) {
	panic(newRaftPanic(r.group, fmt.Sprintf(format, v...), v))
}

// Package cli holds the cobra commands of the shardkit binary: run, status,
// expel, backup (internal/backup), demo, bench, version, the data commands
// (space, insert, replace, select (a key, or a range of a bucket), scan,
// update, upsert, delete, call, map-call; docs/data.md) and the
// subcommands of the public libraries (cache, numerator). Main takes the
// binary's own stored procedures (cmd/shardkit/app) and hands them to run.
//
// It owns flag parsing, configuration precedence (flag > env > file) and the
// mapping of errors to exit codes and one-line messages. It must never hold
// cluster logic of its own: commands translate the command line into calls on
// internal/server, the public client or the libraries, and print the results.
package cli

// Package cli holds the cobra commands of the shardkit binary: run, status,
// expel, demo, bench, version and the subcommands of the public libraries
// (cache, numerator).
//
// It owns flag parsing, configuration precedence (flag > env > file) and the
// mapping of errors to exit codes and one-line messages. It must never hold
// cluster logic of its own: commands translate the command line into calls on
// internal/server, the public client or the libraries, and print the results.
package cli

// Package auth decides who may call what on an instance of a secure
// cluster (docs/security.md): it reads the caller's client certificate
// from the connection, verifies it against the cluster's CA, turns it into
// an identity (an instance, or a user by CN), looks the user's role up in
// group 0 (through a function the server gives), and compares it with the
// role the gRPC method needs, from the one table in rules.go.
//
// It owns: that table (every method of every service the server registers
// has an entry; a test fails when one is missing, and a method without one
// is refused to users), which also says of each method whether only group
// 0's leader serves it (LeaderOnly; the cluster's forwarding route reads
// it), the gRPC unary and stream interceptors and the HTTP middleware, the
// carrying of the original user on calls an instance forwards
// (UserHeader, trusted only from a node certificate), and the wording of
// refusals: Unauthenticated for a missing or bad certificate,
// PermissionDenied for a role too low, each naming the user, the full
// method and the role needed, in the same words over gRPC and HTTP. A
// caller that has not authenticated is told no path of the instance;
// the whole refusal, with the path and the caller's address, goes to the
// instance's log at warn.
//
// It must never log certificates' keys or any secret, never decide where a
// call is served (that is internal/forward's, with the cluster's route,
// and the router's), and never import the rooms it guards (cluster,
// replicaset, router, mover, server).
package auth

// Package certs makes and reads the certificates of a secure shardkit
// cluster, in the layout of `cockroach cert`: one directory holds
//
//	ca.crt, ca.key                 the cluster's certificate authority
//	node.crt, node.key             an instance's certificate (CN "node",
//	                               SANs: the names and addresses it is
//	                               reached at; server and client use)
//	client.<user>.crt, .key        a user's client certificate (CN = user)
//
// It owns: creating those files (ECDSA P-256, crypto/x509, private keys
// 0600, never overwriting unless asked), the tls.Config of each side
// (instance server, instance-to-instance client, user client) that reload
// the files when they change on disk (rotation without a restart), the
// verification of a peer's chain against the current CA (its refusal,
// RefusedError, has one text for this side, naming the CA file, and one
// for the peer, naming none; a certificate of another CA is refused with
// both CAs' subjects and key fingerprints), a unique subject for each CA
// (its key's fingerprint in the CN), and the one
// parsing of a certificate into an identity (Identify): CN "node" with
// server and client use is an instance, any other valid CN is a user.
//
// It must never log or return private key bytes (errors name files, never
// their contents), never import shardkit's internal packages (clients
// use it), and keeps no package-level state.
package certs

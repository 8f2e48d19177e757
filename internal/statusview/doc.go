// Package statusview turns the cluster's status answer into what people
// and scripts read: the stable JSON form (View) and the table. The CLI's
// `shardkit status`, the HTTP endpoint /api/v1/cluster and `shardkit demo`
// all print through it, so they never disagree.
//
// It must never talk to the network or read state itself: it only
// converts a GetStatusResponse.
package statusview

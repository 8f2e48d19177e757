package client

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/certs"
)

// ReconnectMaxDelay is how far apart, at most, a connection whose instance
// went away tries to connect again. gRPC's own default grows to 120 s: an
// instance restarted after two minutes away waited up to a minute for its
// peers to reach it again (their raft messages to it, its votes' answers),
// and stayed Offline meanwhile.
const ReconnectMaxDelay = time.Second

// DialOptions returns the options every connection to a shardkit instance
// is made with: creds secures the transport; nil means plaintext, for a
// cluster started without certificates. Messages are encoded by
// api/rpccodec (protobuf without reflection); a lost connection is tried
// again within ReconnectMaxDelay. This is the one place that decides it,
// for the CLI, the libraries, and the instances' connections to each
// other.
func DialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpccodec.Codec{})),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectMaxDelay},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

// Dial makes a connection to one instance at addr (host:port) with
// DialOptions(creds) followed by extra. Like grpc.NewClient it does not
// connect until the first call.
func Dial(addr string, creds credentials.TransportCredentials, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := CheckAddress(addr); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, append(DialOptions(creds), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %w", ErrInvalid, addr, err)
	}
	return conn, nil
}

// CheckAddress refuses what is not host:port with a port in 1..65535.
func CheckAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: address %q: want host:port, e.g. 127.0.0.1:3301", ErrInvalid, addr)
	}
	if host == "" {
		return fmt.Errorf("%w: address %q has no host; want host:port, e.g. 127.0.0.1:3301", ErrInvalid, addr)
	}
	for _, r := range host {
		if r <= ' ' || r == 0x7f || r == '/' || r == '@' {
			return fmt.Errorf("%w: address %q: character %q not allowed in a host", ErrInvalid, addr, r)
		}
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port != strconv.Itoa(p) {
		return fmt.Errorf("%w: address %q: port %q is not a number from 1 to 65535", ErrInvalid, addr, port)
	}
	return nil
}

// ParsePeers splits a comma-separated list of host:port addresses, as the
// CLI's --peer takes it, dropping duplicates.
func ParsePeers(list string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("%w: empty address in %q: want host:port[,host:port...]", ErrInvalid, list)
		}
		if err := CheckAddress(p); err != nil {
			return nil, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// LoadCredentials reads a certs directory (see package certs: ca.crt and
// client.<user>.crt/.key) into the credentials of user, for
// Config.Credentials. The files are read again when they change on disk,
// so a rotated certificate is used from the next connection on.
func LoadCredentials(certsDir, user string) (credentials.TransportCredentials, error) {
	cfg, err := certs.LoadClient(certsDir, user)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return credentials.NewTLS(cfg), nil
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/router"
)

// defaultPeer is the address client commands ask when --peer is not given
// (the default --listen of `shardkit run`).
const defaultPeer = "127.0.0.1:3301"

// clusterFlags are the flags of every command that talks to a running
// cluster: where it is and how long to wait. They make the one client the
// command uses.
type clusterFlags struct {
	peers   string
	timeout time.Duration
	sec     securityFlags
}

func (f *clusterFlags) register(fs *pflag.FlagSet, timeout time.Duration, timeoutHelp string) {
	fs.StringVar(&f.peers, "peer", defaultPeer, "address (host:port) of a cluster instance; a comma-separated list is tried in turn")
	fs.DurationVar(&f.timeout, "timeout", timeout, timeoutHelp)
	f.sec.register(fs)
}

// client checks the flags and makes the client. --timeout bounds the
// command; one attempt on one instance gets its share of it (attempt), so
// that an instance that does not answer leaves time to ask the next
// --peer (docs/data.md).
func (f *clusterFlags) client(ctx context.Context) (*client.Client, error) {
	return f.clientWith(ctx, f.attempt())
}

// attempt is one instance's share of --timeout: an equal part for each
// --peer address, at least a second (all of --timeout when that is
// shorter).
func (f *clusterFlags) attempt() time.Duration {
	n := time.Duration(strings.Count(f.peers, ",") + 1)
	return max(f.timeout/n, min(time.Second, f.timeout))
}

// clientWith is client with each attempt on one instance bounded by
// attempt instead (0: --timeout).
func (f *clusterFlags) clientWith(ctx context.Context, attempt time.Duration) (*client.Client, error) {
	if f.timeout <= 0 {
		return nil, fmt.Errorf("invalid --timeout %v: must be positive", f.timeout)
	}
	peers, err := client.ParsePeers(f.peers)
	if err != nil {
		return nil, fmt.Errorf("--peer: %w", err)
	}
	if attempt <= 0 {
		attempt = f.timeout
	}
	creds, err := f.sec.credentials()
	if err != nil {
		return nil, err
	}
	return client.New(ctx, client.Config{Peers: peers, Timeout: attempt, Credentials: creds})
}

// callError turns a failed call into one line: unreachable peers and
// deadlines are named as such, other answers by the cluster's message.
func callError(timeout time.Duration, err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return errors.New(oneLine(err.Error()))
	}
	switch {
	case ce.Peer == "":
		return errors.New(oneLine(ce.Msg))
	case errors.Is(err, client.ErrOutcomeUnknown) && ce.Code == codes.Unavailable,
		ce.Code == codes.Unavailable && strings.HasPrefix(ce.Msg, router.ForwardFailedPrefix):
		// The peer answered: the write's outcome is unknown, or another
		// instance it forwarded the call to was unavailable (the message
		// names that one). The peer itself is not to blame.
		return fmt.Errorf("peer %s: %s", ce.Peer, oneLine(ce.Msg))
	case ce.Code == codes.Unavailable && looksLikeHTTP(ce.Msg):
		return httpPortError(ce.Peer)
	case ce.Code == codes.Unavailable && strings.Contains(ce.Msg, "error reading server preface: EOF"):
		return fmt.Errorf("peer %s closed the connection before speaking gRPC: if the cluster runs with --certs-dir (TLS), pass --certs-dir DIR and --user NAME (%s)", ce.Peer, oneLine(ce.Msg))
	case ce.Code == codes.Unavailable && strings.Contains(ce.Msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("peer %s speaks plaintext, not TLS: the cluster runs without --certs-dir; drop --certs-dir (%s)", ce.Peer, oneLine(ce.Msg))
	case ce.Code == codes.Unavailable:
		return fmt.Errorf("peer %s unavailable: %s", ce.Peer, oneLine(ce.Msg))
	case ce.Code == codes.DeadlineExceeded && strings.HasPrefix(ce.Msg, "did not answer within "):
		// The client names the time this instance had: its share of
		// --timeout, not all of it.
		return fmt.Errorf("peer %s %s (--timeout %v)", ce.Peer, oneLine(ce.Msg), timeout)
	case ce.Code == codes.DeadlineExceeded:
		return fmt.Errorf("peer %s did not answer within %v: %s", ce.Peer, timeout, oneLine(ce.Msg))
	}
	return fmt.Errorf("peer %s: %s", ce.Peer, oneLine(ce.Msg))
}

// looksLikeHTTP reports whether a connection failed because an HTTP/1
// server answered the gRPC client's HTTP/2 preface (gRPC's own words).
func looksLikeHTTP(msg string) bool {
	return strings.Contains(msg, "looked like an HTTP/1.1 header") ||
		strings.Contains(msg, "error reading server preface") && strings.Contains(msg, "HTTP/1")
}

// httpPortError is the error for a --peer that is an HTTP port. When it is
// an instance's --http-listen, that instance's status (GET /api/v1/cluster)
// names its gRPC address.
func httpPortError(peer string) error {
	const what = "this looks like an HTTP port (an instance's --http-listen?), not the gRPC port shardkit commands talk to"
	if grpcAddr := grpcAddressOf(peer); grpcAddr != "" {
		return fmt.Errorf("peer %s: %s; the gRPC port of that instance is %s (its --listen): use --peer %s", peer, what, grpcAddr, grpcAddr)
	}
	return fmt.Errorf("peer %s: %s; give --peer an instance's --listen address", peer, what)
}

// grpcAddressOf asks the HTTP server at addr for the cluster's status and
// returns the address of the instance whose HTTP address is addr ("" when
// it cannot tell).
func grpcAddressOf(addr string) string {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/api/v1/cluster?all=1")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	var st struct {
		Instances []struct {
			Address     string `json:"address"`
			HTTPAddress string `json:"http_address"`
		} `json:"instances"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return ""
	}
	for _, in := range st.Instances {
		if in.HTTPAddress == addr {
			return in.Address
		}
	}
	return ""
}

package cli

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/client"
)

// securityFlags are --certs-dir and --user of every command that talks to
// a cluster: the directory of certificates (as `shardkit cert` makes it)
// and whose client certificate to present.
type securityFlags struct {
	certsDir string
	user     string
}

func (s *securityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.certsDir, "certs-dir", os.Getenv("SHARDKIT_CERTS_DIR"),
		"directory with ca.crt and client.<user>.crt/.key of a secure cluster (env SHARDKIT_CERTS_DIR); empty: plaintext")
	user := os.Getenv("SHARDKIT_USER")
	if user == "" {
		user = certs.RootUser
	}
	fs.StringVar(&s.user, "user", user, "with --certs-dir: the user whose client certificate (client.<user>.crt) to present (env SHARDKIT_USER)")
}

// credentials returns the transport credentials (nil: plaintext).
func (s *securityFlags) credentials() (credentials.TransportCredentials, error) {
	if s.certsDir == "" {
		return nil, nil
	}
	c, err := client.LoadCredentials(s.certsDir, s.user)
	if err != nil {
		return nil, fmt.Errorf("--certs-dir %s --user %s: %w", s.certsDir, s.user, err)
	}
	return c, nil
}

package cli

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardkit/shardkit/sharding"
)

// Parsers of `shardkit run` setting values. Each takes the raw text (from a
// flag, an environment variable or the config file) and returns an error
// that says what is wrong with it; the caller names the setting and source.

var errEmpty = errors.New("empty value")

// parseFailureDomain parses "k=v,k2=v2" into into. Keys and values are
// non-empty names (letters, digits, '_', '-', '.'); a key may appear once.
func parseFailureDomain(s string, into map[string]string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("want key=value pairs separated by commas, e.g. dc=msk,rack=3")
	}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		key, value, ok := strings.Cut(pair, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case pair == "":
			return errors.New("empty pair; want key=value pairs separated by commas, e.g. dc=msk,rack=3")
		case !ok:
			return fmt.Errorf("%q is not key=value; want key=value pairs separated by commas, e.g. dc=msk,rack=3", pair)
		}
		if err := checkName(key); err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		if err := checkName(value); err != nil {
			return fmt.Errorf("value %q of %s: %w", value, key, err)
		}
		if _, dup := into[key]; dup {
			return fmt.Errorf("key %q given twice", key)
		}
		into[key] = value
	}
	return nil
}

// maxNameLen bounds identifiers and failure-domain names.
const maxNameLen = 64

// checkName accepts 1..64 characters of letters, digits, '_', '-' and '.'.
func checkName(s string) error {
	if s == "" {
		return errEmpty
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("longer than %d characters", maxNameLen)
	}
	for _, r := range s {
		if !nameChar(r) {
			return fmt.Errorf("character %q not allowed (use letters, digits, '_', '-', '.')", r)
		}
	}
	return nil
}

func nameChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return r == '_' || r == '-' || r == '.'
}

// parsePeers appends the comma-separated host:port addresses of s to
// peers, skipping ones already there.
func parsePeers(s string, peers []string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return peers, errors.New("want host:port addresses separated by commas")
	}
	for addr := range strings.SplitSeq(s, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			return peers, errors.New("empty address in the list; want host:port addresses separated by commas")
		}
		if err := checkHostPort(addr, false); err != nil {
			return peers, fmt.Errorf("address %q: %w", addr, err)
		}
		if !containsString(peers, addr) {
			peers = append(peers, addr)
		}
	}
	return peers, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkHostPort accepts host:port with a numeric port 1..65535. An empty
// host (":3301", all interfaces) only where allowEmptyHost.
func checkHostPort(s string, allowEmptyHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port, e.g. 127.0.0.1:3301")
	}
	if host == "" && !allowEmptyHost {
		return errors.New("no host; want host:port, e.g. 127.0.0.1:3301")
	}
	for _, r := range host {
		if r <= ' ' || r == 0x7f || r == '/' || r == '@' {
			return fmt.Errorf("character %q not allowed in a host", r)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, errors.New("want a duration such as 30s, 1m or 1500ms")
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

func parseReplicationFactor(s string) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, errors.New("want a whole number of at least 1")
	}
	if n < 1 {
		return 0, errors.New("must be at least 1")
	}
	return int(n), nil
}

func parseBucketCount(s string) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, errors.New("want a whole number of at least 1")
	}
	if n < 1 || n > sharding.MaxBucketCount {
		return 0, fmt.Errorf("must be from 1 to %d", sharding.MaxBucketCount)
	}
	return int(n), nil
}

func parseLogLevel(s string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	switch l {
	case "debug", "info", "warn", "error":
		return l, nil
	}
	return "", errors.New("want debug, info, warn or error")
}

func parseLogFormat(s string) (string, error) {
	f := strings.ToLower(strings.TrimSpace(s))
	switch f {
	case "text", "json":
		return f, nil
	}
	return "", errors.New("want text or json")
}

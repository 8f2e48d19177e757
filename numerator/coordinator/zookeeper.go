package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZKStore keeps the document in one znode. Updates are compare-and-set on
// the znode's version: a writer that read an older version loses and
// retries on the new one, so a stale writer can never overwrite a newer
// record.
type ZKStore struct {
	conn *zk.Conn
	path string
}

// DefaultZKPath is the znode used when the address names none.
const DefaultZKPath = "/shardkit/numerator"

// ParseZKAddr splits "host:port,host:port/some/path" into servers and znode
// path (DefaultZKPath when absent).
func ParseZKAddr(addr string) ([]string, string, error) {
	hosts, p := addr, DefaultZKPath
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		hosts, p = addr[:i], path.Clean(addr[i:])
	}
	var servers []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			servers = append(servers, h)
		}
	}
	if len(servers) == 0 || p == "/" {
		return nil, "", fmt.Errorf("%w: ZooKeeper address %q: want host:port[,host:port...][/znode/path]", ErrInvalid, addr)
	}
	return servers, p, nil
}

type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) { z.l.Debug(fmt.Sprintf(format, args...)) }

// NewZKStore connects to ZooKeeper at addr (see ParseZKAddr) and waits,
// within ctx, for a session.
func NewZKStore(ctx context.Context, addr string, logger *slog.Logger) (*ZKStore, error) {
	servers, p, err := ParseZKAddr(addr)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(zkLogger{logger}))
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper %v: %w", ErrUnavailable, servers, err)
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				s := &ZKStore{conn: conn, path: p}
				if err := s.ensureParents(); err != nil {
					conn.Close()
					return nil, err
				}
				// Later events are dropped by the library when nobody reads
				// them (it never blocks on this channel).
				return s, nil
			}
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("%w: zookeeper %v: no session: %w", ErrUnavailable, servers, context.Cause(ctx))
		}
	}
}

// NewZooKeeper returns the ZooKeeper coordinator.
func NewZooKeeper(ctx context.Context, addr string, logger *slog.Logger, now func() time.Time) (*DocCoordinator, error) {
	s, err := NewZKStore(ctx, addr, logger)
	if err != nil {
		return nil, err
	}
	return NewDocCoordinator(s, now), nil
}

func (s *ZKStore) ensureParents() error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(path.Dir(s.path), "/"), "/") {
		if part == "" {
			continue
		}
		cur += "/" + part
		if _, err := s.conn.Create(cur, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("%w: create %s: %w", ErrUnavailable, cur, err)
		}
	}
	return nil
}

// get reads the document and its znode version (-1: no znode yet).
func (s *ZKStore) get() (Document, int32, error) {
	b, st, err := s.conn.Get(s.path)
	if errors.Is(err, zk.ErrNoNode) {
		return Document{Format: documentFormat}, -1, nil
	}
	if err != nil {
		return Document{}, 0, fmt.Errorf("%w: get %s: %w", ErrUnavailable, s.path, err)
	}
	d, err := DecodeDocument(b)
	if err != nil {
		return d, 0, fmt.Errorf("znode %s: %w", s.path, err)
	}
	return d, st.Version, nil
}

func (s *ZKStore) Read(ctx context.Context) (Document, error) {
	if err := ctx.Err(); err != nil {
		return Document{}, err
	}
	d, _, err := s.get()
	return d, err
}

func (s *ZKStore) Update(ctx context.Context, fn func(*Document) error) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, version, err := s.get()
		if err != nil {
			return err
		}
		if err := fn(&d); err != nil {
			return err
		}
		if version < 0 {
			_, err = s.conn.Create(s.path, d.Encode(), 0, zk.WorldACL(zk.PermAll))
		} else {
			_, err = s.conn.Set(s.path, d.Encode(), version)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
			continue // another writer won the compare-and-set: read again
		default:
			return fmt.Errorf("%w: write %s: %w", ErrUnavailable, s.path, err)
		}
	}
}

func (s *ZKStore) Close() error {
	s.conn.Close()
	return nil
}

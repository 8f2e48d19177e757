package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/retry"
)

// RelayConfig says where a Relay sends the changelog.
type RelayConfig struct {
	// Brokers are Kafka's seed brokers, host:port (required).
	Brokers []string
	// Topic receives the records (required).
	Topic string
	// Batch is how many outbox rows one round sends (default 256).
	Batch int
	// PollInterval is how often an idle relay looks at the outbox without
	// a notification, and how often a relay waiting for another's turn
	// tries again (default 1 s).
	PollInterval time.Duration
	// Logger (default: none).
	Logger *slog.Logger
	// KafkaOptions are added to the producer's options (TLS, SASL, ...).
	KafkaOptions []kgo.Opt
}

// Relay sends the outbox to Kafka: each row as one record keyed by the
// offer id (so one offer's records stay in one partition, in order), its
// value the scheduler.Record as JSON, with the row's seq and the shard in
// headers. A row is deleted only after Kafka acknowledged it, so a relay
// that dies sends it again: at least once, ordered per offer, duplicates
// recognised by (offer_id, offer_version, stage, state_version). The
// producer is franz-go's idempotent one, and one relay at a time sends
// (a PostgreSQL advisory lock): others wait for their turn.
type Relay struct {
	s   *Store
	cfg RelayConfig
	kc  *kgo.Client
	log *slog.Logger
}

// NewRelay makes a relay of s's outbox. Close it after Run.
func NewRelay(s *Store, cfg RelayConfig) (*Relay, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("pgstore: relay: no broker: name at least one")
	case cfg.Topic == "":
		return nil, errors.New("pgstore: relay: no topic")
	case cfg.Batch < 0 || cfg.PollInterval < 0:
		return nil, fmt.Errorf("pgstore: relay: negative Batch (%d) or PollInterval (%v)", cfg.Batch, cfg.PollInterval)
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5 * time.Millisecond),
	}, cfg.KafkaOptions...)
	kc, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: relay: the Kafka client: %w", err)
	}
	return &Relay{s: s, cfg: cfg, kc: kc, log: cfg.Logger}, nil
}

// Close closes the Kafka client.
func (r *Relay) Close() { r.kc.Close() }

// Run sends the outbox until ctx ends (then nil). Database and Kafka errors
// are logged and retried with backoff.
func (r *Relay) Run(ctx context.Context) error {
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
	for {
		err := r.runTurn(ctx, &b)
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("pgstore: relay", "err", err)
		if retry.Sleep(ctx, b.Next()) != nil {
			return nil
		}
	}
}

// runTurn waits for the relay's lock on a connection of its own, then
// sends until an error.
func (r *Relay) runTurn(ctx context.Context, b *retry.Backoff) error {
	conn, err := r.s.listen(ctx, r.s.outboxChannel)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var mine bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", r.s.schema+"\x1foutbox relay").Scan(&mine); err != nil {
			return wrap("relay: lock", err)
		}
		if mine {
			break
		}
		if err := retry.Sleep(ctx, r.cfg.PollInterval); err != nil {
			return err
		}
	}
	for {
		n, err := r.send(ctx, conn)
		if err != nil {
			return err
		}
		b.Reset()
		if n == r.cfg.Batch {
			continue
		}
		if err := r.idle(ctx, conn); err != nil {
			return err
		}
	}
}

// idle waits for a notification of the outbox's channel or the poll
// interval.
func (r *Relay) idle(ctx context.Context, conn *pgx.Conn) error {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
	defer cancel()
	_, err := conn.WaitForNotification(wctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		return nil // the poll
	}
	return wrap("relay: wait", err)
}

// send sends one batch of the outbox, oldest first, and deletes it once
// Kafka has it all.
func (r *Relay) send(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, "SELECT seq, offer_id, record FROM "+r.s.t("outbox")+" ORDER BY seq LIMIT $1", r.cfg.Batch)
	if err != nil {
		return 0, wrap("relay: read the outbox", err)
	}
	var seqs []int64
	var recs []*kgo.Record
	for rows.Next() {
		var seq int64
		var id string
		var rec []byte
		if err := rows.Scan(&seq, &id, &rec); err != nil {
			rows.Close()
			return 0, wrap("relay: read the outbox", err)
		}
		seqs = append(seqs, seq)
		recs = append(recs, &kgo.Record{Key: []byte(id), Value: rec, Headers: []kgo.RecordHeader{
			{Key: "seq", Value: []byte(strconv.FormatInt(seq, 10))},
		}})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, wrap("relay: read the outbox", err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := r.kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("pgstore: relay: produce %d records: %w", len(recs), err)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM "+r.s.t("outbox")+" WHERE seq = ANY($1)", seqs); err != nil {
		return 0, wrap("relay: delete sent rows", err)
	}
	return len(recs), nil
}

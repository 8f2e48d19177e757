package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Document is what the document-based backends store: one record holding
// the lock, the state and the ticket counter, replaced atomically as a whole
// (a file renamed into place, a znode set with a version check).
type Document struct {
	Format     int    `json:"format"`
	LastTicket uint64 `json:"last_ticket"`
	Lock       *Lease `json:"lock,omitempty"`
	State      State  `json:"state"`
}

const documentFormat = 1

// DecodeDocument parses a stored document; empty input is the empty document.
func DecodeDocument(b []byte) (Document, error) {
	var d Document
	if len(bytes.TrimSpace(b)) == 0 {
		return Document{Format: documentFormat}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return d, fmt.Errorf("%w: trailing data after the record", ErrCorrupt)
	}
	if d.Format != documentFormat {
		return d, fmt.Errorf("%w: format %d, this binary knows %d", ErrCorrupt, d.Format, documentFormat)
	}
	if d.Lock != nil && (d.Lock.Ticket == 0 || d.Lock.Ticket > d.LastTicket || d.Lock.Holder == "") {
		return d, fmt.Errorf("%w: lock %+v inconsistent with last ticket %d", ErrCorrupt, *d.Lock, d.LastTicket)
	}
	if d.State.Ticket > d.LastTicket {
		return d, fmt.Errorf("%w: state ticket %d above last ticket %d", ErrCorrupt, d.State.Ticket, d.LastTicket)
	}
	return d, nil
}

// Encode serializes the document.
func (d Document) Encode() []byte {
	d.Format = documentFormat
	b, err := json.Marshal(d)
	if err != nil { // only plain fields: cannot happen
		panic(err)
	}
	return b
}

// Store is an atomic read-modify-write cell holding one Document.
type Store interface {
	// Update applies fn to the current document and stores the result
	// atomically; if fn fails, nothing is stored.
	Update(ctx context.Context, fn func(*Document) error) error
	// Read returns the current document.
	Read(ctx context.Context) (Document, error)
	Close() error
}

// DocCoordinator implements Coordinator on a Store with the lock rules of
// N7. Expiry is judged by the clock of the process that reads the record.
type DocCoordinator struct {
	store Store
	now   func() time.Time
}

// NewDocCoordinator returns a Coordinator over store; now is its clock (nil
// means time.Now).
func NewDocCoordinator(store Store, now func() time.Time) *DocCoordinator {
	if now == nil {
		now = time.Now
	}
	return &DocCoordinator{store: store, now: now}
}

func (c *DocCoordinator) Acquire(ctx context.Context, holder string, timeout time.Duration) (Lease, error) {
	if holder == "" || timeout <= 0 {
		return Lease{}, fmt.Errorf("%w: holder %q, timeout %v: need a master name and a positive timeout", ErrInvalid, holder, timeout)
	}
	var out Lease
	err := c.store.Update(ctx, func(d *Document) error {
		now := c.now()
		if d.Lock != nil && now.Before(d.Lock.Expires) {
			return fmt.Errorf("%w: %s holds ticket %d since %s until %s; retry later",
				ErrLocked, d.Lock.Holder, d.Lock.Ticket, d.Lock.Acquired.Format(time.RFC3339), d.Lock.Expires.Format(time.RFC3339))
		}
		d.LastTicket++
		d.Lock = &Lease{Holder: holder, Ticket: d.LastTicket, Acquired: now, Expires: now.Add(timeout)}
		out = *d.Lock
		out.State = d.State
		return nil
	})
	return out, err
}

// current checks that ticket holds an unexpired lock.
func (c *DocCoordinator) current(d *Document, ticket uint64) error {
	switch {
	case d.Lock == nil:
		return fmt.Errorf("%w: ticket %d holds no lock (it timed out or was released); the run's result is not valid", ErrStale, ticket)
	case d.Lock.Ticket != ticket:
		return fmt.Errorf("%w: ticket %d is not current; %s holds ticket %d", ErrStale, ticket, d.Lock.Holder, d.Lock.Ticket)
	case !c.now().Before(d.Lock.Expires):
		return fmt.Errorf("%w: ticket %d of %s timed out at %s; the run's result is not valid", ErrStale, ticket, d.Lock.Holder, d.Lock.Expires.Format(time.RFC3339))
	}
	return nil
}

func (c *DocCoordinator) Renew(ctx context.Context, ticket uint64, timeout time.Duration) (Lease, error) {
	if timeout <= 0 {
		return Lease{}, fmt.Errorf("%w: timeout %v must be positive", ErrInvalid, timeout)
	}
	var out Lease
	err := c.store.Update(ctx, func(d *Document) error {
		if err := c.current(d, ticket); err != nil {
			return err
		}
		d.Lock.Expires = c.now().Add(timeout)
		out = *d.Lock
		out.State = d.State
		return nil
	})
	return out, err
}

func (c *DocCoordinator) Report(ctx context.Context, ticket uint64, r Report) (State, error) {
	if r.OK && r.Location == "" {
		return State{}, fmt.Errorf("%w: a successful report needs the new state's location", ErrInvalid)
	}
	var out State
	err := c.store.Update(ctx, func(d *Document) error {
		if err := c.current(d, ticket); err != nil {
			return err
		}
		if r.OK {
			d.State = State{Location: r.Location, Version: r.Version, Master: d.Lock.Holder, Ticket: ticket, Updated: c.now()}
		}
		d.Lock = nil
		out = d.State
		return nil
	})
	return out, err
}

func (c *DocCoordinator) Status(ctx context.Context) (Status, error) {
	d, err := c.store.Read(ctx)
	if err != nil {
		return Status{}, err
	}
	return Status{State: d.State, Lock: d.Lock, LastTicket: d.LastTicket}, nil
}

// ForceUnlock implements Coordinator.
func (c *DocCoordinator) ForceUnlock(ctx context.Context) (*Lease, error) {
	var dropped *Lease
	err := c.store.Update(ctx, func(d *Document) error {
		dropped = d.Lock
		d.Lock = nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dropped, nil
}

func (c *DocCoordinator) Close() error { return c.store.Close() }

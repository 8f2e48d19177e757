package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// SpaceDef defines a space.
type SpaceDef struct {
	Name   string
	Format tuple.Format
	// PrimaryKey names the key's fields, in key order.
	PrimaryKey []string
	// ShardingKey names the sharding key's fields, in the order they are
	// hashed: primary-key fields in any position (nil: the whole primary
	// key). Rows of any spaces with equal sharding keys share a bucket.
	ShardingKey []string
	// ID and SchemaVersion are the cluster's (read only).
	ID            uint32
	SchemaVersion uint64
}

// ShardingFields returns the sharding key's fields: ShardingKey, or the
// whole primary key when ShardingKey is empty.
func (d SpaceDef) ShardingFields() []string {
	if len(d.ShardingKey) == 0 {
		return append([]string{}, d.PrimaryKey...)
	}
	return append([]string{}, d.ShardingKey...)
}

func (d SpaceDef) api() (*datav1.Space, error) {
	def := schema.Definition{Name: d.Name, Format: d.Format}
	for _, name := range d.PrimaryKey {
		i, ok := d.Format.Index(name)
		if !ok {
			return nil, invalidf("space %s: primary key field %q is not in the format", d.Name, name)
		}
		def.PrimaryKey = append(def.PrimaryKey, i)
	}
	for _, name := range d.ShardingKey {
		i, ok := d.Format.Index(name)
		if !ok {
			return nil, invalidf("space %s: sharding key field %q is not in the format", d.Name, name)
		}
		def.ShardingKey = append(def.ShardingKey, i)
	}
	return schema.ToAPI(def), nil
}

func spaceDef(sp *datav1.Space) (SpaceDef, error) {
	c, err := schema.CompileAPI(sp)
	if err != nil {
		return SpaceDef{}, fmt.Errorf("client: the cluster sent a space %q it cannot read: %w", sp.GetName(), err)
	}
	def := c.Definition()
	d := SpaceDef{Name: def.Name, Format: def.Format, ID: def.ID, SchemaVersion: def.SchemaVersion}
	for _, i := range def.PrimaryKey {
		d.PrimaryKey = append(d.PrimaryKey, def.Format[i].Name)
	}
	for _, i := range def.ShardingKey {
		d.ShardingKey = append(d.ShardingKey, def.Format[i].Name)
	}
	return d, nil
}

// CreateSpace defines a space (in group 0); with ifNotExists, an existing
// space of the same definition is no error.
func (c *Client) CreateSpace(ctx context.Context, d SpaceDef, ifNotExists bool) (SpaceDef, error) {
	sp, err := d.api()
	if err != nil {
		return SpaceDef{}, err
	}
	var resp *datav1.CreateSpaceResponse
	err = c.invoke(ctx, "create space "+d.Name, callOptions{idempotent: ifNotExists}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).CreateSpace(ctx, &datav1.CreateSpaceRequest{Space: sp, IfNotExists: ifNotExists}, opts...)
		return err
	})
	if err != nil {
		return SpaceDef{}, err
	}
	_, _ = c.refresh(ctx)
	return spaceDef(resp.GetSpace())
}

// DropSpace removes a space; without force it is refused (ErrRefused)
// while the space holds tuples. It returns how many tuples it held.
func (c *Client) DropSpace(ctx context.Context, name string, force bool) (uint64, error) {
	var resp *datav1.DropSpaceResponse
	err := c.invoke(ctx, "drop space "+name, callOptions{}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).DropSpace(ctx, &datav1.DropSpaceRequest{Name: name, Force: force}, opts...)
		return err
	})
	if err != nil {
		return 0, err
	}
	_, _ = c.refresh(ctx)
	return resp.GetTuples(), nil
}

// Spaces lists the spaces, by id.
func (c *Client) Spaces(ctx context.Context) ([]SpaceDef, error) {
	var resp *datav1.ListSpacesResponse
	err := c.invoke(ctx, "list spaces", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = datav1.NewDataServiceClient(conn).ListSpaces(ctx, &datav1.ListSpacesRequest{}, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]SpaceDef, 0, len(resp.GetSpaces()))
	for _, sp := range resp.GetSpaces() {
		d, err := spaceDef(sp)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Count returns how many tuples a space holds in the cluster, each bucket
// counted once (proc.CountCluster: the built-in count_buckets on every
// replicaset's leader, summed, counted again while a bucket moved between
// two replicasets' counts, until ctx ends; then an ErrUnavailable error).
func (c *Client) Count(ctx context.Context, space string) (uint64, error) {
	rt := c.routingFor(ctx)
	if rt == nil {
		return 0, &Error{Op: "count " + space, Code: codes.Unavailable, Msg: "no instance sent the routing table (the bucket count)", kind: ErrUnavailable}
	}
	n, err := proc.CountCluster(ctx, rt.bucketCount, func(ctx context.Context) ([]tuple.Tuple, error) {
		res, err := c.MapCall(ctx, "count_buckets", tuple.Tuple{tuple.String(space)}, RW)
		if err != nil {
			return nil, err
		}
		results := make([]tuple.Tuple, len(res))
		for i, r := range res {
			results[i] = r.Result
		}
		return results, nil
	})
	switch {
	case errors.Is(err, proc.ErrCountInFlux):
		return 0, &Error{Op: "count " + space, Code: codes.Unavailable, Msg: err.Error(), kind: ErrUnavailable}
	case errors.Is(err, proc.ErrBadCount):
		return 0, &Error{Op: "count " + space, Msg: err.Error(), kind: ErrInternal}
	}
	return n, err
}

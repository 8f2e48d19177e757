package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// Users of a cluster run with certificates (docs/security.md): a user is
// the CN of a client certificate; the role, kept in the cluster, says
// what it may do. Only an admin may call these.

// Role names, as ParseRole reads them.
const (
	RoleReader = "reader"
	RoleWriter = "writer"
	RoleAdmin  = "admin"
)

// ParseRole reads admin, writer or reader.
func ParseRole(s string) (clusterv1.Role, error) {
	switch s {
	case RoleReader:
		return clusterv1.Role_ROLE_READER, nil
	case RoleWriter:
		return clusterv1.Role_ROLE_WRITER, nil
	case RoleAdmin:
		return clusterv1.Role_ROLE_ADMIN, nil
	}
	return 0, fmt.Errorf("%w: role %q: want admin, writer or reader", ErrInvalid, s)
}

// RoleName is ParseRole's inverse ("none" for an unknown role).
func RoleName(r clusterv1.Role) string {
	switch r {
	case clusterv1.Role_ROLE_READER:
		return RoleReader
	case clusterv1.Role_ROLE_WRITER:
		return RoleWriter
	case clusterv1.Role_ROLE_ADMIN:
		return RoleAdmin
	}
	return "none"
}

// CreateUser adds a user with a role (admin, writer or reader).
func (c *Client) CreateUser(ctx context.Context, name, role string) error {
	r, err := ParseRole(role)
	if err != nil {
		return err
	}
	return c.invoke(ctx, "create user", callOptions{}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := clusterService(conn).CreateUser(ctx, &clusterv1.CreateUserRequest{User: &clusterv1.User{Name: name, Role: r}}, opts...)
		return err
	})
}

// CreateUserWithPassword adds a user with a role and a password for the
// web console's login (the group-0 leader stores only its hash).
func (c *Client) CreateUserWithPassword(ctx context.Context, name, role, password string) error {
	r, err := ParseRole(role)
	if err != nil {
		return err
	}
	return c.invoke(ctx, "create user", callOptions{}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := clusterService(conn).CreateUser(ctx, &clusterv1.CreateUserRequest{User: &clusterv1.User{Name: name, Role: r}, Password: password}, opts...)
		return err
	})
}

// SetUserPassword sets a user's password for the web console's login;
// an empty one removes it.
func (c *Client) SetUserPassword(ctx context.Context, name, password string) error {
	return c.invoke(ctx, "set user password", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := clusterService(conn).SetUserPassword(ctx, &clusterv1.SetUserPasswordRequest{Name: name, Password: password}, opts...)
		return err
	})
}

// DropUser removes a user (root cannot be dropped). Its certificate
// stays valid until it expires, but the cluster refuses it every call.
func (c *Client) DropUser(ctx context.Context, name string) error {
	return c.invoke(ctx, "drop user", callOptions{}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := clusterService(conn).DropUser(ctx, &clusterv1.DropUserRequest{Name: name}, opts...)
		return err
	})
}

// SetUserRole changes a user's role.
func (c *Client) SetUserRole(ctx context.Context, name, role string) error {
	r, err := ParseRole(role)
	if err != nil {
		return err
	}
	return c.invoke(ctx, "set user role", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := clusterService(conn).SetUserRole(ctx, &clusterv1.SetUserRoleRequest{Name: name, Role: r}, opts...)
		return err
	})
}

// Users lists every user, root first.
func (c *Client) Users(ctx context.Context) ([]*clusterv1.User, error) {
	var resp *clusterv1.ListUsersResponse
	err := c.invoke(ctx, "list users", callOptions{idempotent: true}, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = clusterService(conn).ListUsers(ctx, &clusterv1.ListUsersRequest{}, opts...)
		return err
	})
	return resp.GetUsers(), err
}

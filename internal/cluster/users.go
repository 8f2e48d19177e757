package cluster

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// Users of a secure cluster: kept in group 0 (internal/meta/users.go);
// who may call these is the server's authorization's business.

func apiUser(u *metapb.User) *clusterv1.User {
	if u == nil {
		return nil
	}
	return &clusterv1.User{Name: u.GetName(), Role: clusterv1.Role(u.GetRole()), HasPassword: u.GetPasswordHash() != ""}
}

// hashPassword hashes a password sent for a user (here, on the group-0
// leader): group 0's log and state get only the hash. The error is an
// InvalidArgument status that says what is wrong with the password.
func hashPassword(user, pw string) (string, error) {
	h, err := auth.HashPassword(pw)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "user %q: %v", user, err)
	}
	return h, nil
}

// CreateUser implements clusterv1.ClusterServiceServer (on the group-0 leader).
func (s *Service) CreateUser(ctx context.Context, req *clusterv1.CreateUserRequest) (*clusterv1.CreateUserResponse, error) {
	var hash string
	if req.GetPassword() != "" {
		var err error
		if hash, err = hashPassword(req.GetUser().GetName(), req.GetPassword()); err != nil {
			return nil, err
		}
	}
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_CreateUser{CreateUser: &metapb.CreateUser{User: &metapb.User{
		Name: req.GetUser().GetName(), Role: metapb.UserRole(req.GetUser().GetRole()), PasswordHash: hash,
	}}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.CreateUserResponse{User: apiUser(res.User)}, nil
}

// DropUser implements clusterv1.ClusterServiceServer (on the group-0 leader).
func (s *Service) DropUser(ctx context.Context, req *clusterv1.DropUserRequest) (*clusterv1.DropUserResponse, error) {
	if _, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_DropUser{DropUser: &metapb.DropUser{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	return &clusterv1.DropUserResponse{}, nil
}

// SetUserRole implements clusterv1.ClusterServiceServer (on the group-0 leader).
func (s *Service) SetUserRole(ctx context.Context, req *clusterv1.SetUserRoleRequest) (*clusterv1.SetUserRoleResponse, error) {
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetUserRole{SetUserRole: &metapb.SetUserRole{
		Name: req.GetName(), Role: metapb.UserRole(req.GetRole()),
	}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.SetUserRoleResponse{User: apiUser(res.User)}, nil
}

// SetUserPassword implements clusterv1.ClusterServiceServer (on the group-0
// leader): the password is hashed here, and only the hash proposed.
func (s *Service) SetUserPassword(ctx context.Context, req *clusterv1.SetUserPasswordRequest) (*clusterv1.SetUserPasswordResponse, error) {
	var hash string
	if req.GetPassword() != "" {
		var err error
		if hash, err = hashPassword(req.GetName(), req.GetPassword()); err != nil {
			return nil, err
		}
	}
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetUserPassword{SetUserPassword: &metapb.SetUserPassword{
		Name: req.GetName(), PasswordHash: hash,
	}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.SetUserPasswordResponse{User: apiUser(res.User)}, nil
}

// ListUsers implements clusterv1.ClusterServiceServer (on the group-0 leader, so the list
// is current): root first, then every stored user by name.
func (s *Service) ListUsers(ctx context.Context, _ *clusterv1.ListUsersRequest) (*clusterv1.ListUsersResponse, error) {
	g0 := s.n.g0.Load()
	if g0 == nil {
		return nil, s.n.errNotRunning()
	}
	if err := g0.ReadIndex(ctx); err != nil {
		return nil, StatusError(err)
	}
	resp := &clusterv1.ListUsersResponse{Users: []*clusterv1.User{{Name: meta.RootUser, Role: clusterv1.Role_ROLE_ADMIN}}}
	for _, u := range s.n.meta.State().SortedUsers() {
		resp.Users = append(resp.Users, apiUser(u))
	}
	return resp, nil
}

package meta

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// Users of a secure cluster (docs/security.md): a user is the CN of a
// client certificate, and its role, kept here, says what it may do. root
// is implicit: always admin, never stored, never dropped or changed.

// RootUser is the user every cluster has.
const RootUser = "root"

// MaxUsers bounds the number of users of a cluster.
const MaxUsers = 10000

// userPattern is certs.CheckUser's (meta does not import the public
// packages' certificate code): 1-64 letters, digits, '_', '.' or '-'.
var userPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// ValidUserName reports whether s may name a user ("node" is the
// instances' certificate name and may not).
func ValidUserName(s string) bool { return userPattern.MatchString(s) && s != "node" }

// RoleName names a role as the CLI spells it.
func RoleName(r metapb.UserRole) string {
	switch r {
	case metapb.UserRole_USER_ROLE_READER:
		return "reader"
	case metapb.UserRole_USER_ROLE_WRITER:
		return "writer"
	case metapb.UserRole_USER_ROLE_ADMIN:
		return "admin"
	}
	return "none"
}

func validRole(r metapb.UserRole) bool {
	return r >= metapb.UserRole_USER_ROLE_READER && r <= metapb.UserRole_USER_ROLE_ADMIN
}

// UserRole returns a user's role; false when the cluster does not know the
// user. root is admin.
func (s *State) UserRole(name string) (metapb.UserRole, bool) {
	if name == RootUser {
		return metapb.UserRole_USER_ROLE_ADMIN, true
	}
	u, ok := s.Users[name]
	if !ok {
		return 0, false
	}
	return u.GetRole(), true
}

// SortedUsers returns every stored user by name (root is not stored).
func (s *State) SortedUsers() []*metapb.User {
	out := slices.Collect(maps.Values(s.Users))
	slices.SortFunc(out, func(a, b *metapb.User) int {
		switch {
		case a.GetName() < b.GetName():
			return -1
		case a.GetName() > b.GetName():
			return 1
		}
		return 0
	})
	return out
}

func (t *txn) createUser(c *metapb.CreateUser) Result {
	u := proto.CloneOf(c.GetUser())
	switch {
	case !ValidUserName(u.GetName()):
		return Result{Err: refuse(CodeInvalid, "invalid user name %q: use 1-64 letters, digits, '_', '.' or '-', starting with a letter, digit or '_' (and not \"node\")", u.GetName())}
	case u.GetName() == RootUser:
		return Result{Err: refuse(CodeAlreadyExists, "user root always exists and is admin")}
	case !validRole(u.GetRole()):
		return Result{Err: refuse(CodeInvalid, "user %q: no role given; use admin, writer or reader", u.GetName())}
	case !validPasswordHash(u.GetPasswordHash()):
		return Result{Err: refuse(CodeInvalid, "user %q: the password hash is not one the leader makes", u.GetName())}
	}
	if old := t.s.Users[u.GetName()]; old != nil {
		return Result{Err: refuse(CodeAlreadyExists, "user %q already exists with role %s; change it with `shardkit user set-role %s --role ROLE`", u.GetName(), RoleName(old.GetRole()), u.GetName())}
	}
	if len(t.s.Users) >= MaxUsers {
		return Result{Err: refuse(CodeFailedPrecondition, "the cluster has %d users, the most it may have", MaxUsers)}
	}
	t.putUser(u)
	return Result{User: u}
}

func (t *txn) dropUser(c *metapb.DropUser) Result {
	name := c.GetName()
	if name == RootUser {
		return Result{Err: refuse(CodeFailedPrecondition, "user root cannot be dropped")}
	}
	old := t.s.Users[name]
	if old == nil {
		return Result{Err: refuse(CodeNotFound, "no user %q", name)}
	}
	t.s.Users = maps.Clone(t.s.Users)
	delete(t.s.Users, name)
	if t.err == nil {
		t.err = t.b.Delete(keyUser(name), nil)
	}
	return Result{User: old}
}

func (t *txn) setUserRole(c *metapb.SetUserRole) Result {
	name := c.GetName()
	switch {
	case name == RootUser:
		return Result{Err: refuse(CodeFailedPrecondition, "user root is always admin; its role cannot change")}
	case !validRole(c.GetRole()):
		return Result{Err: refuse(CodeInvalid, "user %q: no role given; use admin, writer or reader", name)}
	}
	old := t.s.Users[name]
	if old == nil {
		return Result{Err: refuse(CodeNotFound, "no user %q; create it with `shardkit user create %s --role %s`", name, name, RoleName(c.GetRole()))}
	}
	u := proto.CloneOf(old)
	u.Role = c.GetRole()
	t.putUser(u)
	return Result{User: u}
}

// validPasswordHash: empty (no password) or an argon2id hash in the PHC
// string format, as internal/auth makes it (the leader hashes; a replica
// applying the command checks only its shape, which is all that meta may
// know of it).
func validPasswordHash(h string) bool {
	return h == "" || (strings.HasPrefix(h, "$argon2id$") && len(h) <= 512)
}

func (t *txn) setUserPassword(c *metapb.SetUserPassword) Result {
	name := c.GetName()
	if name == RootUser {
		return Result{Err: refuse(CodeFailedPrecondition, "user root has no password: it logs in with its client certificate; give the console an admin user of its own (`shardkit user create NAME --role admin --password-stdin`)")}
	}
	old := t.s.Users[name]
	switch {
	case old == nil:
		return Result{Err: refuse(CodeNotFound, "no user %q; create it with `shardkit user create %s --role ROLE --password-stdin`", name, name)}
	case !validPasswordHash(c.GetPasswordHash()):
		return Result{Err: refuse(CodeInvalid, "user %q: the password hash is not one the leader makes", name)}
	}
	u := proto.CloneOf(old)
	u.PasswordHash = c.GetPasswordHash()
	t.putUser(u)
	return Result{User: u}
}

func (t *txn) putUser(u *metapb.User) {
	t.s.Users = maps.Clone(t.s.Users)
	t.s.Users[u.GetName()] = u
	t.write(keyUser(u.GetName()), u)
}

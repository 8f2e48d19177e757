package meta

import (
	"testing"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

func createUserCmd(name string, role metapb.UserRole) *metapb.Command {
	return &metapb.Command{Op: &metapb.Command_CreateUser{CreateUser: &metapb.CreateUser{User: &metapb.User{Name: name, Role: role}}}}
}

func TestUsersAreValidatedAtApplyAndPersisted(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	reader, writer, admin := metapb.UserRole_USER_ROLE_READER, metapb.UserRole_USER_ROLE_WRITER, metapb.UserRole_USER_ROLE_ADMIN
	if r, ok := f.sm.State().UserRole("root"); !ok || r != admin {
		t.Fatalf("root: %v %v, want admin", r, ok)
	}
	if _, ok := f.sm.State().UserRole("alice"); ok {
		t.Fatal("alice known before she is created")
	}
	f.must(createUserCmd("alice", reader))
	f.refused(createUserCmd("alice", writer), `user "alice" already exists with role reader`)
	f.refused(createUserCmd("root", reader), "root always exists")
	f.refused(createUserCmd("node", reader), `invalid user name "node"`)
	f.refused(createUserCmd("a b", reader), "invalid user name")
	f.refused(createUserCmd("bob", 0), "no role given")
	f.refused(createUserCmd("bob", 9), "no role given")
	setRole := func(name string, r metapb.UserRole) *metapb.Command {
		return &metapb.Command{Op: &metapb.Command_SetUserRole{SetUserRole: &metapb.SetUserRole{Name: name, Role: r}}}
	}
	drop := func(name string) *metapb.Command {
		return &metapb.Command{Op: &metapb.Command_DropUser{DropUser: &metapb.DropUser{Name: name}}}
	}
	if u := f.must(setRole("alice", writer)).User; u.GetRole() != writer {
		t.Fatalf("set-role: %v", u)
	}
	f.refused(setRole("root", reader), "root is always admin")
	f.refused(setRole("bob", reader), `no user "bob"`)
	f.refused(setRole("alice", 0), "no role given")
	f.must(createUserCmd("bob", admin))
	f.must(drop("bob"))
	f.refused(drop("bob"), `no user "bob"`)
	f.refused(drop("root"), "root cannot be dropped")

	reloaded := New()
	if err := reloaded.Load(f.db); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*State{f.sm.State(), reloaded.State()} {
		if r, ok := st.UserRole("alice"); !ok || r != writer {
			t.Fatalf("alice: %v %v", r, ok)
		}
		if _, ok := st.UserRole("bob"); ok {
			t.Fatal("bob was dropped")
		}
		if n := len(st.SortedUsers()); n != 1 {
			t.Fatalf("%d users stored", n)
		}
	}
}

// A password hash is stored with the user, kept across a role change and
// a reload, replaced or removed; root has none; a hash of another shape is
// refused.
func TestUserPasswordHashes(t *testing.T) {
	f := newFixture(t)
	f.must(bootCmd(1, joinReq("a", "", nil)))
	const h1, h2 = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$a2V5", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdDI$a2V5Mg"
	setPw := func(name, h string) *metapb.Command {
		return &metapb.Command{Op: &metapb.Command_SetUserPassword{SetUserPassword: &metapb.SetUserPassword{Name: name, PasswordHash: h}}}
	}
	f.must(&metapb.Command{Op: &metapb.Command_CreateUser{CreateUser: &metapb.CreateUser{User: &metapb.User{
		Name: "ada", Role: metapb.UserRole_USER_ROLE_ADMIN, PasswordHash: h1}}}})
	f.refused(&metapb.Command{Op: &metapb.Command_CreateUser{CreateUser: &metapb.CreateUser{User: &metapb.User{
		Name: "eve", Role: metapb.UserRole_USER_ROLE_ADMIN, PasswordHash: "plaintext!"}}}}, "not one the leader makes")
	f.must(&metapb.Command{Op: &metapb.Command_SetUserRole{SetUserRole: &metapb.SetUserRole{Name: "ada", Role: metapb.UserRole_USER_ROLE_READER}}})
	if got := f.sm.State().Users["ada"].GetPasswordHash(); got != h1 {
		t.Fatalf("after set-role, the hash is %q", got)
	}
	f.must(setPw("ada", h2))
	f.refused(setPw("root", h2), "root has no password")
	f.refused(setPw("bob", h2), `no user "bob"`)
	f.refused(setPw("ada", "$2a$10$bcrypt"), "not one the leader makes")
	reloaded := New()
	if err := reloaded.Load(f.db); err != nil {
		t.Fatal(err)
	}
	if got := reloaded.State().Users["ada"].GetPasswordHash(); got != h2 {
		t.Fatalf("reloaded: the hash is %q", got)
	}
	f.must(setPw("ada", ""))
	if got := f.sm.State().Users["ada"].GetPasswordHash(); got != "" {
		t.Fatalf("removed: the hash is %q", got)
	}
}

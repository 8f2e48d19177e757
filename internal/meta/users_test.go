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

package auth_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/auth"
)

// A session lives until SessionTTL after its login, and ends at once when
// the user's password hash changes or is removed, or at a logout.
func TestSessionsExpireAndEnd(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	s := auth.NewSessions(func() time.Time { return now })
	id, sess := s.Create("rita", "h1")
	if !auth.ValidToken(id) || !auth.ValidToken(sess.CSRF) || id == sess.CSRF || sess.User != "rita" {
		t.Fatalf("session %q %+v", id, sess)
	}
	if _, ok := s.Get(id, "h1"); !ok {
		t.Fatal("a new session is not found")
	}
	now = now.Add(auth.SessionTTL - time.Second)
	if _, ok := s.Get(id, "h1"); !ok {
		t.Fatal("the session ended before its time")
	}
	now = now.Add(time.Second)
	if _, ok := s.Get(id, "h1"); ok {
		t.Fatal("the session outlived SessionTTL")
	}
	id2, _ := s.Create("rita", "h1")
	if _, ok := s.Get(id2, "h2"); ok {
		t.Fatal("the session survived a new password")
	}
	id3, _ := s.Create("ada", "h3")
	if _, ok := s.Get(id3, ""); ok {
		t.Fatal("the session survived the password's removal")
	}
	id4, _ := s.Create("ada", "h4")
	s.Delete(id4)
	if _, ok := s.Get(id4, "h4"); ok {
		t.Fatal("the session survived its logout")
	}
}

// A user may fail LoginBurst times, an address LoginAddressBurst times;
// then attempts are refused until the allowance grows back.
func TestLoginLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := auth.NewLoginLimiter(func() time.Time { return now })
	for i := range auth.LoginBurst {
		if why := l.Refusal("rita", "10.0.0.1"); why != "" {
			t.Fatalf("attempt %d refused: %s", i+1, why)
		}
		l.Failed("rita", "10.0.0.1")
	}
	if why := l.Refusal("rita", "10.0.0.2"); !strings.Contains(why, "too many failed logins for this user lately: try again in 12s") {
		t.Fatalf("rita after %d failures: %q", auth.LoginBurst, why)
	}
	if why := l.Refusal("ada", "10.0.0.1"); why != "" {
		t.Fatalf("another user from the same address: %q", why)
	}
	now = now.Add(auth.LoginEvery)
	if why := l.Refusal("rita", "10.0.0.1"); why != "" {
		t.Fatalf("rita after %s: %q", auth.LoginEvery, why)
	}
	for i := range auth.LoginAddressBurst {
		l.Failed("user"+string(rune('a'+i)), "10.0.0.9")
	}
	if why := l.Refusal("zed", "10.0.0.9"); !strings.Contains(why, "for this address") {
		t.Fatalf("an address after %d failures: %q", auth.LoginAddressBurst, why)
	}
}

// FuzzSessionCookie: whatever Cookie header a request carries, SessionID
// returns "" or a token of the right shape; nothing panics.
func FuzzSessionCookie(f *testing.F) {
	f.Add("shardkit_session=" + strings.Repeat("a", 43))
	f.Add("shardkit_session=" + strings.Repeat("a", 42) + "=; other=1")
	f.Add(`shardkit_session="` + strings.Repeat("Z", 43) + `"`)
	f.Add("shardkit_session=../../etc; shardkit_session=x")
	f.Fuzz(func(t *testing.T, header string) {
		r, err := http.NewRequest(http.MethodGet, "https://x/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Cookie", header)
		if id := auth.SessionID(r); id != "" && !auth.ValidToken(id) {
			t.Fatalf("SessionID(%q) = %q, not a token", header, id)
		}
		if auth.SameToken(header, "") || auth.SameToken("", header) {
			t.Fatal("an empty token matched")
		}
	})
}

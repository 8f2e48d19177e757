package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Sessions of the web console's password logins (docs/console.md): a
// user who logged in on an instance holds a random session id in a cookie
// (HttpOnly, Secure, SameSite=Strict) and sends its CSRF token with every
// request that changes something. Sessions live in the memory of the
// instance that made them: a restart ends them, and another instance does
// not know them.

// SessionCookie names the session cookie.
const SessionCookie = "shardkit_session"

// CSRFHeader carries a session's CSRF token on every request but GET and
// HEAD.
const CSRFHeader = "X-CSRF-Token"

// SessionTTL is how long a session lasts after the login.
const SessionTTL = 8 * time.Hour

// maxSessions bounds the sessions an instance keeps (the oldest go).
const maxSessions = 10000

// Session is one login.
type Session struct {
	User    string
	CSRF    string
	Expires time.Time
	// hash is the user's password hash at the login: a session ends when
	// the password changes or is removed.
	hash string
}

// Sessions keeps the sessions of one instance. Make it with NewSessions.
type Sessions struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]Session
}

// NewSessions returns an empty store telling the time with now (nil:
// time.Now).
func NewSessions(now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	return &Sessions{now: now, m: map[string]Session{}}
}

// token is 32 random bytes, base64url: a session id or a CSRF token.
func token() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// tokenLen is the length of a token.
const tokenLen = 43

// Create starts a session for user, whose password hash is hash now, and
// returns its id.
func (s *Sessions) Create(user, hash string) (string, Session) {
	id := token()
	sess := Session{User: user, CSRF: token(), Expires: s.now().Add(SessionTTL), hash: hash}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= maxSessions {
		for k, v := range s.m {
			if !now.Before(v.Expires) {
				delete(s.m, k)
			}
		}
		for k := range s.m { // still full: any one goes
			if len(s.m) < maxSessions {
				break
			}
			delete(s.m, k)
		}
	}
	s.m[id] = sess
	return id, sess
}

// Get returns the live session id names; hash is the user's password hash
// now, and a session made with another one has ended.
func (s *Sessions) Get(id, hash string) (Session, bool) {
	if !ValidToken(id) {
		return Session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[id]
	if !ok {
		return Session{}, false
	}
	if !s.now().Before(sess.Expires) || sess.hash != hash || hash == "" {
		delete(s.m, id)
		return Session{}, false
	}
	return sess, true
}

// Delete ends a session.
func (s *Sessions) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// ValidToken reports whether s has the shape of a token this package
// makes (a session id, a CSRF token): 43 characters of base64url.
func ValidToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// SessionID reads the session cookie of r ("" when there is none or it is
// not a token).
func SessionID(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil || !ValidToken(c.Value) {
		return ""
	}
	return c.Value
}

// SameToken compares two tokens in constant time; an empty one matches
// nothing.
func SameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// NewToken returns a new random token (a login form's CSRF token).
func NewToken() string { return token() }

// LoginLimiter rate-limits failed logins, per user and per client
// address: a user may fail LoginBurst times at once, an address
// LoginAddressBurst times, then each once every LoginEvery. A refused
// attempt is not checked at all.
type LoginLimiter struct {
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*rate.Limiter
}

// The failed-login allowance of a user, and of a client address.
const (
	LoginBurst        = 5  // failures of one user
	LoginAddressBurst = 20 // failures from one address (a NAT may hide several people)
	LoginEvery        = 12 * time.Second
)

// maxLimiterKeys bounds the limiter's memory: past it, the keys whose
// allowance is whole again are forgotten.
const maxLimiterKeys = 10000

// NewLoginLimiter returns a limiter telling the time with now (nil:
// time.Now).
func NewLoginLimiter(now func() time.Time) *LoginLimiter {
	if now == nil {
		now = time.Now
	}
	return &LoginLimiter{now: now, keys: map[string]*rate.Limiter{}}
}

func (l *LoginLimiter) limiter(key string, burst int) *rate.Limiter {
	lim := l.keys[key]
	if lim == nil {
		if len(l.keys) >= maxLimiterKeys {
			now := l.now()
			for k, v := range l.keys {
				if v.TokensAt(now) >= float64(v.Burst()) {
					delete(l.keys, k)
				}
			}
		}
		lim = rate.NewLimiter(rate.Every(LoginEvery), burst)
		l.keys[key] = lim
	}
	return lim
}

// Refusal says why a login of user from addr is not even checked now (""
// when it may be): too many failed logins lately.
func (l *LoginLimiter) Refusal(user, addr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, k := range []struct {
		what, key string
		burst     int
	}{{"user", user, LoginBurst}, {"address", addr, LoginAddressBurst}} {
		lim := l.limiter(k.what+" "+k.key, k.burst)
		if lim.TokensAt(now) < 1 {
			wait := time.Duration((1 - lim.TokensAt(now)) * float64(LoginEvery)).Round(time.Second)
			if wait < time.Second {
				wait = time.Second
			}
			return fmt.Sprintf("too many failed logins for this %s lately: try again in %s", k.what, wait)
		}
	}
	return ""
}

// Failed counts a failed login of user from addr.
func (l *LoginLimiter) Failed(user, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.limiter("user "+user, LoginBurst).AllowN(now, 1)
	l.limiter("address "+addr, LoginAddressBurst).AllowN(now, 1)
}

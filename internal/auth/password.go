package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Passwords of users for the web console's login (docs/console.md). A
// password is hashed with argon2id (RFC 9106) on the group-0 leader; group
// 0 stores only the hash, encoded as the PHC string format
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>" (base64
// without padding), so that the parameters can change for new hashes and
// old ones still verify.

// The parameters of new hashes: OWASP's argon2id minimum (19 MiB, two
// passes, one lane), so that a login costs a few tens of milliseconds and
// 19 MiB on a small instance.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// Password lengths accepted (in bytes).
const (
	MinPasswordLen = 8
	MaxPasswordLen = 256
)

// CheckPassword says what is wrong with a password (nil: nothing).
func CheckPassword(pw string) error {
	switch {
	case len(pw) < MinPasswordLen:
		return fmt.Errorf("the password is too short: it needs at least %d characters", MinPasswordLen)
	case len(pw) > MaxPasswordLen:
		return fmt.Errorf("the password is too long: at most %d bytes", MaxPasswordLen)
	case !utf8.ValidString(pw):
		return errors.New("the password is not valid UTF-8")
	case strings.ContainsAny(pw, "\r\n\x00"):
		return errors.New("the password holds a line break or a NUL character")
	}
	return nil
}

// HashPassword checks pw and returns its argon2id hash with a new random
// salt.
func HashPassword(pw string) (string, error) {
	if err := CheckPassword(pw); err != nil {
		return "", err
	}
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// Bounds on the parameters of a stored hash, so that a damaged or hostile
// record cannot make a login take unbounded memory or time.
const (
	maxMemoryKiB = 256 << 10 // 256 MiB
	maxTime      = 8
	maxThreads   = 16
)

// parsedHash is a hash's parameters, salt and key.
type parsedHash struct {
	memory  uint32
	time    uint32
	threads uint8
	salt    []byte
	key     []byte
}

// ErrBadHash: a stored hash is not one HashPassword makes.
var ErrBadHash = errors.New("not an argon2id password hash")

func parseHash(h string) (parsedHash, error) {
	var p parsedHash
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, ErrBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version || parts[2] != fmt.Sprintf("v=%d", version) {
		return p, fmt.Errorf("%w: version %q", ErrBadHash, parts[2])
	}
	var threads uint32
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &threads); err != nil ||
		parts[3] != fmt.Sprintf("m=%d,t=%d,p=%d", p.memory, p.time, threads) {
		return p, fmt.Errorf("%w: parameters %q", ErrBadHash, parts[3])
	}
	if p.memory == 0 || p.memory > maxMemoryKiB || p.time == 0 || p.time > maxTime || threads == 0 || threads > maxThreads || p.memory < 8*threads {
		return p, fmt.Errorf("%w: parameters %q out of bounds", ErrBadHash, parts[3])
	}
	p.threads = uint8(threads)
	var err error
	if p.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil || len(p.salt) < 8 || len(p.salt) > 64 {
		return p, fmt.Errorf("%w: salt", ErrBadHash)
	}
	if p.key, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil || len(p.key) < 16 || len(p.key) > 64 {
		return p, fmt.Errorf("%w: key", ErrBadHash)
	}
	return p, nil
}

// CheckHash says whether h is a hash HashPassword could have made (group 0
// checks a stored hash with it).
func CheckHash(h string) error {
	_, err := parseHash(h)
	return err
}

// VerifyPassword reports whether pw is the password hashed as h (false
// for a malformed h), comparing in constant time.
func VerifyPassword(h, pw string) bool {
	p, err := parseHash(h)
	if err != nil || len(pw) > MaxPasswordLen {
		return false
	}
	key := argon2.IDKey([]byte(pw), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(key, p.key) == 1
}

package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/quorate/quorate/yamllist"
)

// A token file is YAML:
//
//	tokens:
//	  - caller: gateway-eu
//	    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//	  - caller: ops
//	    sha256: ...            # hex SHA-256 of the token (HashToken; upper or lower case)
//
// It is read strictly: an unknown, repeated or missing field, a hash that is
// not 64 hexadecimal digits, a caller listed twice or a hash listed twice is
// an error naming the file, line, entry and field. One token per caller.

// tokenFile is the shape of a token file. Its messages never quote a value:
// one might be a token pasted where its hash belongs.
var tokenFile = yamllist.Spec{
	Key:       "tokens",
	Fields:    []string{"caller", "sha256"},
	Required:  []string{"caller", "sha256"},
	NameField: "caller",
	Example:   "caller and sha256",
}

// TokenPrefix starts every token NewToken makes, so that a leaked token is
// recognisable (by secret scanners, in logs). Lookup accepts any token.
const TokenPrefix = "qrt_"

// Tokens is a parsed token file: immutable, safe for concurrent use.
type Tokens struct {
	byHash  map[[sha256.Size]byte]string // SHA-256 of the token → caller
	callers []string                     // sorted
}

// HashToken returns the hex SHA-256 of token: what a token file stores.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// NewToken returns a new random bearer token: TokenPrefix and 256 random
// bits in unpadded base64url, 47 characters in all.
func NewToken() string {
	var b [32]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the process instead
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Lookup returns the caller whose token is token. It hashes token first
// and looks the hash up, so its timing depends only on the hash.
func (t *Tokens) Lookup(token string) (caller string, ok bool) {
	if t == nil || token == "" {
		return "", false
	}
	caller, ok = t.byHash[sha256.Sum256([]byte(token))]
	return caller, ok
}

// Callers returns the callers of the file, sorted.
func (t *Tokens) Callers() []string {
	if t == nil {
		return nil
	}
	return append([]string(nil), t.callers...)
}

// Len returns how many tokens the file lists.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byHash)
}

// ReadTokens reads and parses the token file at path.
func ReadTokens(path string) (*Tokens, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTokens(path, data)
}

// ParseTokens parses a token file; file names it in errors.
func ParseTokens(file string, data []byte) (*Tokens, error) {
	t := &Tokens{byHash: make(map[[sha256.Size]byte]string)}
	callers := make(map[string]int)           // caller → line
	hashAt := make(map[[sha256.Size]byte]int) // hash → line
	err := tokenFile.Parse(file, data, func(e *yamllist.Entry) error {
		caller, err := checkEntry(e, callers, "one token per caller")
		if err != nil {
			return err
		}
		text, err := e.Scalar("sha256")
		if err != nil {
			return err
		}
		sum, err := parseHash(text)
		if err != nil {
			return e.Fail(e.Line("sha256"), "sha256", nil, "%v", err)
		}
		if first, dup := hashAt[sum]; dup {
			return e.Fail(e.Line("sha256"), "sha256", nil, "the same hash as the entry at line %d: every caller needs its own token", first)
		}
		hashAt[sum] = e.Line("sha256")
		t.byHash[sum] = caller
		t.callers = append(t.callers, caller)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(t.callers)
	return t, nil
}

// parseHash decodes 64 hexadecimal digits. Its errors never repeat the
// text, which might be a token pasted where its hash belongs.
func parseHash(text string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if len(text) != 2*sha256.Size {
		hint := ""
		if strings.HasPrefix(text, TokenPrefix) {
			hint = " (this looks like a token: store its hash, never the token)"
		}
		return sum, fmt.Errorf("must be %d hexadecimal digits, the SHA-256 of the token, got %d characters%s", 2*sha256.Size, len(text), hint)
	}
	if _, err := hex.Decode(sum[:], []byte(text)); err != nil {
		return sum, fmt.Errorf("must be %d hexadecimal digits (0-9, a-f), the SHA-256 of the token", 2*sha256.Size)
	}
	return sum, nil
}

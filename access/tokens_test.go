package access

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHashToken(t *testing.T) {
	// SHA-256 of "test", as sha256sum prints it.
	if got, want := HashToken("test"), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"; got != want {
		t.Fatalf("HashToken(test) = %s, want %s", got, want)
	}
}

func TestNewToken(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		tok := NewToken()
		if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != 47 {
			t.Fatalf("NewToken() = %q: want %q and 43 more characters", tok, TokenPrefix)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, TokenPrefix))
		if err != nil || len(raw) != 32 {
			t.Fatalf("NewToken() = %q: not 32 bytes of base64url (%v)", tok, err)
		}
		if _, ok := BearerToken("Bearer " + tok); !ok {
			t.Fatalf("NewToken() = %q is not a valid bearer token", tok)
		}
		if seen[tok] {
			t.Fatalf("NewToken() repeated %q", tok)
		}
		seen[tok] = true
	}
}

func TestTokensLookup(t *testing.T) {
	eu, us := NewToken(), NewToken()
	path := writeFile(t, t.TempDir(), "tokens.yaml", "tokens:\n"+
		"  - caller: gateway-eu\n    sha256: "+HashToken(eu)+"\n"+
		"  - sha256: "+strings.ToUpper(HashToken(us))+"   # upper case is fine\n    caller: gateway-us\n")
	toks, err := ReadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := toks.Callers(); strings.Join(got, ",") != "gateway-eu,gateway-us" || toks.Len() != 2 {
		t.Fatalf("Callers() = %v, Len() = %d", got, toks.Len())
	}
	flipped := []byte(eu)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		token, caller string
	}{
		{eu, "gateway-eu"},
		{us, "gateway-us"},
		{"", ""},
		{HashToken(eu), ""}, // the hash is not the token
		{eu[:len(eu)-1], ""},
		{eu + "x", ""},
		{string(flipped), ""},
		{" " + eu, ""},
		{NewToken(), ""},
	} {
		caller, ok := toks.Lookup(tc.token)
		if caller != tc.caller || ok != (tc.caller != "") {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tc.token, caller, ok, tc.caller)
		}
	}
	var none *Tokens
	if c, ok := none.Lookup(eu); ok || c != "" || none.Len() != 0 || none.Callers() != nil {
		t.Errorf("nil Tokens: Lookup = %q, %v", c, ok)
	}
}

func TestReadTokensMissingAndTooLarge(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadTokens(filepath.Join(dir, "absent.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v, want ErrNotExist", err)
	}
	big := writeFile(t, dir, "big.yaml", "# "+strings.Repeat("x", MaxFileBytes)+"\n")
	var fe *FileError
	if _, err := ReadTokens(big); !errors.As(err, &fe) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("large file: %v", err)
	}
}

func TestParseTokensErrors(t *testing.T) {
	h1, h2 := HashToken("one"), HashToken("two")
	tok := NewToken()
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error
		notWant    string   // must not appear (a secret)
	}{
		{"empty", "", []string{"f.yaml: ", "empty file", `"tokens"`}, ""},
		{"syntax", "tokens:\n  - caller: [a\n", []string{"f.yaml:", "invalid YAML"}, ""},
		{"two documents", "tokens:\n  - {caller: a, sha256: " + h1 + "}\n---\ntokens: []\n", []string{"f.yaml:3:", "more than one YAML document"}, ""},
		{"not a mapping", "- a\n", []string{"f.yaml:1:", "expected a mapping"}, ""},
		{"unknown top field", "tokens:\n  - {caller: a, sha256: " + h1 + "}\nusers: []\n", []string{"f.yaml:3:", "users: unknown field"}, ""},
		{"repeated top field", "tokens:\n  - {caller: a, sha256: " + h1 + "}\ntokens:\n  - {caller: b, sha256: " + h2 + "}\n", []string{"f.yaml:3:", "tokens: repeated field"}, ""},
		{"tokens not a list", "tokens: a\n", []string{"f.yaml:1:", "tokens: expected a list"}, ""},
		{"no tokens", "tokens: []\n", []string{"tokens: no entries"}, ""},
		{"entry not a mapping", "tokens:\n  - a\n", []string{"f.yaml:2:", "tokens[0]: expected a mapping of caller, sha256"}, ""},
		{"unknown field", "tokens:\n  - caller: a\n    sha256: " + h1 + "\n    token: x\n", []string{"f.yaml:4:", "tokens[0] (a): token: unknown field"}, ""},
		{"repeated field", "tokens:\n  - caller: a\n    caller: b\n    sha256: " + h1 + "\n", []string{"f.yaml:3:", "caller: repeated field (first at line 2)"}, ""},
		{"missing caller", "tokens:\n  - sha256: " + h1 + "\n", []string{"f.yaml:2:", "tokens[0]: caller: missing"}, ""},
		{"missing sha256", "tokens:\n  - {caller: a, sha256: " + h1 + "}\n  - caller: b\n", []string{"f.yaml:3:", "tokens[1] (b): sha256: missing"}, ""},
		{"null caller", "tokens:\n  - caller:\n    sha256: " + h1 + "\n", []string{"f.yaml:2:", "caller: no value"}, ""},
		{"caller a list", "tokens:\n  - caller: [a]\n    sha256: " + h1 + "\n", []string{"f.yaml:2:", "caller: expected a single value"}, ""},
		{"caller spaces", "tokens:\n  - caller: ' a'\n    sha256: " + h1 + "\n", []string{"f.yaml:2:", "caller: ", "leading or trailing spaces"}, ""},
		{"caller too long", "tokens:\n  - caller: " + strings.Repeat("c", MaxCallerBytes+1) + "\n    sha256: " + h1 + "\n", []string{"f.yaml:2:", "caller: caller name is 129 bytes; at most 128"}, ""},
		{"caller control", "tokens:\n  - caller: \"a\\tb\"\n    sha256: " + h1 + "\n", []string{"caller: ", "control character"}, ""},
		{"hash short", "tokens:\n  - caller: a\n    sha256: " + h1[:63] + "\n", []string{"f.yaml:3:", "tokens[0] (a): sha256: must be 64 hexadecimal digits", "got 63 characters"}, h1[:63]},
		{"hash not hex", "tokens:\n  - caller: a\n    sha256: " + strings.Repeat("g", 64) + "\n", []string{"f.yaml:3:", "sha256: must be 64 hexadecimal digits (0-9, a-f)"}, "gggg"},
		{"token instead of hash", "tokens:\n  - caller: a\n    sha256: " + tok + "\n", []string{"sha256: ", "this looks like a token"}, tok},
		{"hash a list", "tokens:\n  - caller: a\n    sha256: [" + h1 + "]\n", []string{"f.yaml:3:", "sha256: expected a single value"}, h1},
		{"duplicate caller", "tokens:\n  - caller: a\n    sha256: " + h1 + "\n  - caller: a\n    sha256: " + h2 + "\n", []string{"f.yaml:4:", "tokens[1] (a): caller: caller listed twice (first at line 2)"}, ""},
		{"duplicate hash", "tokens:\n  - caller: a\n    sha256: " + h1 + "\n  - caller: b\n    sha256: " + strings.ToUpper(h1) + "\n", []string{"f.yaml:5:", "tokens[1] (b): sha256: the same hash as the entry at line 3"}, h1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toks, err := ParseTokens("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("parsed into %v; want an error", toks.Callers())
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("%v: not a *FileError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.notWant)) {
				t.Errorf("error %q repeats the secret", err)
			}
		})
	}
}

func TestParseTokensAliases(t *testing.T) {
	h := HashToken("one")
	toks, err := ParseTokens("f.yaml", []byte("x: &e {caller: a, sha256: "+h+"}\n"))
	if err == nil {
		t.Fatalf("parsed %v", toks.Callers())
	}
	toks, err = ParseTokens("f.yaml", []byte("tokens:\n  - &e {caller: a, sha256: "+h+"}\n  - *e\n"))
	if err == nil || !strings.Contains(err.Error(), "caller listed twice") {
		t.Fatalf("an alias repeating an entry: %v", err)
	}
}

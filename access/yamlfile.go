package access

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/quorate/quorate/yamllist"
)

// MaxFileBytes bounds a token or access file: both are small.
const MaxFileBytes = 4 << 20

// MaxCallerBytes bounds a caller name; it is the request-ID namespace's own
// bound, so that every caller an identity yields fits a request's caller.
const MaxCallerBytes = 128

// FileError is a problem in a token or access file: the list files' one
// error type, whose Name is the entry's caller. Test for it with errors.As;
// it unwraps to its cause (a YAML or I/O error), if any. It never repeats a
// token hash, in case a token was pasted where its hash belongs.
type FileError = yamllist.Error

// readFile reads the file at path, refusing one larger than MaxFileBytes.
func readFile(path string) ([]byte, error) {
	return yamllist.ReadFile(path, MaxFileBytes)
}

// checkEntry checks a token or access file entry's fields and returns its
// caller, refusing one already in seen (caller → line), which it then
// records; twice says what to do instead of listing a caller twice.
func checkEntry(e *yamllist.Entry, seen map[string]int, twice string) (string, error) {
	if err := e.Check(nil); err != nil {
		return "", err
	}
	caller, err := e.Scalar("caller")
	if err != nil {
		return "", err
	}
	if err := checkCaller(caller); err != nil {
		return "", e.Fail(e.Line("caller"), "caller", nil, "%v", err)
	}
	if first, dup := seen[caller]; dup {
		return "", e.Fail(e.Line("caller"), "caller", nil, "caller listed twice (first at line %d); %s", first, twice)
	}
	seen[caller] = e.Line("caller")
	return caller, nil
}

// checkCaller checks a caller name: 1 to MaxCallerBytes bytes of UTF-8,
// with no control characters and no surrounding spaces.
func checkCaller(c string) error {
	switch {
	case c == "":
		return errors.New("empty caller name")
	case len(c) > MaxCallerBytes:
		return fmt.Errorf("caller name is %d bytes; at most %d", len(c), MaxCallerBytes)
	case !utf8.ValidString(c):
		return errors.New("caller name is not valid UTF-8")
	case strings.TrimSpace(c) != c:
		return fmt.Errorf("caller name %s has leading or trailing spaces", quote(c))
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return fmt.Errorf("caller name %s has a control character", quote(c))
	}
	return nil
}

// quote quotes s for an error message, cut to 64 bytes: errors repeat at
// most that much of a string a client sent.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

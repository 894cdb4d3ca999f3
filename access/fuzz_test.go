package access

import "testing"

// FuzzParseFiles checks that no input makes a parser panic, and that what
// parses holds only valid callers.
func FuzzParseFiles(f *testing.F) {
	f.Add([]byte(exampleRules))
	f.Add([]byte(rulesBad))
	f.Add([]byte("tokens:\n  - caller: gateway-eu\n    sha256: " + HashToken("test") + "\n"))
	f.Add([]byte("tokens:\n  - &e {caller: a, sha256: " + HashToken("x") + "}\n  - *e\n"))
	f.Add([]byte("callers: &c [*c]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := ParseRules("f.yaml", data); err == nil {
			for _, c := range r.Callers() {
				if err := checkCaller(c); err != nil {
					t.Fatalf("access file accepted caller %q: %v", c, err)
				}
				if g, _ := r.Lookup(c); len(g.Roles()) == 0 {
					t.Fatalf("caller %q has no role", c)
				}
			}
		}
		if toks, err := ParseTokens("f.yaml", data); err == nil {
			for _, c := range toks.Callers() {
				if err := checkCaller(c); err != nil {
					t.Fatalf("token file accepted caller %q: %v", c, err)
				}
			}
		}
	})
}

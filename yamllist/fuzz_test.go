package yamllist

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds random bytes to Parse. It must never panic; it must
// answer either entries or an *Error that names the file (and the list,
// when about one entry); and what the strict Spec accepts, the one with
// NullUnset accepts too, with the same entries.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"items:\n  - name: a\n    tags: [x, y]\n    count: 3\n    on: true\n    every: 1m\n",
		"items:\n  - &b {name: b}\n  - *b\n",
		"items:\n  - name: a\n    count: ~\n",
		"items: &c [*c]\n",
		"a: &a [*a]\n",
		"items:\n  - name: a\n---\nitems: []\n",
		"items:\n  - {name: a, ? [k] : v, count: !!int 0x10, every: !!str 1s}\n",
		"",
		"items: [\n",
		"\xff\xfe items:\n\t- name: \x00\n",
	} {
		f.Add([]byte(seed))
	}
	lenient := testSpec
	lenient.NullUnset, lenient.ShowValues = true, true
	f.Fuzz(func(t *testing.T, data []byte) {
		var got [2][]item
		for i, s := range []*Spec{&testSpec, &lenient} {
			items, err := parseItems(s, string(data))
			if err != nil {
				var fe *Error
				if !errors.As(err, &fe) {
					t.Fatalf("error %v (%T) is not an *Error", err, err)
				}
				if !strings.HasPrefix(err.Error(), "f.yaml") || (fe.Index >= 0) != (fe.List == "items") {
					t.Fatalf("error %q (%#v) does not name the file or its list", err, fe)
				}
				if items != nil {
					t.Fatalf("got entries and an error %v", err)
				}
				continue
			}
			if len(items) == 0 {
				t.Fatal("accepted a file without entries")
			}
			got[i] = items
		}
		if got[0] != nil && !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("strict accepted %+v, lenient %+v", got[0], got[1])
		}
	})
}

package ratelimitheadertest

import "testing"

func TestParseList(t *testing.T) {
	good := `"a";q=100;w=60, "b\"c";q=5,"d";r=-1, "e";q=2;qu="concurrent-requests";quorate-burst=3`
	items, err := ParseList(good)
	if err != nil || len(items) != 4 || items[1].Name != `b"c` || items[0].Params["w"] != 60 || items[2].Params["r"] != -1 ||
		items[3].Strings["qu"] != "concurrent-requests" || items[3].Params["quorate-burst"] != 3 {
		t.Fatalf("parse %s: %+v, %v", good, items, err)
	}
	for _, bad := range []string{``, `a;q=1`, `"a";q=1.5`, `"a";q=`, `"a",`, `"a";Q=1`, `"a" "b"`, `"a";q=1234567890123456`,
		`"a";qu="x`, `"a";qu=x`, `"a";-b=1`} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}

package apiflags

import (
	"slices"
	"testing"
)

func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":         "http://127.0.0.1:7070",
		"http://127.0.0.1:7070/": "http://127.0.0.1:7070",
		"https://q.example:443":  "https://q.example:443",
		" localhost:1 ":          "http://localhost:1",
	} {
		if got, err := ServerURL(in); err != nil || got != want {
			t.Errorf("ServerURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ftp://x", "http://", "http://h:1/?q=1"} {
		if got, err := ServerURL(in); err == nil {
			t.Errorf("ServerURL(%q) = %q, want an error", in, got)
		}
	}
}

func TestServerList(t *testing.T) {
	got, err := ServerURLs("127.0.0.1:7070, http://127.0.0.1:7071/")
	if want := []string{"http://127.0.0.1:7070", "http://127.0.0.1:7071"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ServerURLs = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"a:1,", ",a:1", "a:1,ftp://b"} {
		if _, err := ServerURLs(bad); err == nil {
			t.Errorf("ServerURLs(%q): want an error", bad)
		}
	}
}

package jepsen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readTimeline(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHTMLTimelines(t *testing.T) {
	ops := []Op{
		admitAt("a", 0, "hot-key-7", 0, 20, OutcomeAllowed, 4, 5),
		admitAt("b", 1, "hot-key-7", 5, 25, OutcomeAllowed, 4, 6), // double spend
		admitAt("u", 2, "hot-key-7", 5, 30, OutcomeUnknown, 0, 0),
		admitAt("x", 0, "calm/key", 40, 50, OutcomeAllowed, 4, 45),
	}
	faults := []Fault{
		{Kind: "kill-leader", Node: "n2", Start: linWall.Add(10 * time.Millisecond), End: linWall.Add(15 * time.Millisecond)},
		{Kind: "pause", Node: "n3", Start: linWall.Add(time.Hour), End: linWall.Add(time.Hour + time.Second)}, // outside every key
	}
	v, res := CheckLinearizable(ops, bucketSpec(5))
	if v.OK {
		t.Fatalf("double spend not reported: %+v", v)
	}
	dir := t.TempDir()

	files, err := WriteLinearHTML(filepath.Join(dir, "timelines"), res, faults, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || filepath.Base(files[0]) != "token_bucket-hot-key-7.html" {
		t.Fatalf("only the failing key's timeline expected: %v", files)
	}
	page := readTimeline(t, files[0])
	for _, want := range []string{"hot-key-7", "nemesis", "kill-leader n2", "illegal", "never answered"} {
		if !strings.Contains(page, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	if strings.Contains(page, "pause n3") {
		t.Errorf("a fault outside the key's history is drawn")
	}

	all, err := WriteLinearHTML(filepath.Join(dir, "all"), res, faults, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || filepath.Base(all[1]) != "token_bucket-calm_key.html" {
		t.Fatalf("every key expected, failing first: %v", all)
	}
	if page := readTimeline(t, all[1]); !strings.Contains(page, "calm/key") || !strings.Contains(page, "key calm/key: ok") {
		t.Errorf("timeline of calm/key lacks its name or outcome")
	}

	// Nothing failed: every key, even when asked for the failing ones.
	_, ok := CheckLinearizable(ops[3:], bucketSpec(5))
	if files, err := WriteLinearHTML(filepath.Join(dir, "ok"), ok, nil, true); err != nil || len(files) != 1 {
		t.Fatalf("files %v, err %v", files, err)
	}

	// Fixed windows: one partition per window in one page.
	spec := LinearSpec{Algorithm: "fixed_window", Limit: 1, Window: time.Second}
	_, fw := CheckLinearizable([]Op{
		admitAt("a", 0, "w", 0, 10, OutcomeAllowed, 0, 5),
		admitAt("b", 0, "w", 1000, 1010, OutcomeAllowed, 0, 1005),
	}, spec)
	if files, err := WriteLinearHTML(filepath.Join(dir, "fw"), fw, faults, true); err != nil || len(files) != 1 ||
		!strings.Contains(readTimeline(t, files[0]), "left in window") {
		t.Fatalf("fixed window timeline: %v %v", files, err)
	}

	index := filepath.Join(dir, "index.html")
	summary := "seed: 1\nFAIL token_bucket/linearizable: <bad> & worse\nPASS leases: ok\n"
	if err := WriteIndexHTML(index, "Quorate run", summary, append([]string{"timelines/rel.html"}, all...)); err != nil {
		t.Fatal(err)
	}
	page = readTimeline(t, index)
	for _, want := range []string{"<title>Quorate run</title>", `href="timelines/rel.html"`, `href="all/token_bucket-hot-key-7.html"`,
		`<span class="fail">FAIL token_bucket/linearizable: &lt;bad&gt; &amp; worse</span>`, "PASS leases: ok"} {
		if !strings.Contains(page, want) {
			t.Errorf("index lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http") {
		t.Errorf("index must be self-contained")
	}
}

func TestHTMLCapsFiles(t *testing.T) {
	var ops []Op
	for i := range maxTimelines + 5 {
		ops = append(ops, admitAt("a", 0, "key-"+string(rune('A'+i)), 0, 10, OutcomeAllowed, 0, 5))
	}
	_, res := CheckLinearizable(ops, bucketSpec(1))
	files, err := WriteLinearHTML(t.TempDir(), res, nil, false)
	if err != nil || len(files) != maxTimelines {
		t.Fatalf("%d files (err %v), want %d", len(files), err, maxTimelines)
	}
	if files, err := WriteLinearHTML(t.TempDir(), nil, nil, true); err != nil || files != nil {
		t.Fatalf("nil result: %v %v", files, err)
	}
}

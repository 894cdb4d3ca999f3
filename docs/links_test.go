package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// documents lists the Markdown files whose links are checked, relative to
// root: README.md, docs/*.md and every DESIGN.md.
func documents(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "data" || d.Name() == ".cache" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "DESIGN.md" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			if rel != filepath.Join("docs", "DESIGN.md") {
				files = append(files, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// TestLinksResolve checks every relative link of README.md, docs/*.md and
// the DESIGN.md files.
func TestLinksResolve(t *testing.T) {
	files := documents(t, repoRoot)
	if len(files) < 10 {
		t.Fatalf("found only %d documents to check: %q", len(files), files)
	}
	for _, p := range checkLinks(repoRoot, files) {
		t.Error(p)
	}
}

// TestTablesOfContents checks that every topic document of docs/ opens
// with a table of contents that links each of its second-level headings.
func TestTablesOfContents(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range docs {
		if filepath.Base(d) == "DESIGN.md" {
			continue
		}
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkContents(string(b)) {
			t.Errorf("%s: %s", filepath.Join("docs", filepath.Base(d)), p)
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("checked the contents of %d documents of docs/, want at least 10", checked)
	}
}

// TestCheckLinksFindsBrokenLinks runs the checker on documents made for
// it: it reports each broken link, and only those.
func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", strings.Join([]string{
		"# Title",
		"See [the guide](docs/guide.md#two-words), [again](docs/guide.md#two-words-1),",
		"[a section](#a-b_c), [code](pkg/x.go#L3-L9), [dir](pkg/), ![img](docs/p.png)",
		"[https](https://example.com/#nothing) and <https://example.com>.",
		"Broken: [missing file](docs/nothing.md), [missing anchor](docs/guide.md#three)",
		"[bad line](pkg/x.go#top) [ref]",
		"`[not a link](nowhere.md)`",
		"```",
		"[not a link either](nowhere.md)",
		"```",
		"## A `b_c`!",
		"",
		"[ref]: docs/guide.md#nope",
		"A link whose text wraps: [the",
		"guide](docs/guide.md#two-words) and [a broken",
		"one](docs/guide.md#wrapped), `code that wraps [x](",
		"nowhere.md)` and slots [A,B) beside [dir](pkg/).",
	}, "\n"))
	write("docs/guide.md", "# Guide\n## Two words\n## Two Words\n<a id=\"custom\"></a>\n[back](../README.md#title) [custom](#custom)\n```\n## Three\n```\n")
	write("docs/p.png", "png")
	write("pkg/x.go", "package x\n")
	got := checkLinks(root, []string{"README.md", filepath.Join("docs", "guide.md")})
	want := []string{
		`README.md:5: docs/nothing.md: no such file`,
		`README.md:5: docs/guide.md#three: docs/guide.md has no heading or id "three"`,
		`README.md:6: pkg/x.go#top: an anchor into a file that is not Markdown may only name lines (#L12)`,
		`README.md:13: docs/guide.md#nope: docs/guide.md has no heading or id "nope"`,
		`README.md:16: docs/guide.md#wrapped: docs/guide.md has no heading or id "wrapped"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSlug checks headings against the anchors GitHub gives them.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start": "quick-start",
		"2. Determinism rules for `Apply` (never break these)":   "2-determinism-rules-for-apply-never-break-these",
		"Fault injection (`quorate-jepsen`)":                     "fault-injection-quorate-jepsen",
		"Leases with fencing tokens, and reserve→commit budgets": "leases-with-fencing-tokens-and-reservecommit-budgets",
		"Local-plus-global (`local.mode: sync`, grant_sync.go)":  "local-plus-global-localmode-sync-grant_syncgo",
		"In scripts: exit statuses, environment, output":         "in-scripts-exit-statuses-environment-output",
		"The [client](../client) and **middleware**":             "the-client-and-middleware",
		"Quorate vs Redis vs Gubernator, 2026-12-01 23:46 UTC":   "quorate-vs-redis-vs-gubernator-2026-12-01-2346-utc",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestCheckContents checks the table-of-contents check on a document
// whose contents miss a section.
func TestCheckContents(t *testing.T) {
	doc := "# T\n\n- [One](#one)\n\n## One\n\ntext [Two](#two)\n\n## Two\n"
	got := checkContents(doc)
	if len(got) != 1 || !strings.Contains(got[0], `"Two"`) {
		t.Errorf("checkContents = %q, want one problem naming Two", got)
	}
	if got := checkContents("# T\n\n- [One](#one)\n- [`Two`](#two)\n\n## One\n## `Two`\n<!-- BEGIN x -->\n## Generated\n<!-- END x -->\n"); len(got) != 0 {
		t.Errorf("checkContents of a complete table = %q, want none", got)
	}
}

var (
	// inlineLink is [text](target) or ![alt](target), the target optionally
	// in <...> and followed by a title.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	// refDefinition is [label]: target at the start of a line.
	refDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// htmlID is an explicit anchor: <a id="x"> or <a name="x">.
	htmlID = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// lineAnchor is GitHub's anchor of a line or lines of a source file.
	lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)
	// scheme starts an absolute URL.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// line is one line of a document outside fenced code, with inline code
// removed, and its number.
type line struct {
	n    int
	raw  string // as written
	text string // code spans blanked out
}

// link is a link's target and its offset in the document.
type link struct {
	target string
	at     int
}

// proseText returns a Markdown document with its fenced code blocks and
// code spans blanked out (a span may cross lines, as in a paragraph), each
// line where it was, so that a link's text may wrap and still be found.
func proseText(doc string) string {
	lines := make([]string, strings.Count(doc, "\n")+1)
	for _, l := range proseLines(doc) {
		lines[l.n-1] = l.raw
	}
	return codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(span string) string {
		return strings.Repeat("\n", strings.Count(span, "\n")) + "``"
	})
}

// proseLines returns the lines of a Markdown document that are not inside
// fenced code blocks, with code spans blanked out: the one place fences are
// skipped.
func proseLines(doc string) []line {
	var out []line
	fence := ""
	for i, l := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, line{i + 1, l, codeSpan.ReplaceAllString(l, "``")})
	}
	return out
}

// headingText is the text of an ATX heading line, or "" and false.
func headingText(l string) (level int, text string, ok bool) {
	t := strings.TrimLeft(l, " ")
	if len(l)-len(t) > 3 {
		return 0, "", false
	}
	for level < len(t) && t[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || (level < len(t) && t[level] != ' ') {
		return 0, "", false
	}
	text = strings.TrimSpace(t[level:])
	text = strings.TrimSpace(strings.TrimRight(text, "#"))
	return level, text, true
}

// anchors returns the anchors of a Markdown document: its headings' slugs,
// numbered as GitHub numbers repeated ones, and its explicit ids.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, pl := range proseLines(doc) {
		l := pl.raw
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		if _, text, ok := headingText(l); ok {
			s := slug(text)
			n := seen[s]
			seen[s]++
			if n > 0 {
				s = fmt.Sprintf("%s-%d", s, n)
			}
			out[s] = true
		}
	}
	return out
}

var (
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
)

// slug is the anchor GitHub gives a heading: its rendered text in lower
// case, spaces turned into hyphens, every character but letters, digits,
// '_' and '-' left out.
func slug(heading string) string {
	text := linkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLinks checks the relative links of files (relative to root) and
// returns each problem as "file:line: target: what".
func checkLinks(root string, files []string) []string {
	var problems []string
	docAnchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := docAnchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		docAnchors[path] = a
		return a, nil
	}
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		text := proseText(string(b))
		var links []link
		for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
			links = append(links, link{text[m[2]:m[3]], m[2]})
		}
		for _, m := range refDefinition.FindAllStringSubmatchIndex(text, -1) {
			links = append(links, link{text[m[2]:m[3]], m[2]})
		}
		sort.Slice(links, func(i, j int) bool { return links[i].at < links[j].at })
		for _, l := range links {
			target := strings.TrimSuffix(strings.TrimPrefix(l.target, "<"), ">")
			if p := checkTarget(root, file, target, anchorsOf); p != "" {
				n := strings.Count(text[:l.at], "\n") + 1
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", file, n, target, p))
			}
		}
	}
	return problems
}

// checkTarget checks one link target of file; it returns what is wrong, or
// "".
func checkTarget(root, file, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if target == "" || scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	dest := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Clean(strings.TrimPrefix(path, "/"))
		} else {
			dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		}
		if strings.HasPrefix(dest, "..") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		if lineAnchor.MatchString(frag) {
			return ""
		}
		return "an anchor into a file that is not Markdown may only name lines (#L12)"
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	if !a[frag] {
		return fmt.Sprintf("%s has no heading or id %q", filepath.ToSlash(dest), frag)
	}
	return ""
}

// checkContents checks that the lines before a document's first
// second-level heading link each of its second-level headings, but those of
// a generated section (between <!-- BEGIN and <!-- END markers, such as the
// benchmark table quorate-bench compare rewrites, whose heading carries its
// date).
func checkContents(doc string) []string {
	var problems []string
	var contents strings.Builder
	started, generated := false, false
	for _, l := range proseLines(doc) {
		switch {
		case strings.HasPrefix(l.raw, "<!-- BEGIN"):
			generated = true
		case strings.HasPrefix(l.raw, "<!-- END"):
			generated = false
		}
		level, text, ok := headingText(l.raw)
		if ok && level == 2 && generated {
			continue
		}
		if ok && level == 2 {
			started = true
			if !strings.Contains(contents.String(), "(#"+slug(text)+")") {
				problems = append(problems, fmt.Sprintf("line %d: the table of contents at the top has no link to %q (#%s)", l.n, text, slug(text)))
			}
			continue
		}
		if !started {
			contents.WriteString(l.text)
			contents.WriteByte('\n')
		}
	}
	if !started {
		problems = append(problems, "no second-level heading (## ...)")
	}
	return problems
}

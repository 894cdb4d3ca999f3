package jepsen

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// maxTimelines caps the HTML files WriteLinearHTML writes per result.
const maxTimelines = 20

// WriteLinearHTML writes porcupine's interactive timeline of each key of res
// into dir (created if missing), one HTML file per key named
// <algorithm>-<key>.html, and returns their paths. With onlyFailing, only
// the keys that are not linearizable are drawn when there are any;
// otherwise every key is, failing keys first, at most 20 files. Each
// timeline has a "nemesis" row with the faults that overlap the key's
// history and a "checker" row with the key's outcome.
func WriteLinearHTML(dir string, res *LinearResult, faults []Fault, onlyFailing bool) ([]string, error) {
	if res == nil || len(res.Keys) == 0 {
		return nil, nil
	}
	var keys []*KeyLinearResult
	for _, k := range res.Keys {
		if k.Outcome == LinearIllegal {
			keys = append(keys, k)
		}
	}
	if !onlyFailing || len(keys) == 0 {
		for _, k := range res.Keys {
			if k.Outcome != LinearIllegal {
				keys = append(keys, k)
			}
		}
	}
	keys = keys[:min(len(keys), maxTimelines)]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	used := map[string]bool{}
	for _, k := range keys {
		name := fileSafe(res.Spec.Algorithm + "-" + k.Key)
		for i := 2; used[name]; i++ {
			name = fileSafe(fmt.Sprintf("%s-%s-%d", res.Spec.Algorithm, k.Key, i))
		}
		used[name] = true
		path := filepath.Join(dir, name+".html")
		if err := writeKeyTimeline(path, res.Spec, k, faults); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func writeKeyTimeline(path string, spec LinearSpec, k *KeyLinearResult, faults []Fault) error {
	info := k.info // a copy: annotations are added to this timeline only
	lo, hi, ok := k.first, k.last, k.Requests > 0
	var notes []porcupine.Annotation
	for _, f := range faults {
		start, end := f.Start.UnixNano(), f.End.UnixNano()
		if f.End.IsZero() || end < start {
			end = start
		}
		if ok && (end < lo || start > hi) {
			continue
		}
		details := fmt.Sprintf("%s on %s, %s – %s", f.Kind, f.Node, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"))
		if f.Error != "" {
			details += ": " + f.Error
		}
		notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: start, End: end,
			Description: f.Kind + " " + f.Node, Details: details, BackgroundColor: faultColor(f.Kind)})
	}
	if ok {
		desc := fmt.Sprintf("key %s: %s", k.Key, k.Outcome)
		details := fmt.Sprintf("%s model; %d requests, %d never answered; %d partition(s); porcupine took %s",
			spec.Algorithm, k.Requests, k.Unanswered, k.Partitions, k.Elapsed.Round(time.Microsecond))
		color := "#c8f0c8"
		if k.Outcome == LinearIllegal {
			details += "; " + k.Hint
			color = "#ff9191"
		} else if k.Outcome == LinearUnknown {
			color = "#fff0a0"
		}
		notes = append(notes, porcupine.Annotation{Tag: "checker", Start: lo, End: hi, Description: desc, Details: details,
			BackgroundColor: color})
	}
	info.AddAnnotations(notes)
	var buf bytes.Buffer
	if err := porcupine.Visualize(k.model, info, &buf); err != nil {
		return err
	}
	title := fmt.Sprintf("<title>Quorate %s linearizability: key %s (%s)</title>", html.EscapeString(spec.Algorithm),
		html.EscapeString(k.Key), k.Outcome)
	out := bytes.Replace(buf.Bytes(), []byte("<title>Porcupine</title>"), []byte(title), 1)
	return os.WriteFile(path, out, 0o644)
}

func faultColor(kind string) string {
	switch {
	case strings.HasPrefix(kind, "kill"):
		return "#ffb0b0"
	case strings.HasPrefix(kind, "pause"):
		return "#ffd8a0"
	case strings.HasPrefix(kind, "clock"):
		return "#d8c8ff"
	case strings.HasPrefix(kind, "partition"):
		return "#efaefc"
	case strings.HasPrefix(kind, "slots"), strings.HasPrefix(kind, "move"):
		return "#b0d8ff"
	case strings.HasPrefix(kind, "scale"):
		return "#c0f0d0"
	case strings.HasPrefix(kind, "rolling"), strings.HasPrefix(kind, "restart"):
		return "#f5e08a"
	case strings.HasPrefix(kind, "client"):
		return "#a8e8e8"
	}
	return "#d0d0d0"
}

// fileSafe maps s to a file name: letters, digits, '.', '_' and '-' kept,
// anything else '_'.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

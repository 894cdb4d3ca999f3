package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of this directory's YAML files, by kind.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	configMaps   []*corev1.ConfigMap
}

// loadManifests decodes every object of every YAML file in dir.
func loadManifests(dir string) (*manifests, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no YAML file in %s", dir)
	}
	m := &manifests{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, doc := range splitDocuments(data) {
			if err := m.decode(doc); err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", filepath.Base(f), i+1, err)
			}
		}
	}
	return m, nil
}

// splitDocuments splits a YAML stream at its "---" lines, leaving out the
// documents that hold nothing but comments.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		for line := range strings.Lines(cur.String()) {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, bytes.Clone(cur.Bytes()))
				break
			}
		}
		cur.Reset()
	}
	for line := range strings.Lines(string(data)) {
		if strings.TrimRight(line, " \r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// decode decodes one YAML document strictly into the API type of its
// apiVersion and kind, as the API server's strict field validation does: a
// repeated key, an unknown field or a field spelt in another case is
// refused, and so is any kind but those Quorate's manifests use.
func (m *manifests) decode(doc []byte) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		s := &appsv1.StatefulSet{}
		m.statefulSets, obj = append(m.statefulSets, s), s
	case "v1 Service":
		s := &corev1.Service{}
		m.services, obj = append(m.services, s), s
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.pdbs, obj = append(m.pdbs, p), p
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		m.configMaps, obj = append(m.configMaps, c), c
	default:
		return fmt.Errorf("apiVersion %q, kind %q: not a kind this test knows (apps/v1 StatefulSet, v1 Service, policy/v1 PodDisruptionBudget, v1 ConfigMap)",
			tm.APIVersion, tm.Kind)
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	return nil
}

// The strict decoding refuses what the API server would: a misspelt field,
// one in the wrong case, a repeated key, a value of the wrong type, and a
// kind the test does not know. Each broken copy of a real manifest fails.
func TestDecodeRefusesBrokenManifests(t *testing.T) {
	sts, err := os.ReadFile("statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := (&manifests{}).decode(sts); err != nil {
		t.Fatalf("statefulset.yaml as it is: %v", err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt field", "serviceName:", "servicName:", "servicName"},
		{"field in another case", "serviceName:", "ServiceName:", "ServiceName"},
		{"misspelt nested field", "readinessProbe:", "readinesProbe:", "readinesProbe"},
		{"repeated key", "replicas: 3\n", "replicas: 3\n  replicas: 4\n", "replicas"},
		{"wrong type", "replicas: 3", "replicas: three", "replicas"},
		{"unknown kind", "kind: StatefulSet", "kind: StatefulSets", "StatefulSets"},
	} {
		broken := strings.Replace(string(sts), tc.old, tc.new, 1)
		if broken == string(sts) {
			t.Fatalf("%s: statefulset.yaml has no %q", tc.name, tc.old)
		}
		err := (&manifests{}).decode([]byte(broken))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}

package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// namespace is the namespace the test places the pods in.
const namespace = "quorate-test"

// quorate is the path of the quorate binary TestMain builds from this
// repository's main module.
var quorate string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "quorate-kubernetes-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		quorate = filepath.Join(dir, "quorate")
		build := exec.Command("go", "build", "-o", quorate, "./cmd/quorate")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/quorate: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// podArgs are the arguments pod ordinal of sts runs, with $(VAR) expanded
// as Kubernetes expands it from the container's environment (here the
// pod's name and namespace, from the downward API).
func podArgs(t *testing.T, sts *appsv1.StatefulSet, ordinal int) []string {
	t.Helper()
	c := &sts.Spec.Template.Spec.Containers[0]
	if len(c.Command) > 0 {
		t.Fatalf("the container sets command %q: the image's entrypoint is the quorate binary", c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = fmt.Sprintf("%s-%d", sts.Name, ordinal)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = namespace
		default:
			t.Fatalf("env %s: a source this test does not know", e.Name)
		}
	}
	var args []string
	for _, a := range c.Args {
		var b strings.Builder
		for a != "" {
			switch {
			case strings.HasPrefix(a, "$$"):
				b.WriteByte('$')
				a = a[2:]
			case strings.HasPrefix(a, "$("):
				end := strings.IndexByte(a, ')')
				v, ok := env[a[2:max(end, 2)]]
				if end < 0 || !ok {
					t.Fatalf("argument %q: %q names no variable of the container's environment", c.Args, a)
				}
				b.WriteString(v)
				a = a[end+1:]
			default:
				b.WriteByte(a[0])
				a = a[1:]
			}
		}
		args = append(args, b.String())
	}
	return args
}

// printConfig runs the real `quorate serve --print-config` with the
// arguments of pod ordinal, its --config being the ConfigMap's file (written
// to a temporary directory in the place of the pod's mount), and returns the
// effective settings it prints.
func printConfig(t *testing.T, cm *corev1.ConfigMap, sts *appsv1.StatefulSet, ordinal int) map[string]any {
	t.Helper()
	c := &sts.Spec.Template.Spec.Containers[0]
	args := podArgs(t, sts, ordinal)
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("the pod runs %q, want quorate serve", args)
	}
	dir := t.TempDir()
	for name, text := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := ""
	for i, a := range args {
		p, ok := strings.CutPrefix(a, "--config=")
		if !ok {
			continue
		}
		vm, ok := mountOf(c, p)
		if !ok || !mountsConfigMap(sts, vm, cm) {
			t.Fatalf("--config %s is not on the ConfigMap %s's volume", p, cm.Name)
		}
		if _, ok := cm.Data[path.Base(p)]; !ok {
			t.Fatalf("--config %s: the ConfigMap %s has no %s", p, cm.Name, path.Base(p))
		}
		config = filepath.Join(dir, path.Base(p))
		args[i] = "--config=" + config
	}
	if config == "" {
		t.Fatalf("the pod's arguments %q have no --config=FILE", args)
	}
	cmd := exec.Command(quorate, append(args, "--print-config")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("quorate %s --print-config: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("quorate serve --print-config: %v\n%s", err, out)
	}
	return cfg
}

// mountsConfigMap reports whether vm mounts the ConfigMap cm.
func mountsConfigMap(sts *appsv1.StatefulSet, vm corev1.VolumeMount, cm *corev1.ConfigMap) bool {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == vm.Name {
			return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
		}
	}
	return false
}

// Every pod runs the same arguments, and the real quorate serve takes them
// with the ConfigMap's file: pod 0 bootstraps, every other pod joins pod 0
// by its stable DNS name; each advertises its own name on the container's
// ports, serves TLS with its own certificate from the Secret, and keeps its
// state on its volume.
func TestPodsBootstrapOrJoin(t *testing.T) {
	m, sts, c := load(t)
	cm := m.configMaps[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["api"] == 0 || ports["raft"] == 0 {
		t.Fatalf("the container's ports %v have no api and raft", c.Ports)
	}
	str := func(cfg map[string]any, key string) string {
		s, _ := cfg[key].(string)
		return s
	}
	var firstAPI string
	certs := map[string]bool{}
	for ordinal := range int(*sts.Spec.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, ordinal)
		cfg := printConfig(t, cm, sts, ordinal)
		name := fmt.Sprintf("%s.%s.%s.svc", pod, sts.Spec.ServiceName, namespace)
		if str(cfg, "id") != pod {
			t.Errorf("%s: id %q", pod, str(cfg, "id"))
		}
		for key, want := range map[string]string{
			"advertise-api-addr":  fmt.Sprintf("%s:%d", name, ports["api"]),
			"advertise-raft-addr": fmt.Sprintf("%s:%d", name, ports["raft"]),
		} {
			if str(cfg, key) != want {
				t.Errorf("%s: %s %q, want %q (its stable DNS name and the container's port)", pod, key, str(cfg, key), want)
			}
		}
		if portOf(str(cfg, "api-addr")) != ports["api"] || portOf(str(cfg, "raft-addr")) != ports["raft"] {
			t.Errorf("%s: api-addr %s, raft-addr %s; the container's ports are %d and %d",
				pod, str(cfg, "api-addr"), str(cfg, "raft-addr"), ports["api"], ports["raft"])
		}
		if ordinal == 0 {
			firstAPI = str(cfg, "advertise-api-addr")
			if cfg["bootstrap"] != true || str(cfg, "join") != "" {
				t.Errorf("%s: bootstrap %v, join %q; want it to bootstrap", pod, cfg["bootstrap"], str(cfg, "join"))
			}
		} else if cfg["bootstrap"] != false || str(cfg, "join") != firstAPI {
			t.Errorf("%s: bootstrap %v, join %q; want it to join %s", pod, cfg["bootstrap"], str(cfg, "join"), firstAPI)
		}
		if cfg["expect-nodes"] != float64(*sts.Spec.Replicas) {
			t.Errorf("%s: expect-nodes %v, the StatefulSet has %d replicas", pod, cfg["expect-nodes"], *sts.Spec.Replicas)
		}

		if cfg["insecure-plaintext"] != false {
			t.Errorf("%s: insecure-plaintext", pod)
		}
		for _, key := range []string{"tls-cert", "tls-key", "tls-ca"} {
			vm, ok := mountOf(c, str(cfg, key))
			if !ok || !vm.ReadOnly || !mountsSecret(sts, vm) {
				t.Errorf("%s: %s %q is not on a read-only Secret volume", pod, key, str(cfg, key))
			}
		}
		certs[str(cfg, "tls-cert")] = true
		if vm, ok := mountOf(c, str(cfg, "access-file")); !ok || !mountsConfigMap(sts, vm, cm) || cm.Data[path.Base(str(cfg, "access-file"))] == "" {
			t.Errorf("%s: access-file %q is not a file of the ConfigMap %s", pod, str(cfg, "access-file"), cm.Name)
		}
		vm, ok := mountOf(c, str(cfg, "data-dir"))
		if !ok || vm.ReadOnly || !claimed(sts, vm.Name) {
			t.Errorf("%s: data-dir %q is not on a writable volume of a volumeClaimTemplate", pod, str(cfg, "data-dir"))
		}
	}
	if len(certs) != int(*sts.Spec.Replicas) {
		t.Errorf("the pods' certificates %v: want one per pod (each names its node)", certs)
	}
}

// mountsSecret reports whether vm mounts a Secret.
func mountsSecret(sts *appsv1.StatefulSet, vm corev1.VolumeMount) bool {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == vm.Name {
			return v.Secret != nil
		}
	}
	return false
}

// claimed reports whether name is one of sts's volumeClaimTemplates.
func claimed(sts *appsv1.StatefulSet, name string) bool {
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		if pvc.Name == name {
			return true
		}
	}
	return false
}

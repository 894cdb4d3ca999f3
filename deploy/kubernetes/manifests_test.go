package kubernetes

import (
	"path"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// load decodes this directory's manifests and checks that it holds what the
// test expects: one StatefulSet of one container, two Services (the
// headless one and the clients'), one PodDisruptionBudget, one ConfigMap.
func load(t *testing.T) (*manifests, *appsv1.StatefulSet, *corev1.Container) {
	t.Helper()
	m, err := loadManifests(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.statefulSets) != 1 || len(m.services) != 2 || len(m.pdbs) != 1 || len(m.configMaps) != 1 {
		t.Fatalf("got %d StatefulSets, %d Services, %d PodDisruptionBudgets, %d ConfigMaps; want 1, 2, 1, 1",
			len(m.statefulSets), len(m.services), len(m.pdbs), len(m.configMaps))
	}
	sts := m.statefulSets[0]
	if n := len(sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the StatefulSet's pod has %d containers, want 1", n)
	}
	return m, sts, &sts.Spec.Template.Spec.Containers[0]
}

// selects fails unless selector (a Service's, a StatefulSet's, a PDB's)
// selects the StatefulSet's pods.
func selects(t *testing.T, what string, selector *metav1.LabelSelector, pod map[string]string) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Errorf("%s: selector: %v", what, err)
		return
	}
	if sel.Empty() || !sel.Matches(labels.Set(pod)) {
		t.Errorf("%s: selector %q does not select the pods (labels %v)", what, sel, pod)
	}
}

// containerPort is the container's port that p (a name or a number) names.
func containerPort(t *testing.T, c *corev1.Container, what string, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort
		}
	}
	t.Errorf("%s: port %s is none of the container's", what, p.String())
	return 0
}

// The pieces fit: the selectors select the pods, the headless Service is
// the StatefulSet's and publishes pods before they are ready, the Services'
// and probes' ports are the container's, the mounts are the pod's volumes.
func TestManifestsFit(t *testing.T) {
	m, sts, c := load(t)
	pod := sts.Spec.Template.Labels
	selects(t, "StatefulSet", sts.Spec.Selector, pod)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet replicas %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet podManagementPolicy %q, want Parallel (a restarted cluster's first pod is ready only once a majority runs)",
			sts.Spec.PodManagementPolicy)
	}

	var headless *corev1.Service
	for _, s := range m.services {
		selects(t, "Service "+s.Name, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, pod)
		for _, p := range s.Spec.Ports {
			if got := containerPort(t, c, "Service "+s.Name, p.TargetPort); got != 0 && p.Port != got {
				t.Errorf("Service %s: port %s is %d, the container's %d", s.Name, p.Name, p.Port, got)
			}
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		}
	}
	switch {
	case headless == nil:
		t.Error("no headless Service (clusterIP: None)")
	case headless.Name != sts.Spec.ServiceName:
		t.Errorf("the headless Service is %q, the StatefulSet's serviceName %q", headless.Name, sts.Spec.ServiceName)
	case !headless.Spec.PublishNotReadyAddresses:
		t.Error("the headless Service does not publish pods before they are ready: a joining node or a restarting cluster's peers could not reach each other")
	}

	pdb := m.pdbs[0]
	selects(t, "PodDisruptionBudget", pdb.Spec.Selector, pod)
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.String() != "1" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v; want 1 and none", mu, pdb.Spec.MinAvailable)
	}

	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{
		{"readinessProbe", "/readyz", c.ReadinessProbe},
		{"livenessProbe", "/healthz", c.LivenessProbe},
		{"startupProbe", "/healthz", c.StartupProbe},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: none, or not an HTTP GET", p.name)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: %s %s, want HTTPS %s (the node serves TLS)", p.name, g.Scheme, g.Path, p.path)
		}
		if containerPort(t, c, p.name, p.probe.HTTPGet.Port) != apiPort(c) {
			t.Errorf("%s: not on the API port", p.name)
		}
	}
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || l.PreStop.Sleep.Seconds <= 0 {
		t.Error("no preStop sleep: a stopping pod would get clients' calls until every proxy drops it")
	} else if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < l.PreStop.Sleep.Seconds+15 {
		t.Errorf("terminationGracePeriodSeconds %v leaves the node under 15 s to stop after the preStop's %d s", g, l.PreStop.Sleep.Seconds)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		volumes[pvc.Name] = corev1.Volume{Name: pvc.Name}
	}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			t.Errorf("volumeMount %s: no such volume or claim template", vm.Name)
		}
		if cm := v.ConfigMap; cm != nil && cm.Name != m.configMaps[0].Name {
			t.Errorf("volume %s: ConfigMap %q, the manifests' is %q", v.Name, cm.Name, m.configMaps[0].Name)
		}
	}
}

// The pod runs as a non-root user on a read-only root file system, without
// privileges, within resources, and the node's memory-limit is below the
// container's (else the kernel kills it before the runtime collects).
func TestManifestsLockDownThePod(t *testing.T) {
	m, sts, c := load(t)
	ps, cs := sts.Spec.Template.Spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Error("the pod does not run as a non-root user (runAsNonRoot, runAsUser)")
	}
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
		t.Error("the container's root file system is not read-only")
	}
	if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.Capabilities == nil ||
		len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" {
		t.Error("the container may escalate privileges or keeps capabilities")
	}
	limit := c.Resources.Limits.Memory()
	if c.Resources.Requests.Cpu().IsZero() || limit.IsZero() {
		t.Fatalf("the container has no CPU request or no memory limit: %v", c.Resources)
	}
	cfg := printConfig(t, m.configMaps[0], sts, 0)
	q, err := resource.ParseQuantity(strings.TrimSuffix(cfg["memory-limit"].(string), "B"))
	if err != nil || q.IsZero() {
		t.Fatalf("memory-limit %v: %v", cfg["memory-limit"], err)
	}
	if q.Cmp(*limit) >= 0 {
		t.Errorf("the node's memory-limit %v is not below the container's memory limit %v", cfg["memory-limit"], limit)
	}
}

// apiPort is the container's port named api.
func apiPort(c *corev1.Container) int32 {
	for _, p := range c.Ports {
		if p.Name == "api" {
			return p.ContainerPort
		}
	}
	return 0
}

// portOf is the port of host:port s, 0 if it has none.
func portOf(s string) int32 {
	i := strings.LastIndexByte(s, ':')
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if i < 0 || err != nil {
		return 0
	}
	return int32(p)
}

// mountOf is the volume mount of c that holds file p, and whether there is one.
func mountOf(c *corev1.Container, p string) (corev1.VolumeMount, bool) {
	for _, vm := range c.VolumeMounts {
		if rel := strings.TrimPrefix(path.Clean(p), path.Clean(vm.MountPath)+"/"); rel != path.Clean(p) {
			return vm, true
		}
	}
	return corev1.VolumeMount{}, false
}

// Package kubernetes holds Quorate's Kubernetes manifests, which
// `kubectl apply -f deploy/kubernetes/` applies, and the test that checks
// them:
//
//   - statefulset.yaml, three nodes with a volume each: quorate-0 bootstraps
//     the cluster, the others join it by its stable DNS name;
//   - service.yaml, the headless Service that gives each pod that name, and
//     quorate-api, the Service clients call;
//   - pdb.yaml, a PodDisruptionBudget of one pod at a time;
//   - configmap.yaml, the nodes' config file (quorate serve --config) and
//     access file.
//
// TLS comes from a Secret, quorate-tls, that is not here: it holds each
// node's key (docs/operating.md says how to make it).
//
// The test decodes every manifest strictly against the Kubernetes API's
// types, checks that the pieces fit (selectors, ports, probes, mounts), and
// runs the real `quorate serve --print-config` with the ConfigMap's file and
// each pod's arguments; then it starts pod 0's node (on loopback, with
// certificates made as docs/operating.md makes them), calls it as the
// access file's admin caller, and stops it as Kubernetes does. It is a module of its own, so that the server's
// module does not depend on Kubernetes; it has no Go code of its own.
package kubernetes

// Package deploy holds what runs Quorate in production beside the binary,
// and the tests that check it against the real thing:
//
//   - prometheus/alerts.yaml, Prometheus alerting rules, with their unit
//     tests (prometheus/alerts_test.yaml, for `promtool test rules`) and an
//     example scrape configuration (prometheus/prometheus.yaml);
//   - grafana/quorate.json, a Grafana dashboard;
//   - systemd/quorate.service, a sandboxed systemd unit, with the
//     environment file it reads (systemd/quorate.env) and its user
//     (systemd/quorate.sysusers);
//   - kubernetes/, a StatefulSet and its Services, PodDisruptionBudget and
//     ConfigMap: a module of its own, with its own test (package
//     kubernetes), so that Quorate's module does not depend on Kubernetes.
//
// The tests build bin/quorate's command, start a three-node cluster of it
// (with TLS, so that the nodes export their certificates' expiry) and check that every metric the rules and the dashboard name is one the
// nodes export; they run promtool (Debian's prometheus package) and
// systemd-analyze (Debian's systemd) on the files. Without one of those
// tools its tests are skipped, saying so, unless QUORATE_REQUIRE_PROMTOOL
// or QUORATE_REQUIRE_SYSTEMD_ANALYZE is 1: then they fail. The package has
// no Go code of its own. docs/operating.md says how to install each file.
package deploy

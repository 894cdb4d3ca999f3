// Command image builds Quorate's OCI image, without a network or a
// container engine: `make image` runs it. From scratch, each image holds
//
//   - /quorate, the static binary (mode 0755, owned by root), the
//     entrypoint; the default command is `serve --help`;
//   - /etc/ssl/certs/ca-certificates.crt, the build machine's CA bundle;
//   - /etc/passwd and /etc/group naming root and quorate (65532:65532), the
//     user it runs as;
//   - /var/lib/quorate, the data directory, owned by quorate (mode 0700), a
//     volume;
//
// exposes 7070/tcp (the API) and 7170/tcp (Raft), and carries the OCI
// labels (version, revision, source, licenses, created). Every timestamp
// is --created, the commit's time, so the same inputs give the same
// digests.
//
//	go run . --version V --revision COMMIT --created RFC3339 \
//	  --binary linux/amd64=PATH [--binary linux/arm64=PATH ...] \
//	  [--ca-certs FILE] [--source URL] [--name quorate] --out DIR
//
// writes DIR/oci, an OCI image layout whose index.json names, as
// org.opencontainers.image.ref.name V, one image index of every platform;
// and for each platform DIR/quorate-V-OS-ARCH.tar, a `docker load` (and
// `podman load`) archive tagged NAME:V.
//
// It is a module of its own so that Quorate's module does not depend on
// go-containerregistry.
package main

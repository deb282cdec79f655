// Package container tests that sdr runs in a container as
// docs/containers.md says it does: an image FROM scratch holding the
// static binary, built and run with a real container runtime from Debian
// (podman with runc), sdr testbed inside it with exactly the documented
// capabilities, and write-bw -dev xsk between two containers on a
// container network. It holds no code beside its test: what it keeps true
// is the documentation's command lines.
package container

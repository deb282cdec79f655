// Package privileged gates tests that need root: network namespaces, veth,
// XDP and AF_XDP.
package privileged

import (
	"os"
	"testing"
)

// Require skips t, naming what is missing, unless the process runs as root.
// CI runs as root, so there the privileged tests always run.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veth pairs, XDP programs and AF_XDP sockets " +
			"(CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_IPC_LOCK)")
	}
}

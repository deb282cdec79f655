// Package dpa is SDR's BlueField-3 backend: the per-packet receive work
// runs as FlexIO event handlers on the DPA (device/handler.c, one thread
// per channel CQ), while the host side (this package, cgo against
// libibverbs, mlx5dv and libflexio, build tag dpa) opens the device,
// loads the DPA image, creates the UC channel QPs, the zero-based
// indirect root mkey per generation and the null mkey, exposes the
// slots' engine words to the handlers through a FlexIO window and sends
// from host threads. It implements sdr/backend, so sdrtest runs on it
// unchanged on a BlueField host.
//
// State: the whole backend is written against verbs, mlx5dv (DevX,
// indirect mkeys, UMR) and the FlexIO host API: Open (device, PD, null
// MR, FlexIO process, window, UMR QP), RegisterMemory, NewQP (per
// channel a DPA event handler with its CQ in DPA memory, per generation
// and channel a UC receive QP created through DevX with its RQ in DPA
// memory, a UC send QP and a UC fence QP looped back to the receive QP,
// per generation the zero-based root mkey of entry mkeys), Connect,
// Arm/Disarm (entry mkeys rewritten by UMR; Arm then fences the
// handlers with markers before it activates the slot), the send path on
// host threads, and Close. It type-checks in CI; it has not
// run on a BlueField (see the README's "unverified on hardware").
//
// Built without the dpa tag (every machine without DOCA), Open returns
// ErrNotBuilt. The same handler source runs in CI through
// hwnic/dpa/dpasim; see the README for what has and has not run on
// hardware (nothing yet).
//
// The capacity model (PaperCost, Plan) is plain Go and always built.
package dpa

import "errors"

// ErrNotBuilt means this binary was built without the dpa build tag, so
// it holds no BlueField-3 support.
var ErrNotBuilt = errors.New("dpa: built without dpa support: rebuild with -tags dpa,doca (cgo) on a host with NVIDIA DOCA (pkg-config libflexio), rdma-core (libibverbs, mlx5dv) and the DPA image library from make dpa")

// Options select the BlueField device and the DPA program.
type Options struct {
	// Device is the verbs device name, e.g. "mlx5_0".
	Device string
	// Port is the device port (1 on a single-port function).
	Port int
	// GIDIndex selects the RoCEv2 GID (often 3 for IPv4 on BlueField).
	GIDIndex int
}

// Backend opens SDR devices on a BlueField-3.
type Backend struct {
	opts Options
}

// New returns a backend with the given options; nothing is opened until
// Open.
func New(opts Options) *Backend { return &Backend{opts: opts} }

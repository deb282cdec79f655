// Package dpasim is an SDR backend whose transport is the emulated NIC
// (package emunic, any port) and whose per-packet work is the BlueField-3
// DPA's own C: the RX handler of ../device, compiled with gcc through
// the FlexIO shim ../device/hostsim. Every receive completion emunic
// reports becomes a 64-byte mlx5 CQE in a CQ ring per channel; the
// channel's handler (the hostsim thread, run inline on the device's
// receive goroutine as a FlexIO event handler runs where the CQE lands)
// polls it by owner bit, runs the engine on the slots' words, writes
// notifications, re-posts receive WQEs through doorbell records and
// re-arms its CQ, exactly as on the DPA. The slots' words are the
// sdr/engine layout, so the SDK reads the bitmap where the C writes it.
//
// Memory placement is sdrnic's: a zero-based indirect MR per generation
// with one entry per message ID, pointed at the null MR when a message
// completes, so memory is protected like the bitmap. Only UC channel QPs
// (the DPA's); datagram channels are sdrnic's, on the same device.
//
// It needs cgo (gcc); built without it, Open fails with ErrNoCgo.
package dpasim

import "errors"

// ErrNoCgo means the package was built without cgo, so the device C is
// not linked in.
var ErrNoCgo = errors.New("dpasim: built without cgo: the DPA handler is C and needs a C compiler (CGO_ENABLED=1, gcc)")

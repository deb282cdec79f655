//go:build cgo

package dpasim

/*
#include "nic.h"
*/
import "C"

import (
	"context"

	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
)

// ProbeWindow times the window operations the DPA cost model prices
// (windowprobe) by running probe.c's sdr_probe on a hostsim thread: the
// numbers are this host's memory through hostsim's window model, not a
// BlueField's — they show the probe works end to end, not what a DPA
// costs. n operations per run, rounds runs of each.
func (b *Backend) ProbeWindow(ctx context.Context, n, rounds int) (windowprobe.Times, error) {
	return windowprobe.Measure(func(op windowprobe.Op, count uint32) (uint64, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return uint64(C.dpasim_probe(C.uint32_t(op), C.uint32_t(count))), nil
	}, n, rounds)
}

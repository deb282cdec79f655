//go:build dpa

package dpa

/*
#include <stdlib.h>
#include <string.h>
#include "host.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
)

// ProbeWindow times the DPA's window operations on the device
// (windowprobe; sdr dpa doctor's report): it opens the device as Open
// does — a FlexIO process of its own, beside any the caller has open —
// registers one 64-byte line of host memory, runs probe.c's sdr_probe on
// the DPA through flexio_process_call (n operations per call, rounds
// calls of each) and closes what it opened.
func (b *Backend) ProbeWindow(ctx context.Context, n, rounds int) (windowprobe.Times, error) {
	name := C.CString(b.opts.Device)
	defer C.free(unsafe.Pointer(name))
	var step *C.char
	d := C.sdr_dpa_open(name, C.uint32_t(max(b.opts.Port, 1)), C.uint32_t(b.opts.GIDIndex), &step)
	if d == nil {
		return windowprobe.Times{}, fmt.Errorf("dpa: probe %q: %s failed", b.opts.Device, C.GoString(step))
	}
	defer C.sdr_dpa_close(d)
	// C memory: the DPA reaches it while Go may move nothing.
	line := C.aligned_alloc(64, 64)
	if line == nil {
		return windowprobe.Times{}, fmt.Errorf("dpa: probe %q: no memory", b.opts.Device)
	}
	defer C.free(line)
	C.memset(line, 0, 64)
	mr, err := C.ibv_reg_mr(d.pd, line, 64, C.IBV_ACCESS_LOCAL_WRITE)
	if mr == nil {
		return windowprobe.Times{}, fmt.Errorf("dpa: probe %q: ibv_reg_mr of the probe's line: %w", b.opts.Device, err)
	}
	defer C.ibv_dereg_mr(mr)
	return windowprobe.Measure(func(op windowprobe.Op, count uint32) (uint64, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var cycles C.uint64_t
		if C.sdr_dpa_probe(d, line, mr, C.uint32_t(op), C.uint32_t(count), &cycles, &step) != 0 {
			return 0, fmt.Errorf("dpa: probe %q: %s failed", b.opts.Device, C.GoString(step))
		}
		return uint64(cycles), nil
	}, n, rounds)
}

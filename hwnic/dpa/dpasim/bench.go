//go:build cgo

package dpasim

/*
#include "nic.h"
*/
import "C"

import "errors"

// handlerBench is the handler on one host thread over a pre-filled CQ
// ring of 1024 CQEs (slots × packets), for BenchmarkHandler: the
// device's per-packet cost without the transport. Not safe for
// concurrent use.
type handlerBench struct {
	b *C.struct_dpasim_bench
}

// newHandlerBench builds the rig; slots × pkts must be 1024.
func newHandlerBench(slots, pkts, chunkPkts int) (*handlerBench, error) {
	b := C.dpasim_bench_new(C.uint32_t(slots), C.uint32_t(pkts), C.uint32_t(chunkPkts))
	if b == nil {
		return nil, errors.New("dpasim: handler benchmark: bad geometry or no memory")
	}
	return &handlerBench{b: b}, nil
}

// fill re-activates the slots and writes one message per slot into the ring.
func (h *handlerBench) fill() { C.dpasim_bench_fill(h.b) }

// run lets the handler take every CQE in the ring.
func (h *handlerBench) run() error {
	if C.dpasim_bench_run(h.b) != 0 {
		return errors.New("dpasim: handler benchmark: the handler stopped")
	}
	return nil
}

// chunks returns the chunk completions the handler counted.
func (h *handlerBench) chunks() uint64 { return uint64(C.dpasim_bench_chunks(h.b)) }

func (h *handlerBench) close() { C.dpasim_bench_free(h.b) }

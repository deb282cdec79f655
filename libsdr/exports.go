package main

/*
#cgo CFLAGS: -I${SRCDIR}/include
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "sdr.h"
#include "sdr_mr.h"

// cgo cannot spell const in an exported function's parameters; the
// typedef makes its prototype agree with sdr.h's.
typedef const char libsdr_const_char;

// Handles are table indices dressed as the SDK's opaque pointers.
static inline struct sdr_context *libsdr_context(uintptr_t h) { return (struct sdr_context *)h; }
static inline struct sdr_qp *libsdr_qp(uintptr_t h) { return (struct sdr_qp *)h; }
static inline struct sdr_mr *libsdr_mr(uintptr_t h) { return (struct sdr_mr *)h; }
static inline struct sdr_recv_handle *libsdr_recv(uintptr_t h) { return (struct sdr_recv_handle *)h; }
static inline struct sdr_send_handle *libsdr_send(uintptr_t h) { return (struct sdr_send_handle *)h; }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/sdr-rdma/sdr/backends"
	"github.com/sdr-rdma/sdr/sdr"
)

func main() {}

// maxRegion bounds a registration (1 TiB): beyond it, and beyond the
// address space, a length is an error rather than a Go slice panic.
const maxRegion = 1 << 40

// status turns err into the SDK's return code, recording failures.
func status(err error) C.int {
	switch {
	case err == nil:
		return C.SDR_SUCCESS
	case errors.Is(err, sdr.ErrRetry):
		return C.SDR_RETRY
	}
	fail(err)
	return C.SDR_ERROR
}

// getenv reads the process's environment as the C library holds it now:
// a program may setenv the SDK's variables before sdr_context_create (the
// SDK's sdr_write_bw.c sets SDR_USE_UC_QP for --uc), which Go's own copy,
// taken when the library loaded, would not see.
func getenv(name string) string {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if v := C.getenv(cname); v != nil {
		return C.GoString(v)
	}
	return ""
}

//export sdr_context_create
func sdr_context_create(devName *C.libsdr_const_char, attr *C.struct_sdr_dev_attr) *C.struct_sdr_context {
	if attr == nil {
		fail(fmt.Errorf("libsdr: context create: no attributes: %w", sdr.ErrInvalid))
		return nil
	}
	name := ""
	if devName != nil {
		name = C.GoString((*C.char)(unsafe.Pointer(devName)))
	}
	c, err := newContext(backends.Resolve(name, getenv), getenv, contextAttr{
		Channels: int(attr.num_channels), LogMaxQPs: int(attr.log_max_qps),
	})
	if err != nil {
		fail(err)
		return nil
	}
	return C.libsdr_context(C.uintptr_t(c.handle))
}

//export sdr_context_destroy
func sdr_context_destroy(ctx *C.struct_sdr_context) C.int {
	c, err := lookup[*contextObj](&table, uintptr(unsafe.Pointer(ctx)), "context")
	if err != nil {
		return status(err)
	}
	return status(c.destroy())
}

//export sdr_qp_create
func sdr_qp_create(ctx *C.struct_sdr_context, attr *C.struct_sdr_qp_attr) *C.struct_sdr_qp {
	c, err := lookup[*contextObj](&table, uintptr(unsafe.Pointer(ctx)), "context")
	if err == nil && attr == nil {
		err = fmt.Errorf("libsdr: qp create: no attributes: %w", sdr.ErrInvalid)
	}
	if err != nil {
		fail(err)
		return nil
	}
	q, err := c.newQP(qpAttr{
		LogChunk: uint64(attr.bitmap_chunk_size_log_bytes), LogInFlight: uint64(attr.max_in_flight_log_bytes),
		LogMessages: uint64(attr.max_log_num_msgs), MTU: int(attr.mtu),
		Send: attr.send_enable != 0, Recv: attr.recv_enable != 0, RateKbps: uint64(attr.rate_limit),
	})
	if err != nil {
		fail(err)
		return nil
	}
	return C.libsdr_qp(C.uintptr_t(q.handle))
}

//export sdr_qp_destroy
func sdr_qp_destroy(qp *C.struct_sdr_qp) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err != nil {
		return status(err)
	}
	return status(q.destroy())
}

//export sdr_qp_info_size_get
func sdr_qp_info_size_get(qp *C.struct_sdr_qp, size *C.size_t) C.int {
	if _, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp"); err != nil {
		return status(err)
	}
	if size == nil {
		return status(fmt.Errorf("libsdr: qp info size: NULL size: %w", sdr.ErrInvalid))
	}
	*size = infoSize
	return C.SDR_SUCCESS
}

//export sdr_qp_info_get
func sdr_qp_info_get(qp *C.struct_sdr_qp, info unsafe.Pointer) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err != nil {
		return status(err)
	}
	if info == nil {
		return status(fmt.Errorf("libsdr: qp info: NULL buffer: %w", sdr.ErrInvalid))
	}
	blob, err := q.info()
	if err != nil {
		return status(err)
	}
	copy(unsafe.Slice((*byte)(info), infoSize), blob)
	return C.SDR_SUCCESS
}

//export sdr_qp_connect
func sdr_qp_connect(qp *C.struct_sdr_qp, remote unsafe.Pointer) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err != nil {
		return status(err)
	}
	if remote == nil {
		return status(fmt.Errorf("libsdr: qp connect: NULL info: %w", sdr.ErrInvalid))
	}
	return status(q.connect(unsafe.Slice((*byte)(remote), infoSize)))
}

//export sdr_mr_reg
func sdr_mr_reg(ctx *C.struct_sdr_context, addr unsafe.Pointer, length C.size_t, flags C.enum_sdr_access_flags) *C.struct_sdr_mr {
	c, err := lookup[*contextObj](&table, uintptr(unsafe.Pointer(ctx)), "context")
	if err == nil && flags != C.SDR_ACCESS_REMOTE_WRITE {
		err = fmt.Errorf("libsdr: mr reg: access flags %d: %w", flags, sdr.ErrInvalid)
	}
	if err == nil && (addr == nil || length == 0 || uint64(length) > maxRegion || uintptr(addr)+uintptr(length) < uintptr(addr)) {
		err = fmt.Errorf("libsdr: mr reg: %d bytes at %p: %w", length, addr, sdr.ErrInvalid)
	}
	if err != nil {
		fail(err)
		return nil
	}
	// C memory, used in place: the slice never reaches the Go heap.
	m, err := c.register(uintptr(addr), unsafe.Slice((*byte)(addr), int(length)))
	if err != nil {
		fail(err)
		return nil
	}
	return C.libsdr_mr(C.uintptr_t(m.handle))
}

//export sdr_mr_dereg
func sdr_mr_dereg(mr *C.struct_sdr_mr) C.int {
	m, err := lookup[*mrObj](&table, uintptr(unsafe.Pointer(mr)), "mr")
	if err != nil {
		return status(err)
	}
	return status(m.deregister())
}

//export sdr_mr_lkey_get
func sdr_mr_lkey_get(mr *C.struct_sdr_mr, key *C.uint32_t) C.int {
	return mrKey(mr, key)
}

//export sdr_mr_rkey_get
func sdr_mr_rkey_get(mr *C.struct_sdr_mr, key *C.uint32_t) C.int {
	return mrKey(mr, key)
}

// mrKey is sdr_mr_lkey_get and sdr_mr_rkey_get: one key names a region.
func mrKey(mr *C.struct_sdr_mr, key *C.uint32_t) C.int {
	m, err := lookup[*mrObj](&table, uintptr(unsafe.Pointer(mr)), "mr")
	if err == nil && key == nil {
		err = fmt.Errorf("libsdr: mr key: NULL key: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	*key = C.uint32_t(m.key)
	return C.SDR_SUCCESS
}

//export sdr_recv_post
func sdr_recv_post(qp *C.struct_sdr_qp, wr *C.struct_sdr_recv_wr, handle **C.struct_sdr_recv_handle) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err == nil && (wr == nil || handle == nil) {
		err = fmt.Errorf("libsdr: recv post: NULL request or handle: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	r, err := q.postRecv(uint32(wr.lkey), uintptr(wr.address), int(wr.max_length))
	if err != nil {
		return status(err)
	}
	*handle = C.libsdr_recv(C.uintptr_t(r.handle))
	return C.SDR_SUCCESS
}

//export sdr_recv_imm_get
func sdr_recv_imm_get(handle *C.struct_sdr_recv_handle, imm *C.uint32_t) C.int {
	r, err := lookup[*recvObj](&table, uintptr(unsafe.Pointer(handle)), "recv handle")
	if err == nil && imm == nil {
		err = fmt.Errorf("libsdr: recv imm: NULL immediate: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	v, ok := r.h.Imm()
	if !ok {
		return C.SDR_RETRY
	}
	*imm = C.uint32_t(v)
	return C.SDR_SUCCESS
}

//export sdr_recv_bitmap_get
func sdr_recv_bitmap_get(handle *C.struct_sdr_recv_handle, bytes **C.uint8_t, n *C.size_t) C.int {
	r, err := lookup[*recvObj](&table, uintptr(unsafe.Pointer(handle)), "recv handle")
	if err == nil && (bytes == nil || n == nil) {
		err = fmt.Errorf("libsdr: recv bitmap: NULL output: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	*bytes, *n = nil, 0
	if len(r.words) > 0 {
		// Pinned until sdr_recv_complete (recvObj.pin): C may keep it.
		*bytes = (*C.uint8_t)(unsafe.Pointer(&r.words[0]))
		*n = C.size_t((r.h.Chunks() + 7) / 8)
	}
	return C.SDR_SUCCESS
}

//export sdr_recv_bitmap_chunk_expand
func sdr_recv_bitmap_chunk_expand(handle *C.struct_sdr_recv_handle, chunk C.uint32_t, bitmap *C.uint64_t) C.int {
	r, err := lookup[*recvObj](&table, uintptr(unsafe.Pointer(handle)), "recv handle")
	if err == nil && bitmap == nil {
		err = fmt.Errorf("libsdr: chunk expand: NULL bitmap: %w", sdr.ErrInvalid)
	}
	if err == nil && int(chunk) >= r.h.Chunks() {
		err = fmt.Errorf("libsdr: chunk expand: chunk %d of %d: %w", chunk, r.h.Chunks(), sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	*bitmap = C.uint64_t(r.h.ExpandChunk(int(chunk)))
	return C.SDR_SUCCESS
}

//export sdr_recv_complete
func sdr_recv_complete(handle *C.struct_sdr_recv_handle) C.int {
	r, err := lookup[*recvObj](&table, uintptr(unsafe.Pointer(handle)), "recv handle")
	if err != nil {
		return status(err)
	}
	return status(r.complete())
}

//export sdr_send_post
func sdr_send_post(qp *C.struct_sdr_qp, wr *C.struct_sdr_send_wr, handle **C.struct_sdr_send_handle) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err == nil && (wr == nil || handle == nil) {
		err = fmt.Errorf("libsdr: send post: NULL request or handle: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	imm, hasImm, err := opcode(wr.opcode, wr.imm_value)
	if err != nil {
		return status(err)
	}
	s, err := q.postSend(uint32(wr.lkey), uintptr(wr.local_addr), int(wr.length), uint64(wr.remote_offset), imm, hasImm)
	if err != nil {
		return status(err)
	}
	*handle = C.libsdr_send(C.uintptr_t(s.handle))
	return C.SDR_SUCCESS
}

// opcode reads a request's opcode and immediate.
func opcode(op C.enum_sdr_wr_opcode, imm C.uint32_t) (uint32, bool, error) {
	switch op {
	case C.SDR_WR_WRITE:
		return 0, false, nil
	case C.SDR_WR_WRITE_WITH_IMM:
		return uint32(imm), true, nil
	}
	return 0, false, fmt.Errorf("libsdr: opcode %d: %w", op, sdr.ErrInvalid)
}

//export sdr_streaming_send_start
func sdr_streaming_send_start(qp *C.struct_sdr_qp, wr *C.struct_sdr_send_start_wr, handle **C.struct_sdr_send_handle) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err == nil && (wr == nil || handle == nil) {
		err = fmt.Errorf("libsdr: stream start: NULL request or handle: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	imm, hasImm, err := opcode(wr.opcode, wr.imm_value)
	if err != nil {
		return status(err)
	}
	s, err := q.startStream(imm, hasImm)
	if err != nil {
		return status(err)
	}
	*handle = C.libsdr_send(C.uintptr_t(s.handle))
	return C.SDR_SUCCESS
}

//export sdr_streaming_send_continue
func sdr_streaming_send_continue(handle *C.struct_sdr_send_handle, wr *C.struct_sdr_send_continue_wr) C.int {
	s, err := lookup[*sendObj](&table, uintptr(unsafe.Pointer(handle)), "send handle")
	if err == nil && wr == nil {
		err = fmt.Errorf("libsdr: stream continue: NULL request: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	return status(s.continueStream(uint32(wr.lkey), uintptr(wr.local_addr), int(wr.length), uint64(wr.remote_offset)))
}

//export sdr_streaming_send_end
func sdr_streaming_send_end(handle *C.struct_sdr_send_handle) C.int {
	s, err := lookup[*sendObj](&table, uintptr(unsafe.Pointer(handle)), "send handle")
	if err != nil {
		return status(err)
	}
	return status(s.end())
}

//export sdr_send_poll
func sdr_send_poll(handle *C.struct_sdr_send_handle, completed *C.int, st *C.struct_sdr_send_status) C.int {
	s, err := lookup[*sendObj](&table, uintptr(unsafe.Pointer(handle)), "send handle")
	if err == nil && completed == nil {
		err = fmt.Errorf("libsdr: send poll: NULL flag: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	if st != nil {
		st.flags = 0
	}
	done, err := s.poll()
	if !done {
		*completed = 0
		return C.SDR_RETRY
	}
	*completed = 1
	return status(err)
}

//export sdr_qp_event_fd_get
func sdr_qp_event_fd_get(qp *C.struct_sdr_qp, fd *C.int) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err == nil && fd == nil {
		err = fmt.Errorf("libsdr: event fd: NULL fd: %w", sdr.ErrInvalid)
	}
	if err != nil {
		return status(err)
	}
	n, err := q.events.get()
	if err != nil {
		return status(err)
	}
	*fd = C.int(n)
	return C.SDR_SUCCESS
}

//export sdr_qp_event_ack
func sdr_qp_event_ack(qp *C.struct_sdr_qp) C.int {
	q, err := lookup[*qpObj](&table, uintptr(unsafe.Pointer(qp)), "qp")
	if err != nil {
		return status(err)
	}
	return status(q.events.ack())
}

//export sdr_last_error
func sdr_last_error(buf *C.char, size C.size_t) C.size_t {
	msg := lastErrorMessage()
	if buf != nil && size > 0 {
		size = min(size, C.size_t(len(msg)+1)) // what is written, whatever size claims
		out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(size))
		n := copy(out[:len(out)-1], msg)
		out[n] = 0
	}
	return C.size_t(len(msg))
}

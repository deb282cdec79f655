//go:build dpa

package dpa

// libflexio's include and library flags come from pkg-config under the
// doca tag (doca_dpa.go); without it the FlexIO declarations are
// flexio_decl.h's and the build does not link (nodoca_dpa.go).

/*
#cgo CFLAGS: -I${SRCDIR} -Werror=implicit-function-declaration -Werror=incompatible-pointer-types -Werror=int-conversion
#cgo LDFLAGS: -L${SRCDIR}/device/build -lsdr_dpa -lmlx5 -libverbs
#include "host.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"unsafe"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// device is an open BlueField-3 context. mu guards closed, mrs and qps;
// umrMu serializes the UMR QP (entry mkey updates) across QPs.
type device struct {
	d        *C.struct_sdr_dpa_dev
	channels int
	gid      netip.Addr
	mac      [6]byte

	umrMu sync.Mutex

	mu     sync.Mutex
	closed bool
	mrs    map[*memory]struct{}
	qps    map[*qp]struct{}
}

// memory is a verbs registration of Go memory, pinned while registered.
type memory struct {
	dev *device
	buf []byte
	mr  *C.struct_ibv_mr
	pin runtime.Pinner
}

// Open opens the verbs device, its PD and null MR, the FlexIO process
// of the linked DPA image, the window through which the handlers reach
// host memory, and the UMR QP that rewrites receive entries.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	if attr.Channels < 1 || attr.Channels > 64 {
		return nil, fmt.Errorf("dpa: open: %d channels (1..64)", attr.Channels)
	}
	port := max(b.opts.Port, 1)
	name := C.CString(b.opts.Device)
	defer C.free(unsafe.Pointer(name))
	var step *C.char
	d := C.sdr_dpa_open(name, C.uint32_t(port), C.uint32_t(b.opts.GIDIndex), &step)
	if d == nil {
		return nil, fmt.Errorf("dpa: open %q: %s failed", b.opts.Device, C.GoString(step))
	}
	dv := &device{d: d, channels: attr.Channels, mrs: map[*memory]struct{}{}, qps: map[*qp]struct{}{},
		gid: netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&d.gid))).Unmap()}
	// RoCE addresses frames to the MAC of the GID's network device.
	if ifc, err := net.InterfaceByIndex(int(d.ifindex)); err == nil && len(ifc.HardwareAddr) == 6 {
		dv.mac = [6]byte(ifc.HardwareAddr)
	}
	return dv, nil
}

// RegisterMemory registers buf for local and remote writes; the memory
// stays pinned until Deregister.
func (dv *device) RegisterMemory(buf []byte) (backend.Memory, error) {
	if len(buf) == 0 {
		return nil, errors.New("dpa: register memory: empty buffer")
	}
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.closed {
		return nil, errors.New("dpa: register memory: device closed")
	}
	m := &memory{dev: dv, buf: buf}
	m.pin.Pin(&buf[0])
	m.mr = C.ibv_reg_mr(dv.d.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)),
		C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_WRITE)
	if m.mr == nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("dpa: register %d bytes: ibv_reg_mr failed", len(buf))
	}
	dv.mrs[m] = struct{}{}
	return m, nil
}

func (m *memory) Bytes() []byte { return m.buf }

func (m *memory) Deregister() error {
	m.dev.mu.Lock()
	defer m.dev.mu.Unlock()
	if _, ok := m.dev.mrs[m]; !ok {
		return errors.New("dpa: deregister: not registered")
	}
	delete(m.dev.mrs, m)
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return fmt.Errorf("dpa: ibv_dereg_mr: errno %d", int(rc))
	}
	m.pin.Unpin()
	return nil
}

// own returns mem as this device's live registration.
func (dv *device) own(mem backend.Memory) (*memory, error) {
	m, ok := mem.(*memory)
	if !ok || m.dev != dv {
		return nil, errors.New("memory of another backend or device")
	}
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if _, ok := dv.mrs[m]; !ok {
		return nil, errors.New("memory deregistered")
	}
	return m, nil
}

// Close releases the QPs, the registrations, the UMR QP, the window,
// the process, the null MR, the PD and the device, in that order.
func (dv *device) Close() error {
	dv.mu.Lock()
	if dv.closed {
		dv.mu.Unlock()
		return nil
	}
	dv.closed = true
	qps := dv.qps
	dv.qps = nil
	dv.mu.Unlock()
	for q := range qps {
		q.Close()
	}
	dv.mu.Lock()
	defer dv.mu.Unlock()
	for m := range dv.mrs {
		C.ibv_dereg_mr(m.mr)
		m.pin.Unpin()
	}
	clear(dv.mrs)
	C.sdr_dpa_close(dv.d)
	return nil
}

//go:build dpa

package dpa

/*
#cgo LDFLAGS: -L${SRCDIR}/device/build -lsdr_dpa -lflexio -lmlx5 -libverbs
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#if __has_include(<libflexio/flexio.h>)
#include <libflexio/flexio.h>
#else
#include "flexio_decl.h"
#endif

// The DPA application dpacc links into libsdr_dpa.a (make dpa).
extern struct flexio_app *sdr_dpa_app;

struct sdr_dpa_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *null_mr;
	struct flexio_process *process;
	struct flexio_window *window;
};

static void sdr_dpa_close(struct sdr_dpa_dev *d)
{
	if (d->window)
		flexio_window_destroy(d->window);
	if (d->process)
		flexio_process_destroy(d->process);
	if (d->null_mr)
		ibv_dereg_mr(d->null_mr);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
}

// sdr_dpa_open opens the named device and creates what every QP shares;
// it returns NULL and the failed step in *step.
static struct sdr_dpa_dev *sdr_dpa_open(const char *name, const char **step)
{
	struct sdr_dpa_dev *d = calloc(1, sizeof(*d));
	if (!d) {
		*step = "memory";
		return NULL;
	}
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		if (!d->ctx && !strcmp(ibv_get_device_name(list[i]), name))
			d->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!d->ctx) {
		*step = "ibv_open_device (no such device, or no permission)";
		goto fail;
	}
	if (!(d->pd = ibv_alloc_pd(d->ctx))) {
		*step = "ibv_alloc_pd";
		goto fail;
	}
	if (!(d->null_mr = ibv_alloc_null_mr(d->pd))) {
		*step = "ibv_alloc_null_mr";
		goto fail;
	}
	struct flexio_process_attr pattr = {.pd = d->pd};
	if (flexio_process_create(d->ctx, sdr_dpa_app, &pattr, &d->process) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_process_create (DPA image, EU partition, firmware)";
		goto fail;
	}
	if (flexio_window_create(d->process, d->pd, &d->window) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_window_create";
		goto fail;
	}
	return d;
fail:
	sdr_dpa_close(d);
	return NULL;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// device is an open BlueField-3 context. mu guards closed and mrs.
type device struct {
	d        *C.struct_sdr_dpa_dev
	channels int

	mu     sync.Mutex
	closed bool
	mrs    map[*memory]struct{}
}

// memory is a verbs registration of Go memory, pinned while registered.
type memory struct {
	dev *device
	buf []byte
	mr  *C.struct_ibv_mr
	pin runtime.Pinner
}

// Open opens the verbs device, its PD and null MR, the FlexIO process
// of the linked DPA image and the window through which the handlers
// reach host memory.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	if attr.Channels < 1 || attr.Channels > 64 {
		return nil, fmt.Errorf("dpa: open: %d channels (1..64)", attr.Channels)
	}
	name := C.CString(b.opts.Device)
	defer C.free(unsafe.Pointer(name))
	var step *C.char
	d := C.sdr_dpa_open(name, &step)
	if d == nil {
		return nil, fmt.Errorf("dpa: open %q: %s failed", b.opts.Device, C.GoString(step))
	}
	return &device{d: d, channels: attr.Channels, mrs: map[*memory]struct{}{}}, nil
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

// NewQP is not implemented: the UC channel QPs must be created through
// DevX with their receive CQs bound to DPA event handlers.
func (dv *device) NewQP(backend.QPAttr) (backend.QP, error) {
	return nil, fmt.Errorf("dpa: new QP: DPA-bound UC channel QPs (DevX) are not implemented yet: %w", errors.ErrUnsupported)
}

// Close releases the registrations, the window, the process, the null
// MR, the PD and the device.
func (dv *device) Close() error {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.closed {
		return nil
	}
	dv.closed = true
	for m := range dv.mrs {
		C.ibv_dereg_mr(m.mr)
		m.pin.Unpin()
	}
	clear(dv.mrs)
	C.sdr_dpa_close(dv.d)
	return nil
}

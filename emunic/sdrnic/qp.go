package sdrnic

import (
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

// NewQP creates an SDR QP whose per-packet work is the Go engine
// (sdr/engine), one engineHandler per channel.
func (d *Device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	t, err := d.NewTransport(attr, TransportConfig{Name: "sdrnic"})
	if err != nil {
		return nil, err
	}
	handlers := make([]Handler, d.channels)
	for c := range handlers {
		handlers[c] = engineHandler{t: t}
	}
	if err := t.Start(handlers); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// engineHandler runs the Go engine on a channel's receive completions.
// It holds no state of its own: it reads t.byQPN (read-only) and
// t.slots (atomics).
type engineHandler struct{ t *Transport }

func (h engineHandler) Handle(cqes []emunic.CQE) {
	for i := range cqes {
		h.process(&cqes[i])
	}
}

func (h engineHandler) process(e *emunic.CQE) {
	t := h.t
	ch, ok := t.byQPN[e.QPN]
	if !ok {
		return
	}
	if e.Status == emunic.StatusSuccess && e.HasImm {
		msgID, _, _ := t.attr.Layout.Unpack(e.Imm)
		if a := t.slots.Get(int(msgID) % t.attr.MaxMessages); a != nil {
			r, immDone := a.Slot.Process(uint32(ch.gen), e.Imm, e.ByteLen)
			if r == engine.ChunkComplete || r == engine.OutOfRange || immDone {
				a.Notify()
			}
		}
	}
	// Keep the receive queue stocked: each WRITE-with-Imm took one WQE.
	ch.qp.PostRecv(emunic.RecvWR{})
}

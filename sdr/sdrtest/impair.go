package sdrtest

import (
	"sync"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// impaired decorates a sender's backend so that tests choose the fate of
// each packet whatever carries it: drop, duplicate, reorder, or hold back
// to release later. The receiver cannot tell a packet that was never
// injected from one the network lost, so this exercises the receive path
// of any backend exactly as a lossy link would.
type impaired struct {
	backend.Backend
	mu sync.Mutex
	// fate returns how many copies of packet pkt of the message in slot
	// slot to send now (0 drops it) and whether to hold one copy back.
	fate    func(slot, pkt int) (copies int, hold bool)
	reverse bool // send each write's packets last first
	held    []heldPacket
	// injected counts the packets (data and carriers) handed to the
	// backend, copies included.
	injected int
	// stall, when set, holds every Write until it is closed: a NIC whose
	// send engine is busy.
	stall chan struct{}
}

// hold makes Writes wait until the returned release is called.
func (im *impaired) hold() (release func()) {
	ch := make(chan struct{})
	im.mu.Lock()
	im.stall = ch
	im.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

type heldPacket struct {
	qp backend.QP
	w  backend.Write
}

func (im *impaired) Open(attr backend.DeviceAttr) (backend.Device, error) {
	dev, err := im.Backend.Open(attr)
	if err != nil {
		return nil, err
	}
	return impairedDevice{Device: dev, im: im}, nil
}

// set installs a new packet policy (nil: deliver everything once).
func (im *impaired) set(fate func(slot, pkt int) (int, bool), reverse bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.fate, im.reverse = fate, reverse
}

// release sends the held packets; keep holds them for another release.
func (im *impaired) release(keep bool) error {
	im.mu.Lock()
	held := im.held
	if !keep {
		im.held = nil
	}
	im.mu.Unlock()
	for _, h := range held {
		if err := h.qp.Write(&h.w); err != nil {
			return err
		}
	}
	return nil
}

// packets returns how many packets were injected so far.
func (im *impaired) packets() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.injected
}

// count records n injected packets.
func (im *impaired) count(n int) {
	im.mu.Lock()
	im.injected += n
	im.mu.Unlock()
}

type impairedDevice struct {
	backend.Device
	im *impaired
}

func (d impairedDevice) NewQP(attr backend.QPAttr) (backend.QP, error) {
	q, err := d.Device.NewQP(attr)
	if err != nil {
		return nil, err
	}
	return &impairedQP{QP: q, im: d.im, mtu: attr.MTU}, nil
}

type impairedQP struct {
	backend.QP
	im  *impaired
	mtu int
}

// Write splits the write into single packets and applies the policy.
func (q *impairedQP) Write(w *backend.Write) error {
	q.im.mu.Lock()
	fate, reverse, stall := q.im.fate, q.im.reverse, q.im.stall
	q.im.mu.Unlock()
	if stall != nil {
		<-stall
	}
	if fate == nil && !reverse {
		if err := q.QP.Write(w); err != nil {
			return err
		}
		q.im.count((w.Length+q.mtu-1)/q.mtu + len(w.Carriers))
		return nil
	}
	type one struct {
		w   backend.Write
		pkt int
	}
	var packets []one
	for done := 0; done < w.Length; done += q.mtu {
		p := *w
		p.Off, p.Length, p.FirstPacket, p.Carriers = w.Off+done, min(q.mtu, w.Length-done), w.FirstPacket+done/q.mtu, nil
		packets = append(packets, one{p, p.FirstPacket})
	}
	for _, c := range w.Carriers {
		p := *w
		p.Length, p.Carriers = 0, []int{c}
		packets = append(packets, one{p, c})
	}
	if reverse {
		for i, j := 0, len(packets)-1; i < j; i, j = i+1, j-1 {
			packets[i], packets[j] = packets[j], packets[i]
		}
	}
	for _, p := range packets {
		copies, hold := 1, false
		if fate != nil {
			copies, hold = fate(w.Slot, p.pkt)
		}
		if hold {
			q.im.mu.Lock()
			q.im.held = append(q.im.held, heldPacket{q.QP, p.w})
			q.im.mu.Unlock()
		}
		for range copies {
			if err := q.QP.Write(&p.w); err != nil {
				return err
			}
			q.im.count(1)
		}
	}
	return nil
}

// holdPacket returns a policy that holds packet pkt of every message
// back for a release and delivers the rest once.
func holdPacket(pkt int) func(slot, pkt int) (int, bool) {
	return func(_, p int) (int, bool) {
		if p == pkt {
			return 0, true
		}
		return 1, false
	}
}

// dropPacket returns a policy that drops the listed packets of every
// message and delivers the rest once.
func dropPacket(pkts ...int) func(slot, pkt int) (int, bool) {
	return func(slot, pkt int) (int, bool) {
		for _, p := range pkts {
			if pkt == p {
				return 0, false
			}
		}
		return 1, false
	}
}

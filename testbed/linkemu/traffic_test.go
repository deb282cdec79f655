package linkemu_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/wire"
)

// Probe frames are RoCEv2 UC SEND-Only frames from host A to host B whose
// payload starts with a sequence number and the sender's wall-clock time
// (ns since the epoch), so a receiver tells every frame apart and how long
// it took. The ICRC is left as the template had it: only emunic checks it.
const (
	probeHeaders = 14 + 20 + 8 + 12 // Ethernet, IPv4, UDP, BTH
	probeMin     = probeHeaders + 16 + 4
)

// sender sends probe frames from an AF_XDP socket on host A's interface
// (no XDP program needed to transmit).
type sender struct {
	sock     *xsk.Socket
	template []byte
	batch    [][]byte
}

// newSender opens the socket in from's namespace and builds frames of
// size bytes (at least 64; past the RoCEv2 packet, whose payload is a
// multiple of 4, an Ethernet trailer) to to, with IPv4 TOS byte tos.
func newSender(t testing.TB, from, to *hostnet.Host, size int, tos uint8) *sender {
	t.Helper()
	if size < 64 {
		t.Fatalf("probe size %d: at least 64", size)
	}
	s := &sender{}
	if err := from.NS.Do(func() (err error) {
		s.sock, err = xsk.Open(xsk.Config{Ifindex: from.Ifindex, Mode: xsk.Copy, NumFrames: 4096, RingSize: 2048})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.sock.Close() })
	f := wire.Fields{SrcMAC: from.MAC, DstMAC: to.MAC, SrcIP: from.Addr, DstIP: to.Addr, TTL: 64, DontFragment: true, SrcPort: 0xC000, TrafficClass: tos}
	f.BTH = wire.BTHFields{Opcode: wire.UCSendOnly, PKey: 0xFFFF, DestQP: 0x11}
	f.Payload = make([]byte, (size-probeHeaders-4)&^3)
	s.template = make([]byte, size)
	if _, err := wire.Encode(s.template, &f); err != nil {
		t.Fatalf("encode a %d-byte probe: %v", size, err)
	}
	for range 32 {
		s.batch = append(s.batch, append([]byte(nil), s.template...))
	}
	return s
}

// send sends frames numbered first..first+n-1 at rate frames/s (0: as fast
// as the socket takes them), sleeping between batches of 32, and fails t
// unless the socket took them all. It runs on a real-time thread
// (realtimeThread), so that a busy machine does not slip between a frame's
// time stamp and its transmission.
func (s *sender) send(t testing.TB, first, n int, rate float64) int {
	t.Helper()
	var sent int
	done := make(chan struct{})
	go func() {
		defer close(done)
		realtimeThread()
		sent = s.paced(first, n, rate)
	}()
	<-done
	if sent < n {
		t.Fatalf("sent %d of %d frames", sent, n)
	}
	return sent
}

func (s *sender) paced(first, n int, rate float64) int {
	start := time.Now()
	sent := 0
	for sent < n {
		k := min(len(s.batch), n-sent)
		if rate > 0 {
			due := start.Add(time.Duration(float64(sent) / rate * 1e9))
			if d := time.Until(due); d > 0 {
				// In the kernel, not on a Go timer: a real-time thread
				// wakes on time there, where a timer waits for whichever
				// thread runs the runtime's timers.
				ts := unix.NsecToTimespec(int64(d))
				unix.Nanosleep(&ts, nil)
			}
		}
		now := uint64(time.Now().UnixNano())
		for i, f := range s.batch[:k] {
			if len(f) < probeMin {
				break
			}
			binary.BigEndian.PutUint64(f[probeHeaders:], uint64(first+sent+i))
			binary.BigEndian.PutUint64(f[probeHeaders+8:], now)
		}
		m, err := s.sock.Send(s.batch[:k])
		sent += m
		if err != nil {
			return sent
		}
	}
	return sent
}

// setDstMAC readdresses the frames to mac.
func (s *sender) setDstMAC(mac [6]byte) {
	for _, f := range s.batch {
		copy(f, mac[:])
	}
}

// realtimeThread locks the calling goroutine to its thread, for good (the
// runtime ends the thread with the goroutine), and puts the thread in
// SCHED_FIFO at the emulator's priority if the process may: the test's
// instruments then keep up with the emulator on a machine busy with other
// work, and their own lateness does not pass for the emulator's.
func realtimeThread() {
	runtime.LockOSThread()
	unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 10}, 0)
}

// probeSeq returns a probe frame's sequence number and send time.
func probeSeq(frame []byte) (seq int, sent int64) {
	return int(binary.BigEndian.Uint64(frame[probeHeaders:])), int64(binary.BigEndian.Uint64(frame[probeHeaders+8:]))
}

// xskReceiver receives every RoCEv2 frame arriving at host B on an AF_XDP
// port (the steering program in all-RoCE mode) and records which probes
// came, how many bytes, and when the first and last arrived.
type xskReceiver struct {
	port *xsk.Port
	done chan struct{}
	// fwd returns the emulator's count of frames forwarded toward the
	// receiver's host, base its value once the program was attached.
	fwd  func() uint64
	base uint64

	mu sync.Mutex
	received
}

// received is what an xskReceiver recorded.
type received struct {
	seen        []int // per sequence number: copies received
	ce          int   // frames marked Congestion Experienced
	frames      int
	bytes       int
	first, last time.Time
	batches     []batchArrival // the receives, in order (as many as frames expected)
}

// batchArrival is one receive: when, and how many frame bytes.
type batchArrival struct {
	at    time.Time
	bytes int
}

// record returns a copy of what the receiver recorded so far.
func (r *xskReceiver) record() received {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.received
	c.seen = append([]int(nil), r.seen...)
	c.batches = append([]batchArrival(nil), r.batches...)
	return c
}

func newXSKReceiver(t testing.TB, at *hostnet.Host, n int, fwd func() uint64) *xskReceiver {
	t.Helper()
	r := &xskReceiver{received: received{seen: make([]int, n), batches: make([]batchArrival, 0, n)},
		done: make(chan struct{}), fwd: fwd}
	if err := at.NS.Do(func() (err error) {
		// No busy polling: the receiver runs at real-time priority.
		r.port, err = xsk.NewPort(xsk.PortConfig{Interface: at.IfName, Mode: xsk.Copy, AllRoCE: true, BusyPoll: -1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.base = fwd()
	t.Cleanup(func() {
		r.port.Close()
		<-r.done
	})
	go r.run()
	return r
}

func (r *xskReceiver) run() {
	defer close(r.done)
	realtimeThread()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	for {
		n, err := r.port.Recv(bufs, sizes)
		if err != nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		if r.frames == 0 {
			r.first = now
		}
		r.last = now
		b := 0
		for i := range n {
			b += sizes[i]
			r.frames++
			r.bytes += sizes[i]
			if bufs[i][15]&wire.ECNCE == wire.ECNCE { // the IPv4 TOS byte's ECN bits
				r.ce++
			}
			if sizes[i] < probeMin {
				continue
			}
			if seq, _ := probeSeq(bufs[i][:sizes[i]]); seq >= 0 && seq < len(r.seen) {
				r.seen[seq]++
			}
		}
		if len(r.batches) < cap(r.batches) { // bounded: no allocation here
			r.batches = append(r.batches, batchArrival{at: now, bytes: b})
		}
		r.mu.Unlock()
	}
}

// settle waits until every frame the emulator forwarded toward the
// receiver's host since it attached has reached its XDP program and every
// frame the program redirected has been received (or dropped by the
// kernel and counted in the socket's statistics): a fence, after which
// the receiver's record is complete.
func (r *xskReceiver) settle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := r.port.Program().Counters()
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.port.Stats()
		if err != nil {
			t.Fatal(err)
		}
		frames := r.record().frames
		lost := st.Rx_dropped + st.Rx_ring_full
		fwd := r.fwd() - r.base
		if c.Seen >= fwd && uint64(frames)+lost == c.Redirected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver did not settle: program %+v, socket %+v, %d frames received, emulator forwarded %d", c, st, frames, fwd)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// udpReceiver is a UDP socket on host B's RoCEv2 port with kernel receive
// timestamps: it measures each probe's one-way delay from the sender's
// stamp to the kernel's reception, free of the receiver's scheduling.
type udpReceiver struct {
	conn *net.UDPConn
	done chan struct{}

	mu     sync.Mutex
	delays []time.Duration
}

func newUDPReceiver(t testing.TB, at *hostnet.Host) *udpReceiver {
	t.Helper()
	r := &udpReceiver{done: make(chan struct{})}
	if err := at.NS.Do(func() (err error) {
		r.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(at.Addr, wire.RoCEv2Port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := r.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) {
		serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20))
	})
	if serr != nil {
		t.Fatal(serr)
	}
	t.Cleanup(func() {
		r.conn.Close()
		<-r.done
	})
	go r.run()
	return r
}

func (r *udpReceiver) run() {
	defer close(r.done)
	buf := make([]byte, 2048)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := r.conn.ReadMsgUDP(buf, oob)
		if err != nil {
			return
		}
		payload := buf[:n] // the UDP payload: BTH, then the probe's sequence number and time
		if len(payload) < 12+16 {
			continue
		}
		sent := int64(binary.BigEndian.Uint64(payload[12+8:]))
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				r.mu.Lock()
				r.delays = append(r.delays, time.Duration(ts.Nano()-sent))
				r.mu.Unlock()
			}
		}
	}
}

// wait waits until n delays are recorded and returns them sorted.
func (r *udpReceiver) wait(t testing.TB, n int) []time.Duration {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.delays)
		r.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d probes arrived", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := append([]time.Duration(nil), r.delays...)
	r.delays = r.delays[:0]
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

// quantile returns the q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

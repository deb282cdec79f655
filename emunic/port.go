package emunic

import "net/netip"

// Port moves Ethernet frames between a Device and the wire. Every port
// carries the same encoded RoCEv2 frames. Implementations are safe for
// concurrent Send calls; Recv is called by the device's receive goroutine
// only (a QueuedPort's queues are read instead).
type Port interface {
	// Send transmits frames. The port is done with the buffers when Send
	// returns. It returns how many frames it took.
	Send(frames [][]byte) (int, error)
	// Recv blocks until frames arrive, copies up to len(bufs) of them into
	// bufs (truncating frames longer than a buffer) and their lengths into
	// sizes, and returns how many. After Close it returns ErrClosed. A
	// port may exchange a buffer of at least MaxFrameLen bytes for another
	// of at least MaxFrameLen bytes holding the frame (the pipe hands over
	// its own buffer instead of copying): the caller owns what bufs holds
	// on return, and the port what it held before.
	Recv(bufs [][]byte, sizes []int) (int, error)
	// Close stops the port; a blocked Recv returns ErrClosed.
	Close() error
}

// QueuedPort is implemented by ports with receive queues of their own
// (the AF_XDP port: one socket per receive queue of the interface, over
// which RSS spreads flows by their 5-tuple, and so QPs by their UDP
// source port). The device reads each queue on a receive goroutine of its
// own instead of calling Recv, so that the queues are served on as many
// cores, each with its own batch, ACKs and completions.
type QueuedPort interface {
	// RecvQueues returns the port's receive queues, at least one. A
	// queue may also implement RXBacklogPort, for its own ring.
	RecvQueues() []RecvQueue
}

// RecvQueue is one receive queue of a QueuedPort: Recv is Port.Recv for
// the frames that arrive on this queue alone, and is called by one
// goroutine.
type RecvQueue interface {
	Recv(bufs [][]byte, sizes []int) (int, error)
}

// QPSteering is implemented by ports that deliver only the frames of
// registered QPs (the AF_XDP port, whose XDP program passes every other
// frame to the kernel). The device registers each UD QP when it creates
// it (from any source: peer is the zero Addr) and each connected QP when it
// moves to RTR (from its peer's address only, so that frames from any other
// host never reach the device), and unregisters a QP when destroyed.
type QPSteering interface {
	AddQP(qpn uint32, peer netip.Addr) error
	RemoveQP(qpn uint32) error
}

// TxBufferLender is implemented by ports that transmit from memory of
// their own (the AF_XDP port's UMEM): a QP encodes its frames straight
// into buffers the port lends it, and Send queues a frame that starts a
// lent buffer without copying it, as a NIC reads a work request's data
// where it lies. Lending lasts one post call or one TX scheduler turn:
// every lent buffer goes back to the port before it ends, through Send
// (which takes back the buffers of the frames it is given, sent or not)
// or ReturnTx.
type TxBufferLender interface {
	// LendTx fills bufs with free transmit buffers of TxBufferSize bytes
	// for frames of flow (their UDP source port: a multi-queue port lends
	// from the queue the flow leaves on) and returns how many: fewer when
	// the port is short of them, none once it is closed.
	LendTx(flow uint16, bufs [][]byte) int
	// ReturnTx takes back lent buffers that carry no frame.
	ReturnTx(bufs [][]byte)
	// TxBufferSize is the size of a lent buffer: the longest frame it
	// holds.
	TxBufferSize() int
}

// MTUPort is implemented by ports on a network interface (the AF_XDP
// port): MTU returns the interface's MTU, which bounds the RoCE path MTU
// the device's QPs may use (Device.ActiveMTU).
type MTUPort interface {
	MTU() int
}

// KernelReceiver is implemented by ports whose frames the kernel has
// already received at layers 2 and 3 and that rebuild them without
// Ethernet addresses (the UDP port of package emunic/udp): the device's
// MAC filter does not apply to them. KernelReceived is a marker: it does
// nothing.
type KernelReceiver interface{ KernelReceived() }

// KernelSender is implemented by ports whose kernel writes the IP and UDP
// headers of what they send (the UDP port of package emunic/udp: IP ID
// 0, DF, its socket's source port). The device builds their frames with
// those values, so that the ICRC it computes holds for the headers on
// the wire and the port sends the frame's UDP payload as it is.
type KernelSender interface {
	// KernelSourcePort returns the UDP source port the kernel writes.
	KernelSourcePort() uint16
}

// MaxFrameLen is the largest frame a device sends or receives: a 4096-byte
// MTU packet with every header (Ethernet, VLAN, IPv6, UDP, BTH, RETH,
// ImmDt, ICRC) fits.
const MaxFrameLen = 4096 + 256

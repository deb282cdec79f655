package backend

import "context"

// DatagramAttr configures a datagram channel.
type DatagramAttr struct {
	// MTU is the largest datagram in bytes (256..4096).
	MTU int
	// Depth is how many received datagrams may wait for Recv before
	// further ones are dropped.
	Depth int
}

// DatagramDevice is implemented by devices that offer unreliable
// datagram channels. Why: reliability schemes exchange control messages
// (credits, ACKs, NACKs) that must cross the same lossy, delayed link as
// the data (a UD QP beside the SDR QP's channels), not a side channel.
type DatagramDevice interface {
	NewDatagram(attr DatagramAttr) (Datagram, error)
}

// Datagram is one endpoint of an unreliable, unordered message channel
// between two devices: each Send becomes one packet that may be lost,
// duplicated or reordered by the link.
type Datagram interface {
	// Info describes the endpoint for the peer's Connect.
	Info() ([]byte, error)
	// Connect sets the peer endpoint every Send goes to.
	Connect(remote []byte) error
	// Send transmits p as one datagram (at most the MTU). It returns
	// ErrRetry when the transmit queue is momentarily full.
	Send(p []byte) error
	// Recv blocks until a datagram from the peer arrives or ctx ends,
	// copies it into buf (truncating) and returns its length.
	Recv(ctx context.Context, buf []byte) (int, error)
	// Close releases the channel; a blocked Recv returns.
	Close() error
}

// Package chunk is SDR's unit of completion, the chunk: how many packets
// one may hold, each layer's default size and why, and the bitmap of
// chunks that the SDK hands out and the reliability engines and codes
// read. It imports nothing, so every layer can share it.
//
// A message of L bytes over packets of MTU bytes divides into
// ⌈L/MTU⌉ packets and those into chunks of ChunkSize/MTU packets; the
// receiving NIC counts a chunk complete when all of its packets landed.
package chunk

import (
	"errors"
	"fmt"
)

// MaxPackets is the most packets a chunk holds: the per-packet engine
// keeps a chunk's packets in one 64-bit mask (sdr/engine, and the DPA
// handler that runs its word layout).
const MaxPackets = 64

// ErrInvalid: a chunk that is not 1..MaxPackets whole packets.
var ErrInvalid = errors.New("chunk: invalid size")

// Check reports whether a chunk of size bytes is 1..MaxPackets whole
// packets of mtu bytes; the error wraps ErrInvalid.
func Check(size, mtu int) error {
	if mtu <= 0 || size <= 0 || size%mtu != 0 || size/mtu > MaxPackets {
		return fmt.Errorf("chunk size %d is not 1..%d packets of %d bytes: %w", size, MaxPackets, mtu, ErrInvalid)
	}
	return nil
}

// Each layer's default chunk, where its user leaves the size zero.
const (
	// SDKPackets is the SDK's (sdr.QPAttr): the largest chunk, so the
	// fewest completions to track and the smallest bitmap, as a NIC
	// without software reliability would want.
	SDKPackets = MaxPackets
	// ReliablePackets is reliability/driver's. Every lost packet costs
	// its chunk: at 1 % packet loss a 4-packet chunk is lost 3.9 % of
	// the time, a 64-packet one 47 %, which SR then resends whole and
	// which leaves no MDS(32,8) submessage decodable.
	ReliablePackets = 4
	// ScenarioSize is testbed/scenario's, in bytes: 16 packets of its
	// 1 KiB MTU, so that a scenario's smallest message (64 KiB) still
	// spans a few EC submessages' worth of chunks while each lossy
	// chunk costs no more than 16 packets.
	ScenarioSize = 16 << 10
	// SimSize is testbed/sim's, in bytes: the paper's simulations send
	// 4 KiB chunks of one packet each.
	SimSize = 4096
)

package roce

import (
	"errors"
	"fmt"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// ErrInvalid means a write or an arm the QP refuses: outside its message,
// slot or memory, or a slot armed twice. The SDK's frontend validates
// these before they reach a backend, so this error says a caller skipped
// that; it is deliberately not sdr.ErrInvalid.
var ErrInvalid = errors.New("roce: invalid write or arm")

// CheckWrite validates w, before anything of it is sent, for a QP of
// attr whose peer has entries message IDs, with its payload in a region
// of region bytes: message, generation and packet ranges, carriers, and
// the payload inside the region. It returns the payload's packet count.
func CheckWrite(w *backend.Write, attr backend.QPAttr, entries, region int) (int, error) {
	mtu, slotPackets := attr.MTU, attr.SlotSize/attr.MTU
	packets := (w.Length + mtu - 1) / mtu
	switch {
	case int(w.Gen) >= attr.Generations || w.MsgID >= uint32(entries) || w.Length < 0 || w.FirstPacket < 0:
		return 0, fmt.Errorf("message %d generation %d, %d bytes at packet %d: %w",
			w.MsgID, w.Gen, w.Length, w.FirstPacket, ErrInvalid)
	case w.FirstPacket > slotPackets || packets > slotPackets-w.FirstPacket:
		return 0, fmt.Errorf("packets %d..%d beyond a %d-packet slot: %w",
			w.FirstPacket, w.FirstPacket+packets, slotPackets, ErrInvalid)
	case w.Length > 0 && (w.Off < 0 || w.Off > region || w.Length > region-w.Off):
		return 0, fmt.Errorf("[%d,+%d) outside a %d-byte region: %w", w.Off, w.Length, region, ErrInvalid)
	}
	for _, c := range w.Carriers {
		if c < 0 || uint32(c) >= attr.Layout.MaxPackets() {
			return 0, fmt.Errorf("carrier at packet %d: %w", c, ErrInvalid)
		}
	}
	return packets, nil
}

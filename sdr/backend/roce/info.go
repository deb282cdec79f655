// Package roce holds what an SDR QP does the same on any RoCE transport:
// the endpoint description two QPs exchange (Info) and its checks, the
// peer's receive entries it yields (Peer), the armed-receive table
// (Slots) and the checks of a write before it is sent (CheckWrite).
// emunic's SDR transport (emunic/sdrnic) and the BlueField-3 QP
// (hwnic/dpa) share it; it imports no backend.
package roce

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/wire"
)

// Info is the endpoint description that Info returns and Connect takes,
// as JSON. Tools that connect an SDR QP to a peer that is not sdrnic (a
// plain verbs program) translate to and from it.
type Info struct {
	GID       netip.Addr `json:"gid"`
	MAC       [6]byte    `json:"mac"`
	QPNs      [][]uint32 `json:"qpns"`       // [generation][channel]
	RootRKeys []uint32   `json:"root_rkeys"` // per generation
	// RootBases are the virtual addresses of entry 0 per generation: 0 for
	// emunic's zero-based indirect MRs; a plain verbs peer (no indirect
	// MR) gives its region's address, and its region holds one entry per
	// slot (MaxMessages), whatever RootEntries says.
	RootBases []uint64 `json:"root_bases,omitempty"`
	// RootEntries is how many SlotSize entries each root has: one per
	// message ID (a message goes to entry ID mod RootEntries).
	RootEntries int      `json:"root_entries"`
	PSN         wire.PSN `json:"psn"`
	MTU         int      `json:"mtu"`
	ChunkSize   int      `json:"chunk_size"`
	MaxMessages int      `json:"max_messages"`
	SlotSize    int      `json:"slot_size"`
	Layout      string   `json:"imm_layout"`
	Transport   string   `json:"transport"` // "uc" or "rc"
}

// Geometry is what two connected SDR QPs must agree on.
type Geometry struct {
	MTU, ChunkSize, MaxMessages, SlotSize, Generations, Channels int
	Layout                                                       wire.ImmLayout
	Transport                                                    string
}

// Marshal encodes the info as JSON.
func (in *Info) Marshal() ([]byte, error) { return json.Marshal(in) }

// ParseInfo decodes a peer's Info and checks that it is well formed:
// every field present and in range, QPNs a non-empty rectangle of at most
// 16 generations × 64 channels, one root key (and base, if any) per
// generation. It fails with backend.ErrPeerInfo and never panics.
func ParseInfo(blob []byte) (*Info, error) {
	var in Info
	if err := json.Unmarshal(blob, &in); err != nil {
		return nil, fmt.Errorf("peer info does not decode: %v: %w", err, backend.ErrPeerInfo)
	}
	bad := func(format string, args ...any) (*Info, error) {
		return nil, fmt.Errorf("peer info: "+format+": %w", append(args, backend.ErrPeerInfo)...)
	}
	gens := len(in.QPNs)
	if gens < 1 || gens > 16 {
		return bad("%d generations (1..16)", gens)
	}
	chans := len(in.QPNs[0])
	if chans < 1 || chans > 64 {
		return bad("%d channels (1..64)", chans)
	}
	for g, row := range in.QPNs {
		if len(row) != chans {
			return bad("generation %d has %d channels, generation 0 %d", g, len(row), chans)
		}
		for c, qpn := range row {
			if qpn < 2 || qpn > 0xFFFFFF {
				return bad("QP number %#x of channel %d/%d", qpn, g, c)
			}
		}
	}
	if len(in.RootRKeys) != gens || in.RootBases != nil && len(in.RootBases) != gens {
		return bad("%d root keys and %d bases for %d generations", len(in.RootRKeys), len(in.RootBases), gens)
	}
	for g, k := range in.RootRKeys {
		if k == 0 {
			return bad("root key of generation %d is 0", g)
		}
	}
	layout, err := wire.ParseImmLayout(in.Layout)
	if err != nil {
		return bad("immediate layout %q", in.Layout)
	}
	switch chunkErr := chunk.Check(in.ChunkSize, in.MTU); {
	case !in.GID.IsValid():
		return bad("no GID")
	case uint32(in.PSN) > 0xFFFFFF:
		return bad("PSN %#x", uint32(in.PSN))
	case in.MTU != 256 && in.MTU != 512 && in.MTU != 1024 && in.MTU != 2048 && in.MTU != 4096:
		return bad("MTU %d", in.MTU)
	case chunkErr != nil:
		return bad("%v", chunkErr)
	case in.MaxMessages < 1 || in.MaxMessages&(in.MaxMessages-1) != 0 || uint64(in.MaxMessages) > uint64(layout.MaxMessageIDs()):
		return bad("%d slots", in.MaxMessages)
	case in.SlotSize <= 0 || in.SlotSize%in.MTU != 0 || uint64(in.SlotSize/in.MTU) > uint64(layout.MaxPackets()):
		return bad("slot size %d", in.SlotSize)
	case in.RootEntries < in.MaxMessages || in.RootEntries&(in.RootEntries-1) != 0 || uint64(in.RootEntries) > uint64(layout.MaxMessageIDs()):
		return bad("%d root entries for %d slots", in.RootEntries, in.MaxMessages)
	case uint64(in.RootEntries)*uint64(in.SlotSize) > 1<<62:
		return bad("%d root entries of %d bytes", in.RootEntries, in.SlotSize)
	case in.Transport != "uc" && in.Transport != "rc":
		return bad("transport %q", in.Transport)
	}
	return &in, nil
}

// Geometry returns the geometry the info describes; call it on parsed
// info only.
func (in *Info) Geometry() Geometry {
	layout, _ := wire.ParseImmLayout(in.Layout)
	return Geometry{MTU: in.MTU, ChunkSize: in.ChunkSize, MaxMessages: in.MaxMessages, SlotSize: in.SlotSize,
		Generations: len(in.QPNs), Channels: len(in.QPNs[0]), Layout: layout, Transport: in.Transport}
}

// Check compares parsed info with the local geometry and returns a
// *backend.MismatchError for the first field that differs.
func (in *Info) Check(local Geometry) error {
	remote := in.Geometry()
	for _, f := range []struct {
		name          string
		local, remote any
	}{
		{"MTU", local.MTU, remote.MTU},
		{"chunk size", local.ChunkSize, remote.ChunkSize},
		{"slot count", local.MaxMessages, remote.MaxMessages},
		{"slot size", local.SlotSize, remote.SlotSize},
		{"generation count", local.Generations, remote.Generations},
		{"channel count", local.Channels, remote.Channels},
		{"immediate layout", local.Layout, remote.Layout},
		{"transport", local.Transport, remote.Transport},
	} {
		if f.local != f.remote {
			return &backend.MismatchError{Field: f.name, Local: f.local, Remote: f.remote}
		}
	}
	return nil
}

package roce

// Peer is where the peer's receive entries are, learned by Connect.
type Peer struct {
	RKeys   []uint32 // root key per generation
	Bases   []uint64 // root base address per generation
	Entries int      // entries per root: message IDs, or slots for a plain verbs peer
}

// ParsePeer decodes the peer's Info, checks it against the local
// geometry (ErrPeerInfo, or a *backend.MismatchError) and returns it
// with the peer's receive entries.
func ParsePeer(remote []byte, local Geometry) (*Info, *Peer, error) {
	in, err := ParseInfo(remote)
	if err != nil {
		return nil, nil, err
	}
	if err := in.Check(local); err != nil {
		return nil, nil, err
	}
	p := &Peer{RKeys: in.RootRKeys, Bases: in.RootBases, Entries: in.RootEntries}
	if p.Bases == nil {
		p.Bases = make([]uint64, len(in.RootRKeys))
	} else {
		p.Entries = in.MaxMessages
	}
	return in, p, nil
}

// Base is the remote address of packet 0 of message msgID of generation
// gen.
func (p *Peer) Base(gen, msgID uint32, slotSize int) uint64 {
	return p.Bases[gen] + uint64(int(msgID)%p.Entries)*uint64(slotSize)
}

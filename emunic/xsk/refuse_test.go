package xsk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/wire"
)

// refusalNet is where the refusal tests run: host a, the connected peer,
// and host b, the target, joined by the in-process pipe or by AF_XDP ports
// in two namespaces on a bridge. inject puts crafted frames on the wire
// from a's port, as if a's device had sent them; b's tap records every
// frame b receives and sends.
type refusalNet struct {
	a, b   *emunictest.Host
	inject func(frames [][]byte) (int, error)
	tap    string
	flush  func()
	fa, fb *emunic.QP // the fence pair: UC, a to b
}

// Hosts' addresses of the refusal networks: IPv4 (the default) or
// IPv6-only.
var (
	refusalSubnet4 = netip.MustParsePrefix("10.77.0.0/24")
	refusalSubnet6 = netip.MustParsePrefix("fd00:77::/64")
)

func pipeNet(t *testing.T, subnet netip.Prefix) *refusalNet {
	path := filepath.Join(t.TempDir(), "emunic-b.pcap")
	tap, err := wire.CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() }) // after the device's close, registered later
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	n := &refusalNet{
		a:      emunictest.NewHost(t, pa, subnet.Addr().Next(), [6]byte{2, 0, 0, 0, 0, 1}, nil),
		b:      emunictest.NewHost(t, pb, subnet.Addr().Next().Next(), [6]byte{2, 0, 0, 0, 0, 2}, tap),
		inject: pa.Send,
		tap:    path,
		flush: func() {
			if err := tap.Flush(); err != nil {
				t.Error(err)
			}
		},
	}
	n.connectFence(t)
	return n
}

func xskNet(t *testing.T, subnet netip.Prefix) *refusalNet {
	dir := t.TempDir()
	a, b, pair, flush := newXSKPairOn(t, hostnet.PairConfig{Subnet: subnet, Switched: true}, dir)
	// With br_netfilter loaded, the bridge validates IP headers (and
	// drops a bad IPv4 checksum or an IPv6 payload length beyond the
	// frame) before the target's NIC could: make it forward frames as a
	// plain Ethernet switch does.
	if err := pair.WAN.Do(func() error {
		for _, family := range []string{"iptables", "ip6tables"} {
			err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-"+family, []byte("0"), 0)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n := &refusalNet{a: a, b: b, inject: a.XSK.Send, tap: filepath.Join(dir, "emunic-b.pcap"), flush: flush}
	n.connectFence(t)
	return n
}

func (n *refusalNet) connectFence(t *testing.T) {
	n.fa, n.fb = n.a.QP(t, emunic.UC), n.b.QP(t, emunic.UC)
	emunictest.Connect(t, n.a, n.fa, n.b, n.fb, 1024, emunic.QPAttr{})
}

// fence sends a zero-length WRITE-with-Imm on the fence pair and waits
// for its receive completion at b: b has processed every frame put on the
// wire before it (one port, one receive queue, in order). A completion of
// anything else at b fails the test.
func (n *refusalNet) fence(t *testing.T) {
	t.Helper()
	if err := n.fb.PostRecv(emunic.RecvWR{ID: 0xFE}); err != nil {
		t.Fatal(err)
	}
	if err := n.fa.PostSend(emunic.SendWR{ID: 0xFE, Op: emunic.OpWriteImm, Imm: 0xFE}); err != nil {
		t.Fatal(err)
	}
	emunictest.WaitCQE(t, n.a.SendCQ)
	if c := emunictest.WaitCQE(t, n.b.RecvCQ); c.WRID != 0xFE || c.QPN != n.fb.QPN() {
		t.Fatalf("fence: completion %+v at the target before the fence's", c)
	}
}

// count returns b's counter c: with AF_XDP, the frames its XDP program
// refused for the same reason included (emunic.PortFilter).
func (n *refusalNet) count(c emunic.Counter) uint64 { return n.b.Dev.Stats().Get(c) }

// reply is a frame b sent toward a QP: its opcode, PSN and (ACK, NAK) syndrome.
type reply struct {
	op  wire.Opcode
	psn wire.PSN
	syn wire.Syndrome
}

// replies returns the frames b sent to qpn, from its tap.
func (n *refusalNet) replies(t *testing.T, qpn uint32) []reply {
	n.flush()
	frames, err := wire.ReadPcapFile(n.tap)
	if err != nil {
		t.Fatal(err)
	}
	var out []reply
	for _, f := range frames {
		var p wire.Packet
		if p.Decode(f.Data) != nil || p.SrcIP() != n.b.Dev.GID() || p.BTH.DestQP() != qpn {
			continue
		}
		r := reply{op: p.Opcode(), psn: p.BTH.PSN()}
		if p.AETH != nil {
			r.syn = p.AETH.Syndrome()
		}
		out = append(out, r)
	}
	return out
}

// target is a fresh connected pair (qa on a, qb on b) and a region on b
// with every remote right, registered in the middle of a buffer of canary
// bytes (0xCA) that are all still there.
type target struct {
	typ    emunic.QPType
	qa, qb *emunic.QP
	all    []byte // the region with 64 guard bytes before and after it
	mem    []byte
	mr     *emunic.MR
	psn    wire.PSN // the next PSN qb expects
}

func (n *refusalNet) target(t *testing.T, typ emunic.QPType) *target {
	return n.targetWith(t, typ, emunic.AccessRemoteWrite|emunic.AccessRemoteRead|emunic.AccessRemoteAtomic)
}

// targetWith is target with qb enabled for the remote operations in access
// only.
func (n *refusalNet) targetWith(t *testing.T, typ emunic.QPType, access emunic.Access) *target {
	tg := &target{typ: typ, qa: n.a.QP(t, typ), qb: n.b.QP(t, typ), psn: emunictest.PSNA}
	if err := tg.qb.Modify(emunic.StateInit, emunic.QPAttr{Access: access}); err != nil {
		t.Fatal(err)
	}
	emunictest.Connect(t, n.a, tg.qa, n.b, tg.qb, 1024, emunic.QPAttr{})
	tg.all = bytes.Repeat([]byte{0xCA}, 64+8192+64)
	tg.mem = tg.all[64 : 64+8192 : 64+8192]
	tg.mr = n.b.MR(t, tg.mem)
	return tg
}

// op returns the opcode of rc's operation on the target's transport: UC
// opcodes are RC's plus 0x20.
func (tg *target) op(rc wire.Opcode) wire.Opcode {
	if tg.typ == emunic.UC {
		return rc | 0x20
	}
	return rc
}

// frame builds a request to qb as qa would send it, at the next PSN,
// carrying n payload bytes, addressed to the start of the region; edit
// changes any field before encoding.
func (tg *target) frame(t *testing.T, net *refusalNet, op wire.Opcode, n int, edit func(f *wire.Fields)) []byte {
	t.Helper()
	f := wire.Fields{SrcMAC: net.a.Dev.MAC(), DstMAC: net.b.Dev.MAC(), SrcIP: net.a.Dev.GID(), DstIP: net.b.Dev.GID(),
		TTL: wire.DefaultTTL, DontFragment: true, SrcPort: wire.SourcePort(tg.qa.QPN(), tg.qb.QPN())}
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: tg.qb.QPN(), PSN: tg.psn, AckReq: true}
	f.RETH = wire.RETHFields{VA: tg.mr.Addr(), RKey: tg.mr.RKey(), DMALength: uint32(n)}
	f.AtomicETH = wire.AtomicETHFields{VA: tg.mr.Addr(), RKey: tg.mr.RKey(), SwapAdd: 1}
	f.Imm = 0x1234
	f.Payload = emunictest.Pattern(n, uint64(n))
	if edit != nil {
		edit(&f)
	}
	tg.psn = f.BTH.PSN.Next()
	buf := make([]byte, f.Len())
	size, err := wire.Encode(buf, &f)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:size]
}

// untouched fails t if the target's region or its guards changed.
func (tg *target) untouched(t *testing.T) {
	t.Helper()
	if bytes.Count(tg.all, []byte{0xCA}) != len(tg.all) {
		t.Error("the refused request wrote to the region")
	}
}

// refusalCase is one kind of frame a NIC refuses: frames builds them for
// a fresh target; reason and drops say how b must count them.
type refusalCase struct {
	name   string
	types  []emunic.QPType
	frames func(t *testing.T, n *refusalNet, tg *target) [][]byte
	reason emunic.Counter
	drops  uint64
	// pipeOnly marks frames the XDP program passes to the kernel (another
	// UDP port): only the pipe shows the device counting them.
	pipeOnly bool
}

var connected = []emunic.QPType{emunic.UC, emunic.RC}

func writeOnly(edit func(f *wire.Fields)) func(t *testing.T, n *refusalNet, tg *target) [][]byte {
	return func(t *testing.T, n *refusalNet, tg *target) [][]byte {
		return [][]byte{tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, edit)}
	}
}

// refusalCases are frames that a connected pair's peer (or a host beside
// it) could put on the wire, each with a valid ICRC, that a RoCEv2 NIC
// must refuse (docs/strictness.md): a P_Key outside the partition, a
// source other than the connected peer, another UDP destination port,
// another destination MAC, a bad IPv4 header checksum. Each is dropped
// before it executes, silently (no NAK), and counted under its reason.
var refusalCases = func() []refusalCase {
	var cases []refusalCase
	for _, pkey := range []uint16{0x0000, 0x8000, 0x3FFF, 0x7FFE, 0xFFFE, 0x8001} {
		cases = append(cases, refusalCase{fmt.Sprintf("P_Key %#04x", pkey), connected,
			writeOnly(func(f *wire.Fields) { f.BTH.PKey = pkey }), emunic.RxBadPKey, 1, false})
	}
	stranger := netip.MustParseAddr("10.77.0.9")
	cases = append(cases,
		refusalCase{"another source address", connected,
			writeOnly(func(f *wire.Fields) { f.SrcIP = stranger }), emunic.RxWrongPeer, 1, false},
		refusalCase{"READ from another source address", []emunic.QPType{emunic.RC},
			func(t *testing.T, n *refusalNet, tg *target) [][]byte {
				return [][]byte{tg.frame(t, n, wire.RCReadRequest, 0, func(f *wire.Fields) { f.SrcIP, f.RETH.DMALength = stranger, 64 })}
			}, emunic.RxWrongPeer, 1, false},
		refusalCase{"FETCH_ADD from another source address", []emunic.QPType{emunic.RC},
			func(t *testing.T, n *refusalNet, tg *target) [][]byte {
				return [][]byte{tg.frame(t, n, wire.RCFetchAdd, 0, func(f *wire.Fields) { f.SrcIP = stranger })}
			}, emunic.RxWrongPeer, 1, false},
		refusalCase{"another UDP destination port", connected,
			func(t *testing.T, n *refusalNet, tg *target) [][]byte {
				frame := tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, nil)
				binary.BigEndian.PutUint16(frame[wire.EthernetHeaderLen+20+2:], wire.RoCEv2Port+1)
				return [][]byte{frame}
			}, emunic.RxNotRoCE, 1, true},
		refusalCase{"another unicast MAC", connected,
			writeOnly(func(f *wire.Fields) { f.DstMAC = [6]byte{2, 0, 0, 0, 0, 0x99} }), emunic.RxWrongMAC, 1, false},
		refusalCase{"a multicast MAC", connected,
			writeOnly(func(f *wire.Fields) { f.DstMAC = [6]byte{1, 0, 0x5E, 0x12, 0x34, 0x56} }), emunic.RxWrongMAC, 1, false},
		refusalCase{"bad IPv4 header checksum", connected,
			func(t *testing.T, n *refusalNet, tg *target) [][]byte {
				frame := tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, nil)
				frame[wire.EthernetHeaderLen+10] ^= 0x5A // the ICRC does not cover it
				return [][]byte{frame}
			}, emunic.RxBadIPChecksum, 1, false},
	)
	return cases
}()

// runOver runs fn over the pipe and over AF_XDP between namespaces.
func runOver(t *testing.T, fn func(t *testing.T, n *refusalNet, port string)) {
	runOverSubnet(t, refusalSubnet4, fn)
}

// runOverSubnet is runOver with the hosts' addresses from subnet.
func runOverSubnet(t *testing.T, subnet netip.Prefix, fn func(t *testing.T, n *refusalNet, port string)) {
	for _, port := range []string{"pipe", "xsk"} {
		t.Run(port, func(t *testing.T) {
			var n *refusalNet
			if port == "pipe" {
				n = pipeNet(t, subnet)
			} else {
				n = xskNet(t, subnet)
			}
			fn(t, n, port)
		})
	}
}

// checkRefusals puts each refused frame of cases on the wire toward a
// fresh connected QP of n (see TestRefusals).
func checkRefusals(t *testing.T, n *refusalNet, port string, cases []refusalCase) {
	for _, c := range cases {
		if c.pipeOnly && port != "pipe" {
			continue
		}
		for _, typ := range c.types {
			t.Run(typ.String()+"/"+c.name, func(t *testing.T) {
				tg := n.target(t, typ)
				before := n.count(c.reason)
				if _, err := n.inject(c.frames(t, n, tg)); err != nil {
					t.Fatal(err)
				}
				n.fence(t)
				if got := n.count(c.reason) - before; got != c.drops {
					t.Errorf("%v moved by %d, want %d", c.reason, got, c.drops)
				}
				tg.untouched(t)
				if r := n.replies(t, tg.qa.QPN()); len(r) != 0 {
					t.Errorf("the target answered: %+v", r)
				}
				if s := tg.qb.State(); s != emunic.StateRTS {
					t.Errorf("target QP in %v", s)
				}
			})
		}
	}
}

// TestRefusals puts each refused frame on the wire toward a fresh
// connected QP: nothing is written or completed, nothing is sent back, the
// QP stays usable, and the frame is counted under its reason.
func TestRefusals(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) { checkRefusals(t, n, port, refusalCases) })
}

// TestAcceptedEdges is the refusals' control: a limited-member P_Key
// (0x7FFF matches the QP's full-member 0xFFFF) and the broadcast MAC are
// accepted and the write executes.
func TestAcceptedEdges(t *testing.T) {
	edits := map[string]func(f *wire.Fields){
		"P_Key 0x7FFF":  func(f *wire.Fields) { f.BTH.PKey = 0x7FFF },
		"broadcast MAC": func(f *wire.Fields) { f.DstMAC = [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF} },
	}
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		for name, edit := range edits {
			for _, typ := range connected {
				t.Run(typ.String()+"/"+name, func(t *testing.T) {
					tg := n.target(t, typ)
					frame := tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, edit)
					if _, err := n.inject([][]byte{frame}); err != nil {
						t.Fatal(err)
					}
					n.fence(t)
					emunictest.Verify(t, "written", tg.mem[:64], emunictest.Pattern(64, 64))
				})
			}
		}
	})
}

// TestWriteBoundsAsMessage sends a three-packet WRITE whose first packet
// lies inside the region but whose DMA length runs 952 bytes past its end:
// the message is refused at its FIRST, before any byte is written. UC
// drops its MIDDLE and LAST as abandoned; RC answers the FIRST with a NAK
// (Remote Access Error) and moves the QP to the error state.
func TestWriteBoundsAsMessage(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		for _, typ := range connected {
			t.Run(typ.String(), func(t *testing.T) {
				tg := n.target(t, typ)
				va := tg.mr.Addr() + tg.mr.Len() - 2048
				reth := func(f *wire.Fields) { f.RETH.VA, f.RETH.DMALength = va, 3000 }
				first := tg.frame(t, n, tg.op(wire.RCWriteFirst), 1024, reth)
				frames := [][]byte{first,
					tg.frame(t, n, tg.op(wire.RCWriteMiddle), 1024, nil),
					tg.frame(t, n, tg.op(wire.RCWriteLastImm), 952, nil)}
				if typ == emunic.RC {
					frames = frames[:1] // the QP is in error after the FIRST
				} else if err := tg.qb.PostRecv(emunic.RecvWR{ID: 1}); err != nil {
					t.Fatal(err) // for a LAST with Imm that must not complete
				}
				before := n.b.Dev.Stats()
				if _, err := n.inject(frames); err != nil {
					t.Fatal(err)
				}
				n.fence(t)
				after := n.b.Dev.Stats()
				tg.untouched(t)
				if got := after.Get(emunic.RxOutOfBounds) - before.Get(emunic.RxOutOfBounds); got != 1 {
					t.Errorf("rx_out_of_bounds moved by %d, want 1", got)
				}
				replies := n.replies(t, tg.qa.QPN())
				if typ == emunic.UC {
					if got := after.Get(emunic.RxAbandoned) - before.Get(emunic.RxAbandoned); got != 2 {
						t.Errorf("rx_abandoned moved by %d, want 2 (MIDDLE and LAST)", got)
					}
					return
				}
				want := []reply{{wire.RCAck, emunictest.PSNA, wire.NAK(wire.NAKRemoteAccessError)}}
				if fmt.Sprint(replies) != fmt.Sprint(want) {
					t.Errorf("replies %+v, want %+v", replies, want)
				}
				if s := tg.qb.State(); s != emunic.StateError {
					t.Errorf("target QP in %v, want ERR", s)
				}
			})
		}
	})
}

// readWithPayload returns an RC READ request carrying 16 bytes of payload
// with a valid ICRC: encoded as the WRITE ONLY with the same headers, its
// opcode then changed and the ICRC computed again.
func readWithPayload(t *testing.T, n *refusalNet, tg *target) []byte {
	frame := tg.frame(t, n, wire.RCWriteOnly, 16, func(f *wire.Fields) { f.RETH.DMALength = 64 })
	var p wire.Packet
	if err := p.Decode(frame); err != nil {
		t.Fatal(err)
	}
	p.BTH[0] = byte(wire.RCReadRequest)
	binary.LittleEndian.PutUint32(frame[len(frame)-wire.ICRCLen:], p.ComputeICRC())
	return frame
}

// TestReadWithPayload: an RC READ request carrying payload is answered
// with a NAK (Invalid Request), not a READ response nor silence, and the
// QP moves to the error state.
func TestReadWithPayload(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		tg := n.target(t, emunic.RC)
		before := n.b.Dev.Stats().Get(emunic.RxInvalidRequest)
		if _, err := n.inject([][]byte{readWithPayload(t, n, tg)}); err != nil {
			t.Fatal(err)
		}
		n.fence(t)
		if got := n.b.Dev.Stats().Get(emunic.RxInvalidRequest) - before; got != 1 {
			t.Errorf("rx_invalid_request moved by %d, want 1", got)
		}
		want := []reply{{wire.RCAck, emunictest.PSNA, wire.NAK(wire.NAKInvalidRequest)}}
		if got := n.replies(t, tg.qa.QPN()); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replies %+v, want %+v", got, want)
		}
		if s := tg.qb.State(); s != emunic.StateError {
			t.Errorf("target QP in %v, want ERR", s)
		}
	})
}

// TestQPAccessRights: a request the QP is not enabled for (its access
// flags, not the region's) is an Invalid Request on RC, as rxe's
// check_op_valid has it: NAKed, the QP to the error state; UC drops it.
// Nothing is written or read.
func TestQPAccessRights(t *testing.T) {
	ops := []struct {
		name   string
		typ    emunic.QPType
		access emunic.Access
		frame  func(t *testing.T, n *refusalNet, tg *target) []byte
	}{
		{"WRITE", emunic.RC, emunic.AccessRemoteRead, func(t *testing.T, n *refusalNet, tg *target) []byte {
			return tg.frame(t, n, wire.RCWriteOnly, 64, nil)
		}},
		{"WRITE", emunic.UC, emunic.AccessRemoteRead, func(t *testing.T, n *refusalNet, tg *target) []byte {
			return tg.frame(t, n, wire.UCWriteOnly, 64, nil)
		}},
		{"READ", emunic.RC, emunic.AccessRemoteWrite, func(t *testing.T, n *refusalNet, tg *target) []byte {
			return tg.frame(t, n, wire.RCReadRequest, 0, func(f *wire.Fields) { f.RETH.DMALength = 64 })
		}},
		{"FETCH_ADD", emunic.RC, emunic.AccessRemoteWrite | emunic.AccessRemoteRead, func(t *testing.T, n *refusalNet, tg *target) []byte {
			return tg.frame(t, n, wire.RCFetchAdd, 0, nil)
		}},
	}
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		for _, op := range ops {
			t.Run(op.typ.String()+"/"+op.name, func(t *testing.T) {
				tg := n.targetWith(t, op.typ, op.access)
				before := n.b.Dev.Stats().Get(emunic.RxQPAccessDenied)
				if _, err := n.inject([][]byte{op.frame(t, n, tg)}); err != nil {
					t.Fatal(err)
				}
				n.fence(t)
				if got := n.b.Dev.Stats().Get(emunic.RxQPAccessDenied) - before; got != 1 {
					t.Errorf("rx_qp_access_denied moved by %d, want 1", got)
				}
				tg.untouched(t)
				var want []reply
				state := emunic.StateRTS
				if op.typ == emunic.RC {
					want = []reply{{wire.RCAck, emunictest.PSNA, wire.NAK(wire.NAKInvalidRequest)}}
					state = emunic.StateError
				}
				if got := n.replies(t, tg.qa.QPN()); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("replies %+v, want %+v", got, want)
				}
				if s := tg.qb.State(); s != state {
					t.Errorf("target QP in %v, want %v", s, state)
				}
			})
		}
	})
}

// TestRNRBeforeLength: a SEND with nothing posted to receive into is
// answered with an RNR NAK even when its length is also wrong, as rxe
// checks resources before lengths; the QP stays usable.
func TestRNRBeforeLength(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		tg := n.target(t, emunic.RC)
		before := n.b.Dev.Stats().Get(emunic.RxNoRecvWQE)
		if _, err := n.inject([][]byte{tg.frame(t, n, wire.RCSendOnly, 1025, nil)}); err != nil {
			t.Fatal(err)
		}
		n.fence(t)
		if got := n.b.Dev.Stats().Get(emunic.RxNoRecvWQE) - before; got != 1 {
			t.Errorf("rx_no_recv_wqe moved by %d, want 1", got)
		}
		replies := n.replies(t, tg.qa.QPN())
		if len(replies) != 1 || replies[0].syn.Kind() != wire.SyndromeRNRNAK || replies[0].psn != emunictest.PSNA {
			t.Errorf("replies %+v, want one RNR NAK", replies)
		}
		if s := tg.qb.State(); s != emunic.StateRTS {
			t.Errorf("target QP in %v", s)
		}
	})
}

// TestResponsesInPSNOrder: a WRITE, a READ and a WRITE with immediate
// that finds no receive WQE, arriving together, are answered in PSN order:
// the WRITE's (coalesced) ACK goes out before the READ response and the
// RNR NAK rather than after them.
func TestResponsesInPSNOrder(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		tg := n.target(t, emunic.RC)
		frames := [][]byte{
			tg.frame(t, n, wire.RCWriteOnly, 64, nil),
			tg.frame(t, n, wire.RCReadRequest, 0, func(f *wire.Fields) { f.RETH.DMALength = 64 }),
			tg.frame(t, n, wire.RCWriteOnlyImm, 64, nil),
		}
		if _, err := n.inject(frames); err != nil {
			t.Fatal(err)
		}
		n.fence(t)
		var got []string
		for _, r := range n.replies(t, tg.qa.QPN()) {
			got = append(got, fmt.Sprintf("%v/%v/%#x", r.op, r.syn.Kind(), uint32(r.psn)))
		}
		want := []string{
			fmt.Sprintf("%v/%v/%#x", wire.RCAck, wire.SyndromeACK, uint32(emunictest.PSNA)),
			fmt.Sprintf("%v/%v/%#x", wire.RCReadResponseOnly, wire.SyndromeACK, uint32(emunictest.PSNA.Add(1))),
			fmt.Sprintf("%v/%v/%#x", wire.RCAck, wire.SyndromeRNRNAK, uint32(emunictest.PSNA.Add(2))),
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replies %v, want %v", got, want)
		}
	})
}

// TestUCAbandonedLast: after a PSN gap cuts a UC message, the packet at
// the gap counts as a PSN error and the LAST after it as abandoned; the
// message completes nothing.
func TestUCAbandonedLast(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		tg := n.target(t, emunic.UC)
		if err := tg.qb.PostRecv(emunic.RecvWR{ID: 1}); err != nil {
			t.Fatal(err)
		}
		reth := func(f *wire.Fields) { f.RETH.DMALength = 3000 }
		first := tg.frame(t, n, wire.UCWriteFirst, 1024, reth)
		gap := func(f *wire.Fields) { f.BTH.PSN = f.BTH.PSN.Next() }
		middle := tg.frame(t, n, wire.UCWriteMiddle, 1024, gap)
		last := tg.frame(t, n, wire.UCWriteLastImm, 952, nil)
		before := n.b.Dev.Stats()
		if _, err := n.inject([][]byte{first, middle, last}); err != nil {
			t.Fatal(err)
		}
		n.fence(t) // fails if the LAST completed
		after := n.b.Dev.Stats()
		for c, want := range map[emunic.Counter]uint64{emunic.RxPSNError: 1, emunic.RxAbandoned: 1} {
			if got := after.Get(c) - before.Get(c); got != want {
				t.Errorf("%v moved by %d, want %d", c, got, want)
			}
		}
	})
}

// TestCNPCounted: a RoCEv2 CNP to a connected QP is counted as a CNP, not
// as a frame of the wrong transport, and changes nothing.
func TestCNPCounted(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		for _, typ := range connected {
			t.Run(typ.String(), func(t *testing.T) {
				tg := n.target(t, typ)
				before := n.b.Dev.Stats()
				cnp := tg.frame(t, n, wire.CNP, 0, func(f *wire.Fields) { f.BTH.PSN, f.BTH.AckReq = 0, false })
				if _, err := n.inject([][]byte{cnp}); err != nil {
					t.Fatal(err)
				}
				n.fence(t)
				after := n.b.Dev.Stats()
				if got := after.Get(emunic.RxCNPs) - before.Get(emunic.RxCNPs); got != 1 {
					t.Errorf("rx_cnps moved by %d, want 1", got)
				}
				if got := after.Get(emunic.RxWrongTransport) - before.Get(emunic.RxWrongTransport); got != 0 {
					t.Errorf("rx_wrong_transport moved by %d", got)
				}
				if s := tg.qb.State(); s != emunic.StateRTS {
					t.Errorf("target QP in %v", s)
				}
			})
		}
	})
}

// TestFetchAddAnsweredOnce: a FETCH_ADD is answered by its ATOMIC ACK and
// nothing else (no plain ACK for the same PSN after it).
func TestFetchAddAnsweredOnce(t *testing.T) {
	runOver(t, func(t *testing.T, n *refusalNet, port string) {
		tg := n.target(t, emunic.RC) // its first 8 bytes: 0xCACACACACACACACA
		result := n.a.MR(t, make([]byte, 8))
		if err := tg.qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpFetchAdd, RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey(),
			CompareAdd: 1, SGL: []emunic.SGE{{Addr: result.Addr(), Length: 8, LKey: result.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, n.a.SendCQ); c.Status != emunic.StatusSuccess || c.Opcode != emunic.WCFetchAdd {
			t.Fatalf("FETCH_ADD completion %+v", c)
		}
		n.fence(t)
		if got := binary.LittleEndian.Uint64(result.Bytes()); got != 0xCACACACACACACACA || binary.LittleEndian.Uint64(tg.mem) != 0xCACACACACACACACB {
			t.Fatalf("FETCH_ADD fetched %d, left %d", got, binary.LittleEndian.Uint64(tg.mem))
		}
		want := []reply{{wire.RCAtomicAck, emunictest.PSNA, wire.ACK(wire.CreditsInvalid)}}
		if got := n.replies(t, tg.qa.QPN()); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replies %+v, want only %+v", got, want)
		}
	})
}

// addBridgeHost puts a third namespace on a switched pair's bridge, its
// interface veth0 at addr with the pair's MTU, and returns it as a
// testbed host.
func addBridgeHost(t *testing.T, pair *hostnet.Pair, addr netip.Prefix) *hostnet.Host {
	t.Helper()
	ns, err := hostnet.NewNamespace("c")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := hostnet.AddVeth(pair.WAN, "to-c", ns, "veth0", 1500, 1); err != nil {
		t.Fatal(err)
	}
	wan, err := pair.WAN.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer wan.Close()
	port, err := wan.LinkByName("to-c")
	if err != nil {
		t.Fatal(err)
	}
	br, err := wan.LinkByName("br0")
	if err == nil {
		err = wan.LinkSetMaster(port, br)
	}
	if err == nil {
		err = wan.LinkSetUp(port)
	}
	if err != nil {
		t.Fatal(err)
	}
	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("veth0")
	if err == nil {
		err = h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}})
	}
	if err == nil {
		err = h.LinkSetUp(l)
	}
	if err == nil {
		l, err = h.LinkByName("veth0")
	}
	if err != nil {
		t.Fatal(err)
	}
	return &hostnet.Host{NS: ns, IfName: "veth0", Ifindex: l.Attrs().Index, MAC: [6]byte(l.Attrs().HardwareAddr), Addr: addr.Addr()}
}

// TestThirdHostAttack: a third host on the same bridge knows a connected
// pair's QPNs, R_Keys, addresses and even the PSNs the target expects, and
// sends UC and RC WRITEs (single and multi-packet, with immediate), SENDs,
// READs and atomics from its own address. Nothing executes: the target's
// memory and atomic operand are unchanged and nothing completes; every
// frame is counted (by the target's XDP program, which drops them before
// its socket); and the pair's own traffic afterwards, at the same PSNs,
// runs as if nothing had happened.
func TestThirdHostAttack(t *testing.T) {
	a, b, pair, _ := newXSKPair(t, 1500, "")
	hostC := addBridgeHost(t, pair, netip.MustParsePrefix("10.77.0.3/24"))
	var attacker *xsk.Port
	if err := hostC.NS.Do(func() (err error) {
		attacker, err = xsk.NewPort(xsk.PortConfig{Interface: hostC.IfName, AllRoCE: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { attacker.Close() })

	n := &refusalNet{a: a, b: b}
	uc, rc := n.target(t, emunic.UC), n.target(t, emunic.RC)
	for _, tg := range []*target{uc, rc} { // the atomic operand at 4096: 0xCACACACACACACACA
		if err := tg.qb.PostRecv(emunic.RecvWR{ID: 1, SGL: []emunic.SGE{{Addr: tg.mr.Addr() + 6144, Length: 1024, LKey: tg.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	fromC := func(f *wire.Fields) { f.SrcMAC, f.SrcIP = hostC.MAC, hostC.Addr }
	build := func(tg *target, op wire.Opcode, size int, edit func(f *wire.Fields)) []byte {
		return tg.frame(t, n, op, size, func(f *wire.Fields) {
			fromC(f)
			f.AtomicETH.VA = tg.mr.Addr() + 4096
			f.AtomicETH.Compare = 0xCACACACACACACACA
			if edit != nil {
				edit(f)
			}
		})
	}
	multi := func(f *wire.Fields) { f.RETH.DMALength = 2048 + 100 }
	var frames [][]byte
	for _, tg := range []*target{uc, rc} {
		frames = append(frames,
			build(tg, tg.op(wire.RCWriteOnly), 64, nil),
			build(tg, tg.op(wire.RCWriteOnlyImm), 64, nil),
			build(tg, tg.op(wire.RCWriteFirst), 1024, multi),
			build(tg, tg.op(wire.RCWriteMiddle), 1024, nil),
			build(tg, tg.op(wire.RCWriteLast), 100, nil),
			build(tg, tg.op(wire.RCSendOnly), 64, nil))
		tg.psn = emunictest.PSNA // every attack starts at the PSN the target expects
	}
	frames = append(frames,
		build(rc, wire.RCReadRequest, 0, func(f *wire.Fields) { f.RETH.DMALength = 4096 }),
		build(rc, wire.RCCompareSwap, 0, nil),
		build(rc, wire.RCFetchAdd, 0, nil))
	rc.psn = emunictest.PSNA

	xdpBefore, err := b.XSK.Program().Counters()
	if err != nil {
		t.Fatal(err)
	}
	devBefore := b.Dev.Stats()
	if sent, err := attacker.Send(frames); err != nil || sent != len(frames) {
		t.Fatalf("attacker sent %d of %d frames: %v", sent, len(frames), err)
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	// The fence: every attack frame has reached the target and been
	// counted (dropped by its XDP program, before its socket).
	deadline := time.Now().Add(emunictest.WaitTimeout)
	for {
		xc, err := b.XSK.Program().Counters()
		if err != nil {
			t.Fatal(err)
		}
		if got := xc.WrongPeer - xdpBefore.WrongPeer; got == uint64(len(frames)) {
			break
		} else if got > uint64(len(frames)) || time.Now().After(deadline) {
			t.Fatalf("the target's XDP program counted %d frames from a non-peer, want %d", got, len(frames))
		}
		time.Sleep(time.Millisecond)
	}

	// The pair's own traffic, at the PSNs the attack used, runs as if
	// nothing had happened: an executed attack frame would have consumed
	// the PSN, the receive WQE or the atomic operand.
	n.connectFence(t)
	n.fence(t)
	src := emunictest.Pattern(512, 3)
	srcMR := a.MR(t, src)
	sge := []emunic.SGE{{Addr: srcMR.Addr(), Length: 512, LKey: srcMR.LKey()}}
	for i, tg := range []*target{uc, rc} {
		if err := tg.qa.PostSend(emunic.SendWR{ID: 2, Op: emunic.OpWriteImm, Imm: uint32(i), SGL: sge,
			RemoteAddr: tg.mr.Addr() + 1024, RKey: tg.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, b.RecvCQ); c.WRID != 1 || c.Imm != uint32(i) || c.QPN != tg.qb.QPN() || c.Status != emunic.StatusSuccess {
			t.Fatalf("%v: the pair's WRITE-with-Imm after the attack: %+v", tg.typ, c)
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess {
			t.Fatalf("%v: send completion %+v", tg.typ, c)
		}
		emunictest.Verify(t, tg.typ.String()+" pair's write", tg.mem[1024:1536], src)
		want := bytes.Repeat([]byte{0xCA}, len(tg.all))
		copy(want[64+1024:], src)
		if !bytes.Equal(tg.all, want) {
			t.Errorf("%v: the target's memory holds more than the pair's write", tg.typ)
		}
	}
	result := a.MR(t, make([]byte, 8))
	if err := rc.qa.PostSend(emunic.SendWR{ID: 3, Op: emunic.OpFetchAdd, RemoteAddr: rc.mr.Addr() + 4096, RKey: rc.mr.RKey(),
		CompareAdd: 1, SGL: []emunic.SGE{{Addr: result.Addr(), Length: 8, LKey: result.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess {
		t.Fatalf("the pair's FETCH_ADD after the attack: %+v", c)
	}
	if got := binary.LittleEndian.Uint64(result.Bytes()); got != 0xCACACACACACACACA {
		t.Errorf("the atomic operand was %#x before the pair's FETCH_ADD: the attack changed it", got)
	}

	// The device counts the XDP program's drops as its own (PortFilter):
	// rx_wrong_peer moved by the attack's frames, nothing else did.
	devAfter := b.Dev.Stats()
	for _, c := range emunic.DropReasons {
		want := uint64(0)
		if c == emunic.RxWrongPeer {
			want = uint64(len(frames))
		}
		if got := devAfter.Get(c) - devBefore.Get(c); got != want {
			t.Errorf("%v moved by %d, want %d", c, got, want)
		}
	}
	for _, tg := range []*target{uc, rc} {
		if s := tg.qb.State(); s != emunic.StateRTS {
			t.Errorf("%v target QP in %v", tg.typ, s)
		}
	}
}

// ipv6RefusalCases are refusalCases' counterparts for RoCEv2 over IPv6,
// and the IPv6 header's own faults: RoCEv2 puts UDP right after the IPv6
// header, so a packet with an extension header in between is not RoCEv2
// to the device (and the XDP program passes it to the kernel); an IPv6
// ethertype must carry an IPv6 header, as ipv6_rcv insists; a payload
// length beyond the frame is a truncated packet.
var ipv6RefusalCases = func() []refusalCase {
	const ip6 = wire.EthernetHeaderLen            // the IPv6 header's offset
	stranger := netip.MustParseAddr("fd00:77::9") // in the subnet, not a host of it
	edit := func(change func(frame []byte) []byte) func(t *testing.T, n *refusalNet, tg *target) [][]byte {
		return func(t *testing.T, n *refusalNet, tg *target) [][]byte {
			return [][]byte{change(tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, nil))}
		}
	}
	return []refusalCase{
		{"another IPv6 source address", connected,
			writeOnly(func(f *wire.Fields) { f.SrcIP = stranger }), emunic.RxWrongPeer, 1, false},
		{"another UDP destination port", connected, edit(func(frame []byte) []byte {
			binary.BigEndian.PutUint16(frame[ip6+wire.IPv6HeaderLen+2:], wire.RoCEv2Port+1)
			return frame
		}), emunic.RxNotRoCE, 1, true},
		{"a hop-by-hop extension header before UDP", connected, edit(func(frame []byte) []byte {
			// Next header 0, then 8 bytes: next header UDP, length 0, PadN
			// of 4 bytes.
			ext := []byte{wire.IPProtocolUDP, 0, 1, 4, 0, 0, 0, 0}
			out := append(append(append([]byte{}, frame[:ip6+wire.IPv6HeaderLen]...), ext...), frame[ip6+wire.IPv6HeaderLen:]...)
			out[ip6+6] = 0
			binary.BigEndian.PutUint16(out[ip6+4:], binary.BigEndian.Uint16(out[ip6+4:])+8)
			return out
		}), emunic.RxNotRoCE, 1, true},
		{"an IPv4 header under the IPv6 ethertype", connected, edit(func(frame []byte) []byte {
			frame[ip6] = 0x45
			return frame
		}), emunic.RxNotRoCE, 1, true},
		{"an IPv6 payload length beyond the frame", connected, edit(func(frame []byte) []byte {
			binary.BigEndian.PutUint16(frame[ip6+4:], binary.BigEndian.Uint16(frame[ip6+4:])+64)
			return frame
		}), emunic.RxMalformed, 1, false},
	}
}()

// TestIPv6Refusals runs the refusals of RoCEv2 over IPv6 between hosts
// with IPv6 GIDs (fd00:77::1 and ::2), over the pipe and over AF_XDP: each
// frame is counted under its reason, nothing is written, answered or
// broken; and the fields the ICRC does not cover (hop limit, flow label,
// traffic class) may take any value, as rxe takes them: a write with hop
// limit 1 and a flow label executes.
func TestIPv6Refusals(t *testing.T) {
	runOverSubnet(t, refusalSubnet6, func(t *testing.T, n *refusalNet, port string) {
		if !n.b.Dev.GID().Is6() {
			t.Fatalf("target's GID %v, want IPv6", n.b.Dev.GID())
		}
		checkRefusals(t, n, port, ipv6RefusalCases)
		for _, typ := range connected {
			t.Run(typ.String()+"/hop limit 1 and a flow label", func(t *testing.T) {
				tg := n.target(t, typ)
				frame := tg.frame(t, n, tg.op(wire.RCWriteOnly), 64, func(f *wire.Fields) { f.TTL, f.FlowLabel, f.TrafficClass = 1, 0xABCDE, 0x88 })
				if _, err := n.inject([][]byte{frame}); err != nil {
					t.Fatal(err)
				}
				n.fence(t)
				emunictest.Verify(t, "written", tg.mem[:64], emunictest.Pattern(64, 64))
			})
		}
	})
}

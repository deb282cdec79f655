package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

const pcapUsage = `usage: sdr pcap [-json] [-q] [-sdr LAYOUT] FILE...

Decodes every RoCEv2 packet (UDP port 4791) of each pcap or pcapng file:
one line per packet with addresses, opcode, QPN, PSN, flags, extension
headers, payload length and ICRC status, then a summary per file. Link types
Ethernet, raw IP and Linux cooked (SLL, SLL2) are understood; other packets
are counted and skipped.

With -sdr 10/18/4 (or 8/22/2), the immediates of RDMA WRITE-with-Imm
packets are also shown split by that SDR layout: message ID, packet
offset and the nibble of the user immediate.

With -json, prints JSON Lines: one {"type":"packet",...} object per RoCEv2
packet and one {"type":"summary",...} object per file.

Exit status: 0 when every RoCEv2 packet is well-formed with a good ICRC,
1 when any is malformed or has a bad ICRC, 2 on usage or I/O errors.

flags:
`

// pcapRecord is one RoCEv2 packet as -json prints it. Optional headers are
// present only when the opcode carries them.
type pcapRecord struct {
	Type           string                `json:"type"`
	File           string                `json:"file"`
	Frame          int                   `json:"frame"` // 1-based index in the file
	Time           time.Time             `json:"time"`
	Src            string                `json:"src,omitempty"`
	Dst            string                `json:"dst,omitempty"`
	SrcPort        uint16                `json:"src_port,omitempty"`
	Opcode         string                `json:"opcode,omitempty"`
	OpcodeValue    *uint8                `json:"opcode_value,omitempty"`
	DestQP         uint32                `json:"dest_qp"`
	PSN            uint32                `json:"psn"`
	AckReq         bool                  `json:"ack_req"`
	SolicitedEvent bool                  `json:"solicited_event"`
	MigReq         bool                  `json:"mig_req"`
	FECN           bool                  `json:"fecn,omitempty"`
	BECN           bool                  `json:"becn,omitempty"`
	PadCount       int                   `json:"pad"`
	PKey           uint16                `json:"pkey"`
	RETH           *wire.RETHFields      `json:"reth,omitempty"`
	AETH           *aethRecord           `json:"aeth,omitempty"`
	DETH           *wire.DETHFields      `json:"deth,omitempty"`
	AtomicETH      *wire.AtomicETHFields `json:"atomic_eth,omitempty"`
	OrigRemoteData *uint64               `json:"orig_remote_data,omitempty"`
	Imm            *uint32               `json:"imm,omitempty"`
	SDR            *sdrImmRecord         `json:"sdr,omitempty"`
	InvalidateRKey *uint32               `json:"invalidate_rkey,omitempty"`
	FlushType      *uint32               `json:"flush_type,omitempty"`
	PayloadLen     int                   `json:"payload_len"`
	ICRC           uint32                `json:"icrc"`
	ICRCOK         bool                  `json:"icrc_ok"`
	ICRCExpected   *uint32               `json:"icrc_expected,omitempty"`
	IPv4ChecksumOK *bool                 `json:"ipv4_checksum_ok,omitempty"`
	Error          string                `json:"error,omitempty"` // set for malformed RoCEv2 packets
}

// sdrImmRecord is a WRITE-with-Imm immediate split by the SDR layout.
type sdrImmRecord struct {
	MsgID     uint32 `json:"msg_id"`
	PktOffset uint32 `json:"pkt_offset"`
	Nibble    uint32 `json:"nibble"`
}

type aethRecord struct {
	Syndrome      string `json:"syndrome"`
	SyndromeValue uint8  `json:"syndrome_value"`
	MSN           uint32 `json:"msn"`
}

// pcapSummary counts one file's packets.
type pcapSummary struct {
	Type          string         `json:"type"`
	File          string         `json:"file"`
	Frames        int            `json:"frames"`
	RoCEv2        int            `json:"rocev2"`
	Malformed     int            `json:"malformed"`
	BadICRC       int            `json:"bad_icrc"`
	BadIPChecksum int            `json:"bad_ipv4_checksum"`
	Skipped       int            `json:"skipped"` // not RoCEv2
	Opcodes       map[string]int `json:"opcodes"`
}

func runPcap(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr pcap", pcapUsage, stderr)
	jsonOut := fs.Bool("json", false, "print JSON Lines instead of text")
	quiet := fs.Bool("q", false, "print only the summaries and the faulty packets")
	sdrLayout := fs.String("sdr", "", "split WRITE-with-Imm immediates by this SDR `layout` (e.g. 10/18/4)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	var layout *wire.ImmLayout
	if *sdrLayout != "" {
		l, err := wire.ParseImmLayout(*sdrLayout)
		if err != nil {
			fmt.Fprintf(stderr, "sdr pcap: -sdr: %v\n", err)
			return exitUsage
		}
		layout = &l
	}
	status := exitOK
	enc := json.NewEncoder(stdout)
	for _, path := range fs.Args() {
		summary, err := decodePcapFile(path, layout, func(rec *pcapRecord) {
			faulty := rec.Error != "" || !rec.ICRCOK
			switch {
			case *jsonOut:
				if !*quiet || faulty {
					enc.Encode(rec)
				}
			case !*quiet || faulty:
				fmt.Fprintln(stdout, formatRecord(rec))
			}
		})
		if err != nil {
			fmt.Fprintf(stderr, "sdr pcap: %v\n", err)
			status = exitUsage
			continue
		}
		if *jsonOut {
			enc.Encode(summary)
		} else {
			fmt.Fprintln(stdout, formatSummary(summary))
		}
		if (summary.Malformed > 0 || summary.BadICRC > 0) && status == exitOK {
			status = exitFault
		}
	}
	return status
}

// decodePcapFile decodes every packet of a capture, calling emit for each
// RoCEv2 one, and returns the file's summary. A non-nil layout splits
// WRITE-with-Imm immediates.
func decodePcapFile(path string, layout *wire.ImmLayout, emit func(*pcapRecord)) (*pcapSummary, error) {
	r, err := wire.OpenPcap(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	sum := &pcapSummary{Type: "summary", File: path, Opcodes: map[string]int{}}
	var p wire.Packet
	for {
		data, link, ci, err := r.Next()
		if errors.Is(err, io.EOF) {
			return sum, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: frame %d: %w", path, sum.Frames+1, err)
		}
		sum.Frames++
		err = p.DecodeCaptured(link, data)
		if errors.Is(err, wire.ErrNotRoCE) {
			sum.Skipped++
			continue
		}
		sum.RoCEv2++
		rec := &pcapRecord{Type: "packet", File: path, Frame: sum.Frames, Time: ci.Timestamp.UTC()}
		if err != nil {
			sum.Malformed++
			rec.Error = err.Error()
			fillAddresses(rec, &p)
			emit(rec)
			continue
		}
		fillRecord(rec, &p)
		if layout != nil && rec.Imm != nil && p.Opcode().Info().Operation == wire.OpWrite {
			id, off, nibble := layout.Unpack(*rec.Imm)
			rec.SDR = &sdrImmRecord{MsgID: id, PktOffset: off, Nibble: nibble}
		}
		sum.Opcodes[rec.Opcode]++
		if !rec.ICRCOK {
			sum.BadICRC++
		}
		if rec.IPv4ChecksumOK != nil && !*rec.IPv4ChecksumOK {
			sum.BadIPChecksum++
		}
		emit(rec)
	}
}

// fillAddresses sets what a (possibly malformed) packet's IP and UDP
// headers say; a failed Decode leaves the views it did not reach nil.
func fillAddresses(rec *pcapRecord, p *wire.Packet) {
	switch {
	case p.IPv4 != nil:
		rec.Src, rec.Dst = p.IPv4.Src().String(), p.IPv4.Dst().String()
	case p.IPv6 != nil:
		rec.Src, rec.Dst = p.IPv6.Src().String(), p.IPv6.Dst().String()
	}
	if p.UDP != nil {
		rec.SrcPort = p.UDP.SrcPort()
	}
}

func fillRecord(rec *pcapRecord, p *wire.Packet) {
	fillAddresses(rec, p)
	t := p.TransportFields()
	op := uint8(t.BTH.Opcode)
	rec.Opcode, rec.OpcodeValue = t.BTH.Opcode.String(), &op
	rec.DestQP, rec.PSN = t.BTH.DestQP, uint32(t.BTH.PSN)
	rec.AckReq, rec.SolicitedEvent, rec.MigReq = t.BTH.AckReq, t.BTH.SolicitedEvent, t.BTH.MigReq
	rec.FECN, rec.BECN = t.BTH.FECN, t.BTH.BECN
	rec.PadCount, rec.PKey = p.BTH.PadCount(), t.BTH.PKey
	if p.RETH != nil {
		rec.RETH = &t.RETH
	}
	if p.AETH != nil {
		rec.AETH = &aethRecord{Syndrome: t.AETH.Syndrome.String(), SyndromeValue: uint8(t.AETH.Syndrome), MSN: t.AETH.MSN}
	}
	if p.DETH != nil {
		rec.DETH = &t.DETH
	}
	if p.AtomicETH != nil {
		rec.AtomicETH = &t.AtomicETH
	}
	if p.AtomicAckETH != nil {
		rec.OrigRemoteData = &t.OrigRemoteData
	}
	if p.ImmDt != nil {
		rec.Imm = &t.Imm
	}
	if p.IETH != nil {
		rec.InvalidateRKey = &t.InvalidateRKey
	}
	if p.FETH != nil {
		rec.FlushType = &t.FlushType
	}
	rec.PayloadLen, rec.ICRC = len(p.Payload), p.ICRC
	if want := p.ComputeICRC(); want == p.ICRC {
		rec.ICRCOK = true
	} else {
		rec.ICRCExpected = &want
	}
	if p.IPv4 != nil {
		ok := p.IPv4.ChecksumValid()
		rec.IPv4ChecksumOK = &ok
	}
}

func hostPort(addr string, port uint16) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() && !a.Is4In6() {
		return "[" + addr + "]:" + strconv.Itoa(int(port))
	}
	return addr + ":" + strconv.Itoa(int(port))
}

// formatRecord renders one packet in the style of rxe's icrc_check notes.
func formatRecord(rec *pcapRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5d %s %s > %s", rec.Frame, rec.Time.Format("15:04:05.000000"),
		hostPort(rec.Src, rec.SrcPort), hostPort(rec.Dst, wire.RoCEv2Port))
	if rec.Error != "" {
		fmt.Fprintf(&b, " MALFORMED: %s", rec.Error)
		return b.String()
	}
	fmt.Fprintf(&b, " %-20s qpn=%#06x psn=%#06x A=%d SE=%d M=%d pad=%d pkey=%#04x",
		rec.Opcode, rec.DestQP, rec.PSN, btoi(rec.AckReq), btoi(rec.SolicitedEvent), btoi(rec.MigReq), rec.PadCount, rec.PKey)
	if rec.FECN || rec.BECN {
		fmt.Fprintf(&b, " FECN=%d BECN=%d", btoi(rec.FECN), btoi(rec.BECN))
	}
	if r := rec.RETH; r != nil {
		fmt.Fprintf(&b, " RETH(va=%#x rkey=%#x len=%d)", r.VA, r.RKey, r.DMALength)
	}
	if d := rec.DETH; d != nil {
		fmt.Fprintf(&b, " DETH(qkey=%#x srcqp=%#x)", d.QKey, d.SrcQP)
	}
	if a := rec.AtomicETH; a != nil {
		fmt.Fprintf(&b, " AtomicETH(va=%#x rkey=%#x swap_add=%#x compare=%#x)", a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if a := rec.AETH; a != nil {
		fmt.Fprintf(&b, " AETH(%s msn=%d)", a.Syndrome, a.MSN)
	}
	if v := rec.OrigRemoteData; v != nil {
		fmt.Fprintf(&b, " AtomicAckETH(orig=%#x)", *v)
	}
	if v := rec.Imm; v != nil {
		fmt.Fprintf(&b, " ImmDt=%#08x", *v)
	}
	if s := rec.SDR; s != nil {
		fmt.Fprintf(&b, " SDR(msg=%d pkt=%d nibble=%#x)", s.MsgID, s.PktOffset, s.Nibble)
	}
	if v := rec.InvalidateRKey; v != nil {
		fmt.Fprintf(&b, " IETH(rkey=%#x)", *v)
	}
	if v := rec.FlushType; v != nil {
		fmt.Fprintf(&b, " FETH=%#x", *v)
	}
	fmt.Fprintf(&b, " payload=%d icrc=%#08x", rec.PayloadLen, rec.ICRC)
	if rec.ICRCOK {
		b.WriteString(" ok")
	} else {
		fmt.Fprintf(&b, " BAD(want %#08x)", *rec.ICRCExpected)
	}
	if rec.IPv4ChecksumOK != nil && !*rec.IPv4ChecksumOK {
		b.WriteString(" ipv4-checksum-BAD")
	}
	return b.String()
}

func formatSummary(s *pcapSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d frames, %d RoCEv2 (%d malformed, %d bad ICRC, %d bad IPv4 checksum), %d other skipped",
		s.File, s.Frames, s.RoCEv2, s.Malformed, s.BadICRC, s.BadIPChecksum, s.Skipped)
	names := make([]string, 0, len(s.Opcodes))
	for name := range s.Opcodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		sep := ", "
		if i == 0 {
			sep = "\n  opcodes: "
		}
		fmt.Fprintf(&b, "%s%s %d", sep, name, s.Opcodes[name])
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

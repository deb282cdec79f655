package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// PcapSnapLen is the snapshot length written to pcap headers: enough for
// any RoCEv2 frame, multi-buffer jumbo frames included.
const PcapSnapLen = 262144

// PcapReader reads classic pcap and pcapng files (detected by their magic
// number) through gopacket's pcapgo.
type PcapReader struct {
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	closer io.Closer
}

// OpenPcap opens a pcap or pcapng file for reading.
func OpenPcap(path string) (*PcapReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wire: open pcap: %w", err)
	}
	r, err := NewPcapReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wire: %s: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// NewPcapReader reads a pcap or pcapng stream.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("wire: read pcap header: %w", err)
	}
	if bytes.Equal(magic, []byte{0x0A, 0x0D, 0x0D, 0x0A}) {
		// Captures of several interfaces (tcpdump -i any in pcapng, dumpcap
		// on two ports) mix link types; Next reports each packet's.
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, fmt.Errorf("wire: read pcapng header: %w", err)
		}
		return &PcapReader{ng: ng}, nil
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("wire: read pcap header: %w", err)
	}
	return &PcapReader{pcap: pr}, nil
}

// Next returns the next packet, the link type of the interface it was
// captured on, and its capture metadata; io.EOF after the last packet.
// The data is a fresh slice the caller may keep.
func (r *PcapReader) Next() ([]byte, layers.LinkType, gopacket.CaptureInfo, error) {
	if r.ng != nil {
		data, ci, err := r.ng.ReadPacketData()
		if err != nil {
			return nil, 0, ci, err
		}
		iface, err := r.ng.Interface(ci.InterfaceIndex)
		if err != nil {
			return nil, 0, ci, fmt.Errorf("wire: pcapng interface %d: %w", ci.InterfaceIndex, err)
		}
		return data, iface.LinkType, ci, nil
	}
	data, ci, err := r.pcap.ReadPacketData()
	return data, r.pcap.LinkType(), ci, err
}

// Captured is one packet of a capture file.
type Captured struct {
	Data     []byte
	LinkType layers.LinkType
	Info     gopacket.CaptureInfo
}

// ReadPcapFile reads every packet of a pcap or pcapng file into memory:
// for tests and small captures; stream large ones with OpenPcap.
func ReadPcapFile(path string) ([]Captured, error) {
	r, err := OpenPcap(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []Captured
	for {
		data, link, ci, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("wire: %s: packet %d: %w", path, len(out)+1, err)
		}
		out = append(out, Captured{Data: data, LinkType: link, Info: ci})
	}
}

// Close closes the file OpenPcap opened; it is a no-op for NewPcapReader.
func (r *PcapReader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Linux cooked-capture header lengths and the offset of their protocol
// field (tcpdump -i any).
const (
	linuxSLLLen       = 16
	linuxSLLProtoOff  = 14
	linuxSLL2Len      = 20
	linuxSLL2ProtoOff = 0
)

// DecodeCaptured decodes a captured packet of the given link type into p:
// Ethernet, raw IP (RAW, IPV4, IPV6) and Linux cooked captures (SLL, SLL2).
// Other link types fail with ErrNotRoCE.
func (p *Packet) DecodeCaptured(link layers.LinkType, data []byte) error {
	switch link {
	case layers.LinkTypeEthernet:
		return p.Decode(data)
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return p.DecodeIP(data)
	case layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2:
		hdrLen, protoOff := linuxSLLLen, linuxSLLProtoOff
		if link == layers.LinkTypeLinuxSLL2 {
			hdrLen, protoOff = linuxSLL2Len, linuxSLL2ProtoOff
		}
		*p = Packet{}
		if len(data) < hdrLen {
			return errShortLinkHeader
		}
		switch etherType := binary.BigEndian.Uint16(data[protoOff:]); etherType {
		case EtherTypeIPv4, EtherTypeIPv6:
			return p.decodeIPUnder(etherType, data[hdrLen:])
		}
		return errEtherType
	}
	*p = Packet{}
	return errLinkType
}

// PcapWriter writes Ethernet frames to a classic pcap stream (microsecond
// timestamps, link type EN10MB), which Wireshark and tcpdump open. It is
// safe for concurrent use, and a nil *PcapWriter discards everything, so a
// device can call it unconditionally as its optional tap. Writes are
// buffered; Flush or Close makes them visible.
type PcapWriter struct {
	mu     sync.Mutex
	buf    *bufio.Writer
	w      *pcapgo.Writer
	closer io.Closer
}

// CreatePcap creates (or truncates) a pcap file.
func CreatePcap(path string) (*PcapWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("wire: create pcap: %w", err)
	}
	w, err := NewPcapWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.closer = f
	return w, nil
}

// NewPcapWriter writes a pcap file header to w and returns a writer for
// the packets.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	buf := bufio.NewWriterSize(w, 64<<10)
	pw := pcapgo.NewWriter(buf)
	if err := pw.WriteFileHeader(PcapSnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("wire: write pcap header: %w", err)
	}
	return &PcapWriter{buf: buf, w: pw}, nil
}

// WritePacket appends one frame captured at t. It copies the frame into
// the writer's buffer, so the caller may reuse it at once.
func (w *PcapWriter) WritePacket(t time.Time, frame []byte) error {
	if w == nil {
		return nil
	}
	ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.WritePacket(ci, frame); err != nil {
		return fmt.Errorf("wire: write pcap packet: %w", err)
	}
	return nil
}

// Flush writes buffered packets to the underlying writer.
func (w *PcapWriter) Flush() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.buf.Flush(); err != nil {
		return fmt.Errorf("wire: flush pcap: %w", err)
	}
	return nil
}

// Close flushes and closes the file CreatePcap created.
func (w *PcapWriter) Close() error {
	if w == nil {
		return nil
	}
	err := w.Flush()
	if w.closer != nil {
		if cerr := w.closer.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("wire: close pcap: %w", cerr)
		}
	}
	return err
}

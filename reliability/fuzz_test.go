package reliability_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// FuzzHostileControl feeds both engines forged control datagrams (fuzzed
// bytes, split at 0xFF bytes into datagrams, the first byte of each
// choosing the engine and when) during a transfer over a 5 %-lossy link.
// Whatever arrives, nothing panics or hangs, and a transfer the receiver
// completes holds exactly the sender's bytes.
func FuzzHostileControl(f *testing.F) {
	forge := func(m control.Message) []byte {
		p, _ := m.Append(nil, 1024)
		return p
	}
	f.Add(append([]byte{0}, forge(control.Message{Type: control.ACK, AckFlags: control.AckComplete})...))
	f.Add(append([]byte{1}, forge(control.Message{Type: control.CTS, Transfer: 1, Length: 99, Scheme: 3, K: 2, M: 1, CTSFlags: 1, ChunkSize: testMTU})...))
	f.Add(append([]byte{2}, forge(control.Message{Type: control.NACK, Ranges: []control.Range{{First: 0, Count: 1 << 31}}})...))
	f.Add(append([]byte{3}, forge(control.Message{Type: control.ACK, Cumulative: 1 << 30, Base: 1<<32 - 64, Bits: []uint64{^uint64(0)}})...))
	f.Add(append([]byte{4}, forge(control.Message{Type: control.Abort, Reason: 200})...))
	f.Add(append([]byte{5}, forge(control.Message{Type: control.Probe, Transfer: 1 << 60, From: 1 << 31})...))
	f.Add(append([]byte{6}, forge(control.Message{Type: control.Close})...))
	f.Add(append([]byte{7}, forge(control.Message{Type: control.Ping, Transfer: 1})...))
	f.Add(append([]byte{8}, forge(control.Message{Type: control.Pong, Transfer: 1})...))
	f.Fuzz(func(t *testing.T, input []byte) {
		for _, scheme := range []reliability.ReceiverConfig{{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, {Scheme: scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 3, M: 2}}}} {
			scheme.Timeout = 300 * time.Millisecond
			rng := newRand(uint64(len(input)))
			h := newHarness(t, scheme, func(p packet) (int, time.Duration) {
				if rng.Float64() < 0.05 {
					return 0, 0
				}
				return 1, 0
			})
			for i, d := range bytes.Split(input, []byte{0xFF}) {
				if len(d) == 0 {
					continue
				}
				at := h.start.Add(time.Duration(d[0]>>1) * time.Millisecond)
				datagram := bytes.Clone(d[1:])
				toSender := d[0]&1 == 0
				if toSender {
					h.pair.ToSender(at, datagram)
				} else {
					h.pair.ToReceiver(at, datagram)
				}
				if i > 64 {
					break
				}
			}
			h.transfer(7*testMTU+5, 7*testMTU+5, 1)
			h.run(2 * time.Second)
			if res, ok := h.recvd[0]; ok && res.err == nil && !bytes.Equal(h.rx[0].data, h.payload[0]) {
				t.Fatalf("%v: the receiver completed with wrong bytes", scheme.Scheme)
			}
		}
	})
}

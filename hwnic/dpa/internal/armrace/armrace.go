// Package armrace checks, on any pair of SDR backends, the promise the
// fence in Arm keeps: a chunk reads complete only once its data is in
// the buffer, even when packets of the message arrive around Arm. Each
// round sends a message of one-packet chunks and arms its receive right
// away, so that some packets reach the null memory entry before Arm
// (their completions must never count), some arrive during Arm and some
// after; right after Arm returns every chunk that reads complete must
// hold the message's bytes. A retransmission then completes the
// message. dpasim's tests run it in CI; the dpa package's hardware test
// runs it on a BlueField, where the DPA handlers and Arm's fence markers
// do the work.
package armrace

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/wire"
)

const (
	mtu      = 1024
	packets  = 16
	slots    = 4
	rounds   = 100
	channels = 2
)

// Run runs the rounds from a sender on a to a receiver on b.
func Run(t *testing.T, a, b backend.Backend) {
	attr := backend.QPAttr{MTU: mtu, ChunkSize: mtu, MaxMessages: slots, SlotSize: packets * mtu, Generations: 2,
		Layout: wire.DefaultImmLayout}
	send, smem := open(t, a, attr)
	recv, rmem := open(t, b, attr)
	si, err := send.Info()
	if err != nil {
		t.Fatal(err)
	}
	ri, err := recv.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Connect(si); err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(ri); err != nil {
		t.Fatal(err)
	}
	src, dst := smem.Bytes(), rmem.Bytes()
	progress := make(chan struct{}, 1)
	dropped := 0 // rounds in which packets arrived before the slot was live
	counted := 0 // chunks read complete right after Arm, over all rounds
	for r := range rounds {
		msgID, gen := uint32(r+1), uint32(r%2)
		slot := int(msgID) % slots
		want := bytes.Repeat([]byte{byte(r + 1)}, len(src))
		copy(src, want)
		clear(dst)
		w := &backend.Write{Slot: slot, MsgID: msgID, Gen: gen, Mem: smem, Length: len(src)}
		write(t, send, w)
		es, err := recv.Arm(slot, msgID, gen, rmem, 0, len(dst), backend.Tokens(progress))
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		done := 0
		for i := range packets {
			if !es.ChunkDone(i) {
				continue
			}
			done++
			if got := dst[i*mtu : (i+1)*mtu]; !bytes.Equal(got, want[:mtu]) {
				t.Fatalf("round %d: chunk %d reads complete right after Arm without its data (%#x…): a completion of a packet that reached the null entry counted", r, i, got[:4])
			}
		}
		if done < packets {
			dropped++
		}
		counted += done
		write(t, send, w) // the retransmission
		deadline := time.After(10 * time.Second)
		for es.CompleteChunks() < packets {
			select {
			case <-progress:
			case <-deadline:
				t.Fatalf("round %d: %d of %d chunks after the retransmission", r, es.CompleteChunks(), packets)
			}
		}
		// Duplicates may still be landing: read once Disarm stopped them.
		if err := recv.Disarm(slot); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("round %d: the buffer does not hold the message", r)
		}
	}
	if dropped == 0 {
		t.Fatalf("in none of %d rounds did a packet arrive before the slot was live: the race was never run", rounds)
	}
	t.Logf("%d of %d rounds had packets arrive before the slot was live; %d of %d chunks read complete right after Arm, each with its data",
		dropped, rounds, counted, rounds*packets)
}

// open opens a device of the test's channels, a QP of attr and one
// slot's memory on b; all closed when the test ends.
func open(t *testing.T, b backend.Backend, attr backend.QPAttr) (backend.QP, backend.Memory) {
	d, err := b.Open(backend.DeviceAttr{Channels: channels})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	q, err := d.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.RegisterMemory(make([]byte, attr.SlotSize))
	if err != nil {
		t.Fatal(err)
	}
	return q, m
}

// write sends w, waiting while the send queues are full.
func write(t *testing.T, q backend.QP, w *backend.Write) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := q.Write(w)
		if err == nil {
			return
		}
		if !errors.Is(err, backend.ErrRetry) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

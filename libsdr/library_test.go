package main

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/sdr"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestReadEnv(t *testing.T) {
	e, err := readEnv(envOf(nil))
	if err != nil || e != (env{}) {
		t.Fatalf("empty environment: %+v, %v", e, err)
	}
	e, err = readEnv(envOf(map[string]string{"SDR_QP_NUM_GENERATIONS": "4", "SDR_USE_UC_QP": "0",
		"SDR_DPA_TX_NUM_WORKERS": "8", "SDR_RECV_CTX_N_ROOT_MKEYS": "2"}))
	if err != nil || e.Generations != 4 || !e.channelRC("pipe:x") || !e.channelRC("dpa:mlx5_0") {
		t.Errorf("generations 4, RC: got %+v, %v", e, err)
	}
	if e, _ := readEnv(envOf(map[string]string{"SDR_USE_UC_QP": "1"})); e.channelRC("udp:127.0.0.1") {
		t.Error("SDR_USE_UC_QP=1 chose RC")
	}
	// Unset: the SDK's default, RC, but UC on the BlueField, which has
	// nothing else.
	if e, _ := readEnv(envOf(nil)); !e.channelRC("xsk:eth0") || e.channelRC("dpa:mlx5_0") {
		t.Error("SDR_USE_UC_QP unset: want RC on the emulated NIC, UC on dpa:")
	}
	for _, bad := range []map[string]string{
		{"SDR_QP_NUM_GENERATIONS": "0"},
		{"SDR_QP_NUM_GENERATIONS": "two"},
		{"SDR_USE_UC_QP": "-1"},
		{"SDR_SEND_CTX_SWR_BATCH_SIZE": "16x"},
	} {
		if _, err := readEnv(envOf(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestInfoFraming(t *testing.T) {
	inner := []byte(`{"gid":"10.0.0.1"}`)
	blob, err := frameInfo(inner)
	if err != nil || len(blob) != infoSize {
		t.Fatalf("frame: %d bytes, %v", len(blob), err)
	}
	got, err := unframeInfo(blob)
	if err != nil || !bytes.Equal(got, inner) {
		t.Fatalf("unframe: %q, %v", got, err)
	}
	if _, err := frameInfo(make([]byte, infoSize)); err == nil {
		t.Error("an info larger than the blob was framed")
	}
	bad := append([]byte(nil), blob...)
	bad[4], bad[5], bad[6], bad[7] = 0xff, 0xff, 0xff, 0xff // length beyond the blob
	if _, err := unframeInfo(bad); !errors.Is(err, sdr.ErrPeerInfo) {
		t.Errorf("overlong length: %v", err)
	}
	if _, err := unframeInfo(make([]byte, infoSize)); !errors.Is(err, sdr.ErrPeerInfo) {
		t.Errorf("zeros: %v", err)
	}
}

// FuzzUnframeInfo: any blob is either refused with ErrPeerInfo or yields
// an info inside it; never a panic.
func FuzzUnframeInfo(f *testing.F) {
	blob, _ := frameInfo([]byte(`{"gid":"10.0.0.1","qpns":[[17]]}`))
	f.Add(blob[:64])
	f.Add([]byte{0x53, 0x44, 0x52, 0x51, 4, 0, 0, 0, 'a', 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		inner, err := unframeInfo(b)
		if err != nil {
			if !errors.Is(err, sdr.ErrPeerInfo) {
				t.Fatalf("error %v is not ErrPeerInfo", err)
			}
			return
		}
		if len(inner) > len(b)-infoHeader {
			t.Fatalf("%d-byte info from a %d-byte blob", len(inner), len(b))
		}
	})
}

func TestQPAttr(t *testing.T) {
	good := qpAttr{LogChunk: 12, LogInFlight: 22, LogMessages: 4, MTU: 4, Send: true, RateKbps: 1000}
	a, err := good.sdrAttr(3)
	if err != nil {
		t.Fatal(err)
	}
	want := sdr.QPAttr{MTU: 1024, ChunkSize: 4096, MaxInFlightBytes: 4 << 20, MaxMessages: 16, Send: true, RateLimit: 1e6, Generations: 3}
	if a != want {
		t.Errorf("got %+v, want %+v", a, want)
	}
	for _, bad := range []qpAttr{
		{LogChunk: 12, LogInFlight: 22, LogMessages: 4, MTU: 0}, // SDR_MTU_64
		{LogChunk: 12, LogInFlight: 22, LogMessages: 4, MTU: 7}, // beyond the enum
		{LogChunk: 31, LogInFlight: 22, LogMessages: 4, MTU: 4},
		{LogChunk: 12, LogInFlight: 41, LogMessages: 4, MTU: 4},
		{LogChunk: 12, LogInFlight: 22, LogMessages: 17, MTU: 4},
	} {
		if _, err := bad.sdrAttr(2); !errors.Is(err, sdr.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestHandles: handles of released objects, of another kind, or never
// made are errors; closing a context releases everything it made.
func TestHandles(t *testing.T) {
	c, err := newContext("pipe:handles", envOf(nil), contextAttr{Channels: 1, LogMaxQPs: 0})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := newContext("pipe:handles", envOf(nil), contextAttr{Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.destroy()
	attr := qpAttr{LogChunk: 12, LogInFlight: 20, LogMessages: 2, MTU: 4, Send: true, Recv: true}
	q, err := c.newQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.newQP(attr); !errors.Is(err, sdr.ErrInvalid) || !strings.Contains(err.Error(), "log_max_qps") {
		t.Errorf("a second QP with log_max_qps 0: %v", err)
	}
	m, err := c.register(0x1000, make([]byte, 8192))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lookup[*mrObj](&table, q.handle, "mr"); !errors.Is(err, errHandle) {
		t.Errorf("a QP handle as an MR: %v", err)
	}
	if _, _, err := c.region(m.key, 0x1000+8000, 200); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("a range past the registration: %v", err)
	}
	if mr, off, err := c.region(m.key, 0x1000+4096, 4096); err != nil || off != 4096 || mr != m.mr {
		t.Errorf("the registration's second page: %v, %d, %v", mr, off, err)
	}
	if err := c.destroy(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []uintptr{c.handle, q.handle, m.handle} {
		if v, ok := table.m.Load(h); ok {
			t.Errorf("handle %#x (%T) survived its context", h, v)
		}
	}
	if err := c.destroy(); !errors.Is(err, errHandle) {
		t.Errorf("second destroy: %v", err)
	}
}

// testPair is two contexts on the in-process link name, a QP on each,
// connected, and a 64 KiB registration on the receiving side at the
// made-up address 0x10000. The caller destroys the contexts.
type testPair struct {
	tx, rx *contextObj
	sq, rq *qpObj
	mr     *mrObj
}

func newTestPair(tb testing.TB, name string) testPair {
	tb.Helper()
	var p testPair
	var err error
	if p.tx, err = newContext(name, envOf(nil), contextAttr{Channels: 1}); err != nil {
		tb.Fatal(err)
	}
	if p.rx, err = newContext(name, envOf(nil), contextAttr{Channels: 1}); err != nil {
		tb.Fatal(err)
	}
	attr := qpAttr{LogChunk: 12, LogInFlight: 20, LogMessages: 2, MTU: 4, Send: true, Recv: true}
	if p.sq, err = p.tx.newQP(attr); err != nil {
		tb.Fatal(err)
	}
	if p.rq, err = p.rx.newQP(attr); err != nil {
		tb.Fatal(err)
	}
	si, err1 := p.sq.info()
	ri, err2 := p.rq.info()
	if err := errors.Join(err1, err2); err != nil {
		tb.Fatal(err)
	}
	if err := errors.Join(p.sq.connect(ri), p.rq.connect(si)); err != nil {
		tb.Fatal(err)
	}
	if p.mr, err = p.rx.register(0x10000, make([]byte, 1<<16)); err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkGoSide times, without the C boundary, the Go work behind the
// calls test/callbench.c times through it: the handle lookup and the
// call on the handle. The boundary's cost is callbench's time less this.
func BenchmarkGoSide(b *testing.B) {
	p := newTestPair(b, "pipe:bench")
	defer p.tx.destroy()
	defer p.rx.destroy()
	r, err := p.rq.postRecv(p.mr.key, 0x10000, 1<<16)
	if err != nil {
		b.Fatal(err)
	}
	s, err := p.sq.startStream(0, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("recv_imm_get", func(b *testing.B) {
		for b.Loop() {
			o, err := lookup[*recvObj](&table, r.handle, "recv handle")
			if _, ok := o.h.Imm(); err != nil || ok {
				b.Fatal("immediate without a message")
			}
		}
	})
	b.Run("recv_bitmap_chunk_expand", func(b *testing.B) {
		for b.Loop() {
			o, err := lookup[*recvObj](&table, r.handle, "recv handle")
			if err != nil || o.h.ExpandChunk(3) != 0 {
				b.Fatal("packets without a message")
			}
		}
	})
	b.Run("send_poll", func(b *testing.B) {
		for b.Loop() {
			o, err := lookup[*sendObj](&table, s.handle, "send handle")
			if done, _ := o.poll(); err != nil || done {
				b.Fatal("an open stream polled complete")
			}
		}
	})
}

// TestReleaseRaces: a receive released twice at once, or with its
// context, is released once (the second call fails with errHandle) and
// its pinned bitmap is unpinned: a pinned pointer the garbage collector
// finds leaking aborts the process.
func TestReleaseRaces(t *testing.T) {
	for round := range 20 {
		p := newTestPair(t, fmt.Sprintf("pipe:release-%d", round))
		r, err := p.rq.postRecv(p.mr.key, 0x10000, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		if round%2 == 0 { // two completes at once: one wins
			errs := make(chan error, 2)
			for range 2 {
				go func() { errs <- r.complete() }()
			}
			e1, e2 := <-errs, <-errs
			if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), errHandle) {
				t.Fatalf("two completes: %v, %v", e1, e2)
			}
		} // odd rounds: the receive goes with its context
		if err := errors.Join(p.tx.destroy(), p.rx.destroy()); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
	}
	runtime.GC()
}

// TestDeregisterBusy: a registration the backend will not release yet
// (a receive posted in it) keeps its key and handle, and goes once the
// receive completed.
func TestDeregisterBusy(t *testing.T) {
	p := newTestPair(t, "pipe:dereg")
	defer p.tx.destroy()
	defer p.rx.destroy()
	b, m := p.rx, p.mr
	r, err := p.rq.postRecv(m.key, 0x10000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.deregister(); err == nil {
		t.Fatal("a registration with a receive posted in it was released")
	}
	if _, _, err := b.region(m.key, 0x10000, 16); err != nil {
		t.Errorf("the refused deregistration dropped the key: %v", err)
	}
	if err := r.complete(); err != nil {
		t.Fatal(err)
	}
	if err := m.deregister(); err != nil {
		t.Errorf("after the receive completed: %v", err)
	}
}

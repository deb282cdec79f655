package emunic

import (
	"testing"
	"testing/synctest"
)

// TestMemoryProtection sends requests that name a wrong key, a stale key,
// addresses out of bounds, memory without the needed right, and null-MR
// slots: none may touch memory (canaries and untouched buffers), each is
// counted, and RC answers with a remote access NAK.
func TestMemoryProtection(t *testing.T) {
	type target struct {
		buf    []byte
		intact func() bool
		mr     *MR
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, b *host, tg *target) (addr uint64, rkey uint32)
		op    Op
		want  Counter
	}{
		{"wrong rkey", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr(), tg.mr.RKey() ^ 0x5A // same index, wrong tag
		}, OpWrite, RxBadKey},
		{"stale rkey", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			stale := tg.mr.RKey()
			if err := tg.mr.Deregister(); err != nil {
				t.Fatal(err)
			}
			// Reuse the key index for a new region: the stale key's tag
			// must not match it.
			fresh, err := b.pd.RegisterMR(make([]byte, 64), AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.RKey()>>8 != stale>>8 || fresh.RKey() == stale {
				t.Fatalf("index not reused with a new tag: %#x then %#x", stale, fresh.RKey())
			}
			return fresh.Addr(), stale
		}, OpWrite, RxBadKey},
		{"before the region", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr() - 1, tg.mr.RKey()
		}, OpWrite, RxOutOfBounds},
		{"past the end", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr() + tg.mr.Len() - 10, tg.mr.RKey()
		}, OpWrite, RxOutOfBounds},
		{"read without remote read", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.pd.RegisterMR(tg.buf, AccessRemoteWrite|AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, OpRead, RxAccessDenied},
		{"write without remote write", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.pd.RegisterMR(tg.buf, AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, OpWrite, RxAccessDenied},
		{"key of another PD", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.dev.AllocPD().RegisterMR(tg.buf, AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, OpWrite, RxBadKey},
	}
	for _, typ := range []QPType{UC, RC} {
		for _, c := range cases {
			if c.op == OpRead && typ == UC {
				continue
			}
			t.Run(typ.String()+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a, b := newPipeHosts(t, PipeConfig{})
					qa, qb := a.createQP(t, typ), b.createQP(t, typ)
					connect(t, a, qa, b, qb, 1024, QPAttr{})
					var tg target
					tg.buf, tg.intact = canaried(4096)
					tg.mr = b.register(t, tg.buf)
					addr, rkey := c.setup(t, b, &tg)
					src := pattern(100, 1)
					local := a.register(t, src)
					if err := qa.PostSend(SendWR{ID: 1, Op: c.op, RemoteAddr: addr, RKey: rkey,
						SGL: []SGE{{Addr: local.Addr(), Length: 100, LKey: local.LKey()}}}); err != nil {
						t.Fatal(err)
					}
					if typ == RC {
						if comp := waitCQE(t, a.sendCQ); comp.Status != StatusRemoteAccessError {
							t.Errorf("completion %+v, want remote access error", comp)
						}
						if a.dev.Stats().Get(RxNAKs) != 1 || b.dev.Stats().Get(TxNAKs) != 1 {
							t.Errorf("NAKs: sent %d, received %d", b.dev.Stats().Get(TxNAKs), a.dev.Stats().Get(RxNAKs))
						}
						if qa.State() != StateError || qb.State() != StateError {
							t.Errorf("QP states %v/%v, want ERR", qa.State(), qb.State())
						}
					}
					synctest.Wait()
					if got := b.dev.Stats().Get(c.want); got != 1 {
						t.Errorf("%v = %d, want 1", c.want, got)
					}
					for i, v := range tg.buf {
						if v != 0xCA {
							t.Fatalf("byte %d of the target was written", i)
						}
					}
					if !tg.intact() {
						t.Error("canaries overwritten")
					}
					if c.op == OpRead && string(src) != string(pattern(100, 1)) {
						t.Fatal("a refused READ changed the local buffer")
					}
				})
			})
		}
	}
}

// TestIndirectMR writes through a zero-based indirect MR whose slots point
// at MRs or at the null MR: live slots receive their bytes, null slots
// swallow theirs and still complete, and writes crossing a slot end are
// refused.
func TestIndirectMR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPipeHosts(t, PipeConfig{})
		qa, qb := a.createQP(t, UC), b.createQP(t, UC)
		connect(t, a, qa, b, qb, 1024, QPAttr{})
		const slot = 4096
		root, err := b.pd.RegisterIndirectMR(4, slot, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, 4)
		checks := make([]func() bool, 4)
		for i := range bufs {
			bufs[i], checks[i] = canaried(slot)
		}
		for _, i := range []int{0, 2} {
			mr := b.register(t, bufs[i])
			if err := root.SetSlot(i, mr); err != nil {
				t.Fatal(err)
			}
			if err := mr.Deregister(); err == nil {
				t.Fatal("deregistered an MR an indirect slot points at")
			}
		}
		// Slot 1 is explicitly the null MR; slot 3 never set.
		if err := root.SetSlot(1, b.dev.NullMR()); err != nil {
			t.Fatal(err)
		}
		src := pattern(1024, 9)
		local := a.register(t, src)
		for i := range 4 {
			if err := qb.PostRecv(RecvWR{ID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(SendWR{ID: uint64(i), Op: OpWriteImm, Imm: uint32(i), RemoteAddr: uint64(i*slot + 1024),
				RKey: root.RKey(), SGL: []SGE{{Addr: local.Addr(), Length: 1024, LKey: local.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if c := waitCQE(t, b.recvCQ); c.Imm != uint32(i) || c.Status != StatusSuccess || c.ByteLen != 1024 {
				t.Fatalf("slot %d: completion %+v", i, c)
			}
		}
		for i := range 4 {
			written := string(bufs[i][1024:2048]) == string(src)
			if written != (i == 0 || i == 2) {
				t.Errorf("slot %d: written %v", i, written)
			}
			if !checks[i]() {
				t.Errorf("slot %d: canaries overwritten", i)
			}
		}
		if got := b.dev.Stats().Get(RxNullMRWrites); got != 2048 {
			t.Errorf("null MR swallowed %d bytes, want 2048", got)
		}
		// A write across the end of slot 0 is refused.
		if err := qa.PostSend(SendWR{Op: OpWrite, RemoteAddr: slot - 512, RKey: root.RKey(),
			SGL: []SGE{{Addr: local.Addr(), Length: 1024, LKey: local.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.dev.Stats().Get(RxOutOfBounds); got != 1 {
			t.Errorf("rx_out_of_bounds = %d, want 1", got)
		}
		// Swapping slot 0 to the null MR releases its MR.
		if err := root.SetSlot(0, nil); err != nil {
			t.Fatal(err)
		}
	})
}

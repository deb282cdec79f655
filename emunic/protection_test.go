package emunic_test

import (
	"testing"
	"testing/synctest"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

// TestMemoryProtection sends requests that name a wrong key, a stale key,
// addresses out of bounds, memory without the needed right, and null-MR
// slots: none may touch memory (canaries and untouched buffers), each is
// counted, and RC answers with a remote access NAK.
func TestMemoryProtection(t *testing.T) {
	type target struct {
		buf    []byte
		intact func() bool
		mr     *emunic.MR
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, b *host, tg *target) (addr uint64, rkey uint32)
		op    emunic.Op
		want  emunic.Counter
	}{
		{"wrong rkey", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr(), tg.mr.RKey() ^ 0x5A // same index, wrong tag
		}, emunic.OpWrite, emunic.RxBadKey},
		{"stale rkey", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			stale := tg.mr.RKey()
			if err := tg.mr.Deregister(); err != nil {
				t.Fatal(err)
			}
			// Reuse the key index for a new region: the stale key's tag
			// must not match it.
			fresh, err := b.PD.RegisterMR(make([]byte, 64), emunic.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.RKey()>>8 != stale>>8 || fresh.RKey() == stale {
				t.Fatalf("index not reused with a new tag: %#x then %#x", stale, fresh.RKey())
			}
			return fresh.Addr(), stale
		}, emunic.OpWrite, emunic.RxBadKey},
		{"before the region", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr() - 1, tg.mr.RKey()
		}, emunic.OpWrite, emunic.RxOutOfBounds},
		{"past the end", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			return tg.mr.Addr() + tg.mr.Len() - 10, tg.mr.RKey()
		}, emunic.OpWrite, emunic.RxOutOfBounds},
		{"read without remote read", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.PD.RegisterMR(tg.buf, emunic.AccessRemoteWrite|emunic.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, emunic.OpRead, emunic.RxAccessDenied},
		{"write without remote write", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.PD.RegisterMR(tg.buf, emunic.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, emunic.OpWrite, emunic.RxAccessDenied},
		{"key of another PD", func(t *testing.T, b *host, tg *target) (uint64, uint32) {
			mr, err := b.Dev.AllocPD().RegisterMR(tg.buf, emunic.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			return mr.Addr(), mr.RKey()
		}, emunic.OpWrite, emunic.RxBadKey},
	}
	for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
		for _, c := range cases {
			if c.op == emunic.OpRead && typ == emunic.UC {
				continue
			}
			t.Run(typ.String()+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a, b := newPipeHosts(t, emunic.PipeConfig{})
					qa, qb := a.QP(t, typ), b.QP(t, typ)
					emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
					var tg target
					tg.buf, tg.intact = emunic.Canaried(4096)
					tg.mr = b.MR(t, tg.buf)
					addr, rkey := c.setup(t, b, &tg)
					src := emunictest.Pattern(100, 1)
					local := a.MR(t, src)
					if err := qa.PostSend(emunic.SendWR{ID: 1, Op: c.op, RemoteAddr: addr, RKey: rkey,
						SGL: []emunic.SGE{{Addr: local.Addr(), Length: 100, LKey: local.LKey()}}}); err != nil {
						t.Fatal(err)
					}
					if typ == emunic.RC {
						if comp := emunictest.WaitCQE(t, a.SendCQ); comp.Status != emunic.StatusRemoteAccessError {
							t.Errorf("completion %+v, want remote access error", comp)
						}
						if a.Dev.Stats().Get(emunic.RxNAKs) != 1 || b.Dev.Stats().Get(emunic.TxNAKs) != 1 {
							t.Errorf("NAKs: sent %d, received %d", b.Dev.Stats().Get(emunic.TxNAKs), a.Dev.Stats().Get(emunic.RxNAKs))
						}
						if qa.State() != emunic.StateError || qb.State() != emunic.StateError {
							t.Errorf("QP states %v/%v, want ERR", qa.State(), qb.State())
						}
					}
					synctest.Wait()
					if got := b.Dev.Stats().Get(c.want); got != 1 {
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
					if c.op == emunic.OpRead && string(src) != string(emunictest.Pattern(100, 1)) {
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
		a, b := newPipeHosts(t, emunic.PipeConfig{})
		qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
		const slot = 4096
		root, err := b.PD.RegisterIndirectMR(4, slot, emunic.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, 4)
		checks := make([]func() bool, 4)
		for i := range bufs {
			bufs[i], checks[i] = emunic.Canaried(slot)
		}
		for _, i := range []int{0, 2} {
			mr := b.MR(t, bufs[i])
			if err := root.SetSlot(i, mr); err != nil {
				t.Fatal(err)
			}
			if err := mr.Deregister(); err == nil {
				t.Fatal("deregistered an MR an indirect slot points at")
			}
		}
		// Slot 1 is explicitly the null MR; slot 3 never set.
		if err := root.SetSlot(1, b.Dev.NullMR()); err != nil {
			t.Fatal(err)
		}
		src := emunictest.Pattern(1024, 9)
		local := a.MR(t, src)
		for i := range 4 {
			if err := qb.PostRecv(emunic.RecvWR{ID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Imm: uint32(i), RemoteAddr: uint64(i*slot + 1024),
				RKey: root.RKey(), SGL: []emunic.SGE{{Addr: local.Addr(), Length: 1024, LKey: local.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if c := emunictest.WaitCQE(t, b.RecvCQ); c.Imm != uint32(i) || c.Status != emunic.StatusSuccess || c.ByteLen != 1024 {
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
		if got := b.Dev.Stats().Get(emunic.RxNullMRWrites); got != 2048 {
			t.Errorf("null MR swallowed %d bytes, want 2048", got)
		}
		// A write across the end of slot 0 is refused.
		if err := qa.PostSend(emunic.SendWR{Op: emunic.OpWrite, RemoteAddr: slot - 512, RKey: root.RKey(),
			SGL: []emunic.SGE{{Addr: local.Addr(), Length: 1024, LKey: local.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.Dev.Stats().Get(emunic.RxOutOfBounds); got != 1 {
			t.Errorf("rx_out_of_bounds = %d, want 1", got)
		}
		// Swapping slot 0 to the null MR releases its MR.
		if err := root.SetSlot(0, nil); err != nil {
			t.Fatal(err)
		}
	})
}

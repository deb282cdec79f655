// Package emunictest has helpers that set up emunic devices and queue
// pairs in tests and benchmarks, whatever port carries their frames (pipe,
// UDP, AF_XDP), and the UC WRITE-with-Imm benchmark every port runs.
package emunictest

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
)

// Host is a device with a PD and a send and a receive CQ.
type Host struct {
	Dev    *emunic.Device
	PD     *emunic.PD
	SendCQ *emunic.CQ
	RecvCQ *emunic.CQ
}

// NewHost creates a device on port; it is closed when the test ends.
func NewHost(tb testing.TB, port emunic.Port, gid netip.Addr, mac [6]byte) *Host {
	tb.Helper()
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: mac})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	h := &Host{Dev: dev, PD: dev.AllocPD()}
	h.SendCQ, _ = emunic.NewCQ(1 << 16)
	h.RecvCQ, _ = emunic.NewCQ(1 << 16)
	return h
}

// Connect creates a QP of type typ on a and on b and brings both to RTS
// facing each other at path MTU mtu.
func Connect(tb testing.TB, typ emunic.QPType, a, b *Host, mtu int) (qa, qb *emunic.QP) {
	tb.Helper()
	var qps []*emunic.QP
	for _, h := range []*Host{a, b} {
		qp, err := h.PD.CreateQP(emunic.QPConfig{Type: typ, SendCQ: h.SendCQ, RecvCQ: h.RecvCQ, MaxRecvWR: 1 << 14})
		if err != nil {
			tb.Fatal(err)
		}
		if err := qp.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite | emunic.AccessRemoteRead}); err != nil {
			tb.Fatal(err)
		}
		qps = append(qps, qp)
	}
	for i := range 2 {
		peer, pqp := []*Host{b, a}[i], qps[1-i]
		err := qps[i].Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: pqp.QPN(), DestGID: peer.Dev.GID(),
			DestMAC: peer.Dev.MAC(), RQPSN: 1, PathMTU: mtu})
		if err == nil {
			err = qps[i].Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: 1})
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return qps[0], qps[1]
}

// BenchUCWriteImm sends b.N UC WRITE-with-Imm messages of size bytes from
// a to r at MTU 1024 and reports delivered messages/s, packets/s, payload
// Gbit/s, the process's CPU time per packet and the fraction lost (UDP and
// AF_XDP may drop when the sender outruns the receiver). The receiver keeps
// its receive queue stocked as an SDR receiver does.
func BenchUCWriteImm(b *testing.B, a, r *Host, size int) {
	qa, qr := Connect(b, emunic.UC, a, r, 1024)
	src, err := a.PD.RegisterMR(make([]byte, size), emunic.AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := r.PD.RegisterMR(make([]byte, size), emunic.AccessLocalWrite|emunic.AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	const rqDepth = 8192
	for range rqDepth {
		if err := qr.PostRecv(emunic.RecvWR{}); err != nil {
			b.Fatal(err)
		}
	}
	wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RemoteAddr: dst.Addr(), RKey: dst.RKey(),
		SGL: []emunic.SGE{{Addr: src.Addr(), Length: uint32(size), LKey: src.LKey()}}}
	packets := (size + 1023) / 1024

	const idle = 200 * time.Millisecond
	delivered := make(chan int)
	stop := make(chan struct{})
	go func() {
		var cqes [256]emunic.CQE
		n, last := 0, time.Now()
		for {
			got := r.RecvCQ.Poll(cqes[:])
			for range got {
				qr.PostRecv(emunic.RecvWR{})
			}
			n += got
			if got > 0 {
				last = time.Now()
				continue
			}
			select {
			case <-stop:
				if time.Since(last) > idle {
					delivered <- n
					return
				}
			default:
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()

	before := CPUTime()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		wr.Imm = uint32(i)
		if err := qa.PostSend(wr); err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	n := <-delivered
	elapsed := time.Since(start) - idle
	b.StopTimer()
	cpu := CPUTime() - before
	if n == 0 {
		b.Fatal("nothing delivered")
	}
	pkts := float64(n * packets)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(pkts/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(n*size*8)/elapsed.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/pkts, "cpu-ns/pkt")
	b.ReportMetric(100*(1-float64(n)/float64(b.N)), "%lost")
}

// CPUTime returns the process's user and system CPU time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

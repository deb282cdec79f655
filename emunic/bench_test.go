package emunic

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkUCWriteImm measures the SDR data path's transport: UC
// WRITE-with-Imm messages from one device to another at MTU 1024, over the
// in-process pipe (no link model) and over UDP sockets on loopback. It
// reports delivered messages/s, payload Gbit/s, packets/s, allocations and
// CPU time (both devices, all goroutines) per packet. Over UDP the kernel
// may drop datagrams when the sender outruns the receiver; the benchmark
// counts only what arrived and reports the loss.
func BenchmarkUCWriteImm(b *testing.B) {
	for _, kind := range portKinds {
		for _, size := range []int{64, 1024, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", kind.name, size), func(b *testing.B) {
				benchUCWriteImm(b, kind.hosts, size)
			})
		}
	}
}

func benchUCWriteImm(b *testing.B, hosts func(testing.TB) (*host, *host), size int) {
	a, r := hosts(b)
	qa, qr := a.createQP(b, UC), r.createQP(b, UC)
	connect(b, a, qa, r, qr, 1024, QPAttr{})
	src := a.register(b, pattern(size, 1))
	dst := r.register(b, make([]byte, size))
	const rqDepth = 4096
	for range rqDepth {
		if err := qr.PostRecv(RecvWR{}); err != nil {
			b.Fatal(err)
		}
	}
	wr := SendWR{Op: OpWriteImm, Unsignaled: true, RemoteAddr: dst.Addr(), RKey: dst.RKey(),
		SGL: []SGE{{Addr: src.Addr(), Length: uint32(size), LKey: src.LKey()}}}
	packets := (size + 1023) / 1024

	// The receiver reposts a receive for each completion, as an SDR
	// receiver keeps its queues stocked.
	delivered := make(chan int)
	stop := make(chan struct{})
	go func() {
		var cqes [256]CQE
		n, idle := 0, time.Now()
		for {
			got := r.recvCQ.Poll(cqes[:])
			for range got {
				qr.PostRecv(RecvWR{})
			}
			n += got
			select {
			case <-stop:
				if got == 0 && time.Since(idle) > 200*time.Millisecond {
					delivered <- n
					return
				}
			default:
			}
			if got > 0 {
				idle = time.Now()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()

	before := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		wr.Imm = uint32(i)
		for {
			err := qa.PostSend(wr)
			if err == nil {
				break
			}
			b.Fatal(err)
		}
	}
	close(stop)
	n := <-delivered
	elapsed := time.Since(start) - 200*time.Millisecond // the idle wait
	b.StopTimer()
	cpu := cpuTime() - before
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

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

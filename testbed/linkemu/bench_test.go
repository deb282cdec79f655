package linkemu_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

// BenchmarkForward measures the emulator's forwarding capacity beside the
// raw AF_XDP rate on the same topology, in the same run, as
// emunic/xsk's BenchmarkRawXSK measures its floor: an AF_XDP socket in
// host A sends b.N frames of a fixed size as fast as it can, first to an
// AF_XDP socket on the wan namespace's veth toward A (the hop every frame
// takes into the emulator; no emulator running), then through a bare
// forwarder (BareForward: the emulator's two AF_XDP sides, no link model,
// no delay line — the floor of two copy-mode hops), then through the
// emulator over a perfect link, and then over a link of benchDelay one-way
// delay (rate unlimited: the delay line holds every frame until due) to an
// AF_XDP socket in host B; emu/bare and delay/bare are what the emulator
// itself costs. The sender
// runs at normal priority, the emulator and the receivers at real-time
// priority (a real-time sender flooding one of this machine's two cores
// leaves the emulator and the receiver one core, and starves them). It
// reports
// frames/s received each way, the emulated path's Gbit/s of frames, the
// ratio emulated/raw, and the share of frames the emulated path lost.
func BenchmarkForward(b *testing.B) {
	for _, size := range []int{64, 1100} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			topo := newTopology(b, linkemu.TopologyConfig{StaticNeighbors: true})
			if err := topo.Emulator.Close(); err != nil {
				b.Fatal(err)
			}
			// The receiving port's program drops frames to another MAC:
			// the raw flood is addressed to the wan veth's.
			wanA := &hostnet.Host{NS: topo.WAN, IfName: topo.WANIfA}
			tx := newSender(b, topo.A, topo.B, size, 0)
			tx.setDstMAC(macOf(b, topo.WAN, topo.WANIfA))
			raw, _, rawCPU := flood(b, tx, wanA, b.N, 0)
			tx.setDstMAC(topo.B.MAC)

			stop, err := linkemu.BareForward(topo.WAN, topo.WANIfA, topo.WANIfB)
			if err != nil {
				b.Fatal(err)
			}
			bare, _, bareCPU := flood(b, tx, topo.B, b.N, 0)
			if err := stop(); err != nil {
				b.Fatal(err)
			}

			fwd, got, emuCPU := floodEmulator(b, topo, tx, link.Config{}, b.N)
			delayed := link.Config{Delay: benchDelay}
			fwdDelay, gotDelay, delayCPU := floodEmulator(b, topo, tx, delayed, b.N)
			b.ReportMetric(raw, "raw-frames/s")
			b.ReportMetric(fwd, "emu-frames/s")
			b.ReportMetric(fwd*float64(size*8)/1e9, "emu-Gbit/s")
			b.ReportMetric(fwd/raw, "emu/raw")
			b.ReportMetric(bare, "bare-frames/s")
			b.ReportMetric(fwd/bare, "emu/bare")
			b.ReportMetric(bareCPU, "bare-cpu-ns/frame")
			b.ReportMetric(100*(1-float64(got)/float64(b.N)), "%emu-lost")
			b.ReportMetric(rawCPU, "raw-cpu-ns/frame")
			b.ReportMetric(emuCPU, "emu-cpu-ns/frame")
			b.ReportMetric(fwdDelay, "delay-frames/s")
			b.ReportMetric(fwdDelay*float64(size*8)/1e9, "delay-Gbit/s")
			b.ReportMetric(fwdDelay/raw, "delay/raw")
			b.ReportMetric(fwdDelay/bare, "delay/bare")
			b.ReportMetric(100*(1-float64(gotDelay)/float64(b.N)), "%delay-lost")
			b.ReportMetric(delayCPU, "delay-cpu-ns/frame")
		})
	}
}

// benchDelay is the one-way delay of BenchmarkForward's delayed link: long
// enough that the delay line holds thousands of frames while the flood
// runs, so that the capacity measured is the emulator's with its line in
// use, not only with every frame due on arrival.
const benchDelay = 10 * time.Millisecond

// floodEmulator starts the emulator on topo's wan namespace with cfg in
// both directions, floods n frames from tx through it to host B as flood
// does, and closes it. The rate counts from the first frame sent plus
// cfg's delay, the time the first frame spends on the emulated wire.
func floodEmulator(b *testing.B, topo *linkemu.Topology, tx *sender, cfg link.Config, n int) (rate float64, received int, cpuPerFrame float64) {
	b.Helper()
	emu, err := linkemu.Start(topo.WAN, topo.WANIfA, topo.WANIfB, cfg, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := emu.Close(); err != nil {
			b.Fatal(err)
		}
	}()
	return flood(b, tx, topo.B, n, cfg.Delay)
}

// flood sends n frames from tx as fast as its socket takes them to a
// receiver on to and returns the frames per second received, from the
// first sent (plus delay, the emulated wire's) to the last received, how many were, and the process's CPU
// time per frame sent (sender, receiver, emulator, and the kernel's work
// in their system calls, which includes the veths' XDP: a measure that
// does not depend on what else keeps the machine busy).
func flood(b *testing.B, tx *sender, to *hostnet.Host, n int, delay time.Duration) (rate float64, received int, cpuPerFrame float64) {
	b.Helper()
	rx := newXSKReceiver(b, to, 0, func() uint64 { return 0 })
	b.ResetTimer()
	cpu := emunictest.CPUTime()
	start := time.Now()
	if sent := tx.paced(0, n, 0); sent != n {
		b.Fatalf("sent %d of %d", sent, n)
	}
	// Until the receiver has had nothing new for 100 ms: the end of a
	// flood, which no counter announces when frames may be lost.
	last, quiet := -1, 0
	for quiet < 5 {
		time.Sleep(20 * time.Millisecond)
		r := rx.record()
		if r.frames == last {
			quiet++
		} else {
			last, quiet = r.frames, 0
		}
	}
	b.StopTimer()
	cpuPerFrame = float64((emunictest.CPUTime() - cpu).Nanoseconds()) / float64(n)
	r := rx.record()
	rx.port.Close()
	if r.frames == 0 {
		b.Fatal("nothing received")
	}
	return float64(r.frames) / r.last.Sub(start.Add(delay)).Seconds(), r.frames, cpuPerFrame
}

// macOf returns the Ethernet address of interface name in ns.
func macOf(b *testing.B, ns *hostnet.Namespace, name string) [6]byte {
	h, err := ns.Handle()
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		b.Fatal(err)
	}
	return [6]byte(l.Attrs().HardwareAddr)
}

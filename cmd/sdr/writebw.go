package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/testbed/writebw"
	"github.com/sdr-rdma/sdr/wire"
)

const writeBWUsage = `usage: sdr write-bw [flags]            (server)
       sdr write-bw [flags] SERVER     (client)
       sdr write-bw -loopback [flags]  (both, in one process, over an in-memory link)

Measures SDR write bandwidth like perftest's ib_write_bw: the client sends
messages as SDR writes (one WRITE-with-Immediate per packet, spread over
channels), the server posts receives, waits for each message's chunks and
returns credits. QP information and credits travel over TCP (port 18515).
The server's view is what counts: bandwidth is of chunks delivered.

The emulated NIC runs on an AF_XDP port (-dev xsk -i IFACE, root) or a UDP
socket (-dev udp -a ADDR). Loss injection (-loss) drops that fraction of
packets at the server's ingress (XDP) or on the in-memory link.

flags:
`

func runWriteBW(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr write-bw", writeBWUsage, stderr)
	f := writebw.Options{Log: stderr, Command: shellCommand(append([]string{"sdr", "write-bw"}, args...))}
	p := &f.Params
	p.Size = 65536
	fs.Func("s", "message `size` in bytes, e.g. 65536, 64KiB or 64MiB (default 65536)", byteCountFlag(&p.Size, 1<<40))
	fs.IntVar(&p.Iterations, "n", 1000, "measured `iterations`")
	fs.IntVar(&p.Warmup, "w", 100, "warm-up `messages` before measuring")
	fs.IntVar(&p.MTU, "m", 1024, "path `MTU`: 256..4096")
	fs.IntVar(&p.ChunkSize, "c", 0, "chunk `size` in bytes (default 64 MTUs)")
	fs.IntVar(&p.Channels, "C", 4, "`channels` (transport QPs per generation)")
	fs.IntVar(&p.InFlight, "q", 16, "messages in `flight` (receive slots, a power of two; with -scheme, transfers under way, at most 4)")
	fs.BoolVar(&p.RC, "rc", false, "carry packets on RC channel QPs (the NIC-reliability baseline) instead of UC")
	fs.Float64Var(&p.Loss, "loss", 0, "drop this `fraction` of packets at the server's ingress")
	fs.Float64Var(&p.RateGbps, "rate", 0, "pace the client to this many `Gbit/s` (all channels; 0: unpaced)")
	fs.StringVar(&p.Timeout, "timeout", "", "give up on a message after this long without progress (default 50ms with loss, 1s without)")
	fs.StringVar(&p.Scheme, "scheme", "", "move every message reliably with this `scheme`: sr-rto, sr-nack, ec, hybrid or auto, ec and hybrid optionally with their code as sdr sim takes them, e.g. ec-mds(32,8) (default: raw SDR writes); every byte is verified")
	fs.StringVar(&p.Code, "code", "", "erasure `code` of -scheme ec and hybrid when the scheme names none, e.g. mds(32,8) (default: the reliability layer's)")
	fs.IntVar(&f.Flows, "flows", 1, "with -loopback -scheme: this many reliable `connections` at once over the one link (each runs -n transfers); per-flow goodput shows how they share it")
	fs.StringVar(&f.Link, "link", "", "with -loopback: the in-memory link both ways, as package link's `spec` (e.g. rate=1Gbit,delay=5ms,loss=1%,queue=8MB)")
	fs.BoolVar(&p.Verify, "verify", false, "check every delivered chunk's bytes and every message's immediate at the server (a memory compare per chunk)")
	fs.StringVar(&f.Dev, "dev", "udp", "emulated NIC port: `xsk` or udp")
	fs.StringVar(&f.Iface, "i", "", "network `interface` for -dev xsk")
	fs.StringVar(&f.Addr, "a", "", "local IP `address` for -dev udp (default: the interface's, or 127.0.0.1)")
	fs.IntVar(&f.Port, "p", sdr.DefaultBootstrapPort, "TCP `port` for the bootstrap")
	fs.BoolVar(&f.Loopback, "loopback", false, "run server and client in this process over an in-memory link")
	fs.BoolVar(&f.JSON, "json", false, "print the result as JSON")
	fs.StringVar(&f.Metrics, "metrics", "", "serve the emulated NICs' counters for Prometheus at `addr`/metrics during the run (e.g. :9100; port 0 picks one and prints it)")
	pcapPath := fs.String("pcap", "", "write every frame this side's NIC sends and receives to this pcap `file` (Wireshark opens it; with -loopback the client's, which sees both directions)")
	tracePath := fs.String("trace", "", "write every decision of this side's reliability engines to `file` (JSON Lines; with -loopback both sides'; sdr trace draws it); needs -scheme, but on a server, which takes the client's")
	cpuProfile := fs.String("cpuprofile", "", "write this side's CPU profile to `file` (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write this side's allocation profile to `file` when the run ends (go tool pprof -sample_index=alloc_space: where the memory of each connection comes from)")
	cc := fs.Bool("cc", true, "RoCE congestion control on this side's emulated NIC: ECN marks, CNPs, DCQCN (-cc=false for experiments)")
	fs.DurationVar(&f.BusyPoll, "busy-poll", xsk.DefaultBusyPoll, "how long -dev xsk polls an empty receive ring before it sleeps (0: never polls)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	f.NoCC = !*cc
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
			return exitFault
		}
		defer stop()
	}
	if *memProfile != "" {
		defer func() {
			if err := writeAllocProfile(*memProfile); err != nil {
				fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
			}
		}()
	}
	p.ReliableChunk = p.ChunkSize
	if p.ChunkSize == 0 {
		p.ChunkSize = 64 * p.MTU
	}
	if p.Scheme != "" {
		if _, err := p.ReliableConfig(); err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: -scheme/-code: %v\n", err)
			return exitUsage
		}
	}
	if f.Flows != 1 && (!f.Loopback || p.Scheme == "" || f.Flows < 1) {
		fmt.Fprintln(stderr, "sdr write-bw: -flows needs -loopback and -scheme, and at least 1")
		return exitUsage
	}
	if f.Link != "" && !f.Loopback {
		fmt.Fprintln(stderr, "sdr write-bw: -link needs -loopback (between hosts the path is the network's)")
		return exitUsage
	}
	if p.Size <= 0 || p.Iterations <= 0 || p.Warmup < 0 || p.Loss < 0 || p.Loss >= 1 || fs.NArg() > 1 {
		fs.Usage()
		return exitUsage
	}
	if f.Dev == "xsk" && !f.Loopback { // before listening or dialling, not after a peer came
		if err := caps.Check(caps.XSK, "-dev xsk"); err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
			return exitFault
		}
	}
	if *tracePath != "" {
		// A server takes its scheme from the client.
		if p.Scheme == "" && (f.Loopback || fs.NArg() == 1) || f.Flows != 1 {
			fmt.Fprintln(stderr, "sdr write-bw: -trace needs -scheme (a server takes the client's) and one flow")
			return exitUsage
		}
		file, err := os.Create(*tracePath)
		if err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: -trace: %v\n", err)
			return exitFault
		}
		tracer := reliability.NewJSONTracer(file)
		defer func() {
			if err := errors.Join(tracer.Close(), file.Close()); err != nil {
				fmt.Fprintf(stderr, "sdr write-bw: -trace: %v\n", err)
			}
		}()
		f.Trace = tracer
	}
	if *pcapPath != "" {
		tap, err := wire.CreatePcap(*pcapPath)
		if err != nil {
			fmt.Fprintf(stderr, "sdr write-bw: -pcap: %v\n", err)
			return exitFault
		}
		defer func() {
			if err := tap.Close(); err != nil {
				fmt.Fprintf(stderr, "sdr write-bw: -pcap: %v\n", err)
			}
		}()
		f.Tap = tap
	}
	var res *writebw.Result
	var err error
	switch {
	case f.Loopback:
		res, err = writebw.Loopback(&f)
	case fs.NArg() == 1:
		res, err = writebw.Client(&f, fs.Arg(0))
	default:
		res, err = writebw.Server(&f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sdr write-bw: %v\n", err)
		return exitFault
	}
	writebw.Print(stdout, &f, res)
	return exitOK
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}

// writeAllocProfile writes the allocations since the program started
// (pprof's "allocs" profile) to path.
func writeAllocProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	if err := errors.Join(pprof.Lookup("allocs").WriteTo(out, 0), out.Close()); err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	return nil
}

// shellCommand joins args into a line a shell runs as the same command,
// quoting those that need it.
func shellCommand(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[](){};&|<>#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

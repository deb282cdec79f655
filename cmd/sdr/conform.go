package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/testbed/conform"
	"github.com/sdr-rdma/sdr/wire"
)

const conformUsage = `usage: sdr conform -list [-run REGEXP]
       sdr conform -self [flags]
       sdr conform -i IFACE -dst-ip IP -qpn QPN,... [-uc-qpn QPN,...] -rkey K -va VA -len N -psn P [flags]
       sdr conform -i IFACE -target 'CONFORM ...' [flags]

Runs the RoCEv2 responder conformance battery (package testbed/conform):
crafted frames sent through an AF_XDP port on IFACE, each case's replies and
memory effects compared with the IBA specification (rxe where it leaves
room). One row per case: PASS, DIFF (an alternative the specification
allows), FAIL or SKIP; exit status 1 on any FAIL.

-self builds an emunic target itself: on AF_XDP in a pair of network
namespaces when run as root, otherwise in-process over a pipe (it says
which), and checks the target's memory, completions and drop counters too.

An external target provides (see the package documentation): a region with
remote write/read/atomic rights (-rkey, -va, -len, at least 12 KiB), optionally
a read-only one (-ro-*), connected QPs facing this host's address and MAC
with remote QPN equal to their own, path MTU -mtu, all expecting PSN -psn:
the first RC QP of -qpn is the fence (or -fence-qpn), every further RC QP
and each -uc-qpn serves one case (cases beyond them are skipped), four
receive WQEs of 8 bytes posted on each. QP numbers are hexadecimal.

flags:
`

func runConform(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sdr conform", conformUsage, stderr)
	self := fs.Bool("self", false, "run against an emunic target built here")
	list := fs.Bool("list", false, "list the cases (those -run selects) and exit")
	iface := fs.String("i", "", "network `interface` toward the target (AF_XDP, root)")
	spec := fs.String("target", "", "target description: a 'CONFORM ...' `line` as testbed/interop's conform_target prints")
	dstIP := fs.String("dst-ip", "", "target `address`")
	dstMAC := fs.String("dst-mac", "", "target Ethernet `address` (default: resolved through the kernel)")
	srcIP := fs.String("src-ip", "", "this host's `address` the target's QPs face (default: the interface's first IPv4)")
	qpns := fs.String("qpn", "", "target RC QP `numbers` (hex, comma-separated): the fence, then one per RC case")
	fence := fs.String("fence-qpn", "", "fence RC QP `number` (hex; default: the first of -qpn)")
	ucQPNs := fs.String("uc-qpn", "", "target UC QP `numbers` (hex, comma-separated), one per UC case")
	rkey := fs.String("rkey", "", "R_Key (hex) of the target region")
	va := fs.String("va", "", "virtual address (hex) of the target region")
	length := fs.Uint64("len", 0, "length of the target region in bytes")
	roKey := fs.String("ro-rkey", "", "R_Key (hex) of a remote-read-only region (optional)")
	roVA := fs.String("ro-va", "", "virtual address (hex) of the read-only region")
	roLen := fs.Uint64("ro-len", 0, "length of the read-only region")
	psn := fs.String("psn", "", "first PSN (hex) every target QP expects")
	mtu := fs.Int("mtu", 1024, "path MTU of the target's QPs")
	timeout := fs.Duration("timeout", time.Second, "wait for each expected reply")
	runRE := fs.String("run", "", "run only the cases whose ID matches this `regexp`")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	pcapPath := fs.String("pcap", "", "write every frame sent and received to this pcap `file`")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sdr conform: "+format+"\n", a...)
		return exitUsage
	}
	cfg := conform.Config{MTU: *mtu, Timeout: *timeout, Cases: conform.Battery()}
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			return usageErr("-run: %v", err)
		}
		cfg.Cases = filterCases(cfg.Cases, re)
	}
	if *list {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, c := range cfg.Cases {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, c.QP, c.Desc)
		}
		tw.Flush()
		return exitOK
	}
	if fs.NArg() > 0 || *self == (*iface != "") {
		fs.Usage()
		return exitUsage
	}
	if *pcapPath != "" {
		w, err := wire.CreatePcap(*pcapPath)
		if err != nil {
			return usageErr("-pcap: %v", err)
		}
		defer func() {
			if err := w.Close(); err != nil {
				fmt.Fprintf(stderr, "sdr conform: -pcap: %v\n", err)
			}
		}()
		cfg.Pcap = w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var rep *conform.Report
	var err error
	if *self {
		ns := conform.CanUseNamespaces()
		if ns {
			fmt.Fprintln(stderr, "sdr conform: the emunic target runs on AF_XDP in a network namespace, the battery in another")
		} else {
			fmt.Fprintln(stderr, "sdr conform: not root: the emunic target runs in-process over a pipe (no AF_XDP, no XDP filters)")
		}
		rep, err = conform.RunSelf(ctx, conform.SelfConfig{Namespaces: ns, Config: cfg})
	} else {
		t, terr := externalTarget(*spec, *dstIP, *dstMAC, *qpns, *fence, *ucQPNs, *rkey, *va, *length, *roKey, *roVA, *roLen, *psn)
		if terr != nil {
			return usageErr("%v", terr)
		}
		cfg.Target = t
		rep, err = runExternal(ctx, *iface, *srcIP, cfg)
	}
	if rep != nil {
		if *jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			printConform(stdout, rep)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "sdr conform: %v\n", err)
		return exitUsage
	}
	if rep.Failed() {
		return exitFault
	}
	return exitOK
}

func filterCases(cs []conform.Case, re *regexp.Regexp) []conform.Case {
	var out []conform.Case
	for _, c := range cs {
		if re.MatchString(c.ID) {
			out = append(out, c)
		}
	}
	return out
}

// externalTarget builds the target from a description line or from flags.
func externalTarget(spec, dstIP, dstMAC, qpns, fence, ucQPNs, rkey, va string, length uint64,
	roKey, roVA string, roLen uint64, psn string) (conform.Target, error) {
	if spec != "" {
		return conform.ParseTarget(spec)
	}
	var t conform.Target
	var err error
	hex := func(name, s string, bits int) uint64 {
		if err != nil || s == "" {
			return 0
		}
		var v uint64
		if v, err = strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, bits); err != nil {
			err = fmt.Errorf("-%s: %v", name, err)
		}
		return v
	}
	for name, v := range map[string]string{"dst-ip": dstIP, "qpn": qpns, "rkey": rkey, "va": va, "psn": psn} {
		if v == "" {
			return t, fmt.Errorf("-%s is required (or -target)", name)
		}
	}
	if t.IP, err = netip.ParseAddr(dstIP); err != nil {
		return t, fmt.Errorf("-dst-ip: %v", err)
	}
	if dstMAC != "" {
		if t.MAC, err = conform.ParseMAC(dstMAC); err != nil {
			return t, err
		}
	}
	rcs, err := conform.ParseQPNs(qpns)
	if err != nil {
		return t, err
	}
	if t.UC, err = conform.ParseQPNs(ucQPNs); err != nil {
		return t, err
	}
	t.Fence = uint32(hex("fence-qpn", fence, 24))
	if t.Fence == 0 {
		t.Fence, rcs = rcs[0], rcs[1:]
	}
	t.RC = rcs
	t.MR = conform.Region{RKey: uint32(hex("rkey", rkey, 32)), VA: hex("va", va, 64), Len: length}
	t.RO = conform.Region{RKey: uint32(hex("ro-rkey", roKey, 32)), VA: hex("ro-va", roVA, 64), Len: roLen}
	t.PSN = wire.PSN(hex("psn", psn, 24))
	return t, err
}

// runExternal opens an AF_XDP port on iface (steering every RoCEv2 frame
// to it) and runs the battery at cfg.Target.
func runExternal(ctx context.Context, iface, srcIP string, cfg conform.Config) (*conform.Report, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	copy(cfg.SrcMAC[:], ifc.HardwareAddr)
	if srcIP != "" {
		if cfg.SrcIP, err = netip.ParseAddr(srcIP); err != nil {
			return nil, fmt.Errorf("-src-ip: %w", err)
		}
	} else if cfg.SrcIP, err = hostnet.FirstIPv4(ifc); err != nil {
		return nil, fmt.Errorf("%w (give -src-ip)", err)
	}
	if cfg.Target.MAC == ([6]byte{}) {
		if cfg.Target.MAC, err = xsk.ResolveMAC(iface, cfg.Target.IP, 3*time.Second); err != nil {
			return nil, fmt.Errorf("resolve the target's MAC (or give -dst-mac): %w", err)
		}
	}
	port, err := xsk.NewPort(xsk.PortConfig{Interface: iface, AllRoCE: true})
	if err != nil {
		return nil, err
	}
	defer port.Close()
	return conform.Run(ctx, port, cfg)
}

// printConform writes the report as a table, notes under their rows.
func printConform(w io.Writer, rep *conform.Report) {
	fmt.Fprintf(w, "target: %s\n\n", rep.Target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tqp\tverdict\tdescription")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s %#x\t%s\t%s\n", r.ID, r.QP, r.QPN, r.Verdict, r.Desc)
		if r.Spec != "" {
			fmt.Fprintf(tw, "\t\t\t  per:      %s\n", r.Spec)
		}
		fmt.Fprintf(tw, "\t\t\t  expected: %s\n", r.Expected)
		fmt.Fprintf(tw, "\t\t\t  observed: %s\n", r.Observed)
		for _, n := range r.Notes {
			fmt.Fprintf(tw, "\t\t\t  note: %s\n", n)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d cases: %d PASS, %d DIFF, %d FAIL, %d SKIP\n", len(rep.Results), rep.Pass, rep.Diff, rep.Fail, rep.Skip)
}

package conform_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/testbed/conform"
	"github.com/sdr-rdma/sdr/wire"
)

var (
	batteryIP  = netip.MustParseAddr("10.77.0.1")
	batteryMAC = [6]byte{0x02, 0, 0, 0x77, 0, 1}
	targetIP   = netip.MustParseAddr("10.77.0.2")
	targetMAC  = [6]byte{0x02, 0, 0, 0x77, 0, 2}
)

// runPipe runs the battery at an emunic device over the in-process pipe.
func runPipe(t *testing.T, cases []conform.Case) *conform.Report {
	t.Helper()
	ours, theirs := emunic.NewPipe(emunic.PipeConfig{})
	dev, err := emunic.NewDevice(emunic.Config{Port: theirs, GID: targetIP, MAC: targetMAC})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	tgt, err := conform.NewEmunicTarget(dev, cases, batteryIP, batteryMAC, 1024, 0xFFFFF0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer ours.Close()
	rep, err := conform.Run(ctx, ours, conform.Config{Target: tgt.Target, SrcMAC: batteryMAC, SrcIP: batteryIP,
		Cases: cases, Inspector: tgt, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestPipe(t *testing.T) {
	rep := runPipe(t, conform.Battery())
	for _, r := range rep.Results {
		t.Logf("%-28s %-5s exp: %s\n    obs: %s %v", r.ID, r.Verdict, r.Expected, r.Observed, r.Notes)
	}
	t.Logf("pass %d diff %d fail %d skip %d", rep.Pass, rep.Diff, rep.Fail, rep.Skip)
	_ = wire.PSN(0)
}

package xsk_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
)

// TestPortCloseWhileSending closes a port while another goroutine keeps
// sending (so its flusher is busy), then closes it again: Close waits for
// the flusher, the second call returns the first call's result, and sends
// after Close fail with emunic.ErrClosed instead of panicking.
func TestPortCloseWhileSending(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	var p *xsk.Port
	if err := pair.A.NS.Do(func() (err error) {
		p, err = xsk.NewPort(xsk.PortConfig{Interface: pair.A.IfName})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 64)
	copy(frame, pair.B.MAC[:])
	var wg sync.WaitGroup
	sent := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			if _, err := p.Send([][]byte{frame}); err != nil {
				if !errors.Is(err, emunic.ErrClosed) {
					t.Errorf("send during Close: %v", err)
				}
				return
			}
			if i == 100 {
				close(sent)
			}
		}
	})
	<-sent // the flusher has been kicked
	first := p.Close()
	if second := p.Close(); !errors.Is(second, first) && second != first {
		t.Errorf("second Close: %v, first %v", second, first)
	}
	wg.Wait()
	if _, err := p.Send([][]byte{frame}); !errors.Is(err, emunic.ErrClosed) {
		t.Errorf("send after Close: %v", err)
	}
}

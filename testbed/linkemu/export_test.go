package linkemu

import (
	"errors"
	"sync"

	"github.com/sdr-rdma/sdr/hostnet"
)

// BareForward forwards every frame arriving on ifA out of ifB, in
// namespace ns, through the emulator's own AF_XDP sides but with no link
// model, no delay line and no second thread: the floor a forwarder of
// two copy-mode AF_XDP hops costs, for BenchmarkForward to compare the
// emulator with. stop closes both sides and waits for the forwarder.
func BareForward(ns *hostnet.Namespace, ifA, ifB string) (stop func() error, err error) {
	var in, out *side
	err = ns.Do(func() (err error) {
		if in, err = openSide(ifA); err != nil {
			return err
		}
		if out, err = openSide(ifB); err != nil {
			in.close()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var (
			store  = make([]byte, batch*in.socks[0].MaxFrameLen())
			bufs   [batch][]byte
			frames [batch][]byte
			sizes  [batch]int
		)
		for i := range bufs {
			bufs[i] = store[i*in.socks[0].MaxFrameLen() : (i+1)*in.socks[0].MaxFrameLen()]
		}
		for {
			n, err := in.socks[0].Receive(bufs[:], sizes[:])
			if err != nil {
				return
			}
			for i := range n {
				frames[i] = bufs[i][:sizes[i]]
			}
			if _, err := out.socks[0].Send(frames[:n]); err != nil {
				return
			}
		}
	}()
	return func() error {
		err := errors.Join(in.close(), out.close())
		wg.Wait()
		return err
	}, nil
}

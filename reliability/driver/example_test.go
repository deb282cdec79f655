package driver_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

// openPipeEnd opens an SDR context on one end of an in-memory link, an
// emulated NIC with address gid.
func openPipeEnd(port emunic.Port, gid string, mac byte) *sdr.Context {
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: netip.MustParseAddr(gid), MAC: [6]byte{2, 0, 0, 0, 0, mac}})
	if err != nil {
		log.Fatal(err)
	}
	sc, err := sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{})
	if err != nil {
		log.Fatal(err)
	}
	return sc
}

// pipeOver joins two emulated NIC ports by an in-memory link of spec
// (package link's text form) in both directions.
func pipeOver(spec string) (a, b *emunic.PipePort) {
	cfg, err := link.ParseConfig(spec)
	if err != nil {
		log.Fatal(err)
	}
	ab, _ := link.New(cfg)
	ba, _ := link.New(cfg)
	return emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
}

// Moving 4 MiB reliably in one process, over two emulated NICs joined by
// a long-haul link: 1 Gbit/s, 10 ms round trip, 1 % of frames lost each
// way, an 8 MB queue. Default attributes and configuration: the sender
// times the round trip, finds the link's rate and repairs what is lost.
func ExampleConnectLocal() {
	pa, pb := pipeOver("rate=1Gbit,delay=5ms,loss=1%,queue=8MB")
	sendCtx, recvCtx := openPipeEnd(pa, "10.0.0.1", 1), openPipeEnd(pb, "10.0.0.2", 2)
	defer sendCtx.Close()
	defer recvCtx.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, r, err := driver.ConnectLocal(ctx, sendCtx, recvCtx, sdr.QPAttr{},
		reliability.SenderConfig{}, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	defer r.Close()

	data := bytes.Repeat([]byte("long-haul "), 400<<10) // 4 000 KiB
	got := make([]byte, len(data))
	done := make(chan error, 1)
	go func() {
		imm, _, err := r.Read(ctx, got)
		if err == nil && imm != 42 {
			err = fmt.Errorf("immediate %d", imm)
		}
		done <- err
	}()
	if _, err := s.Write(ctx, data, 42); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	fmt.Println("intact:", bytes.Equal(got, data))
	// Output: intact: true
}

// Two hosts: the receiver listens for the bootstrap (TCP), the sender
// dials it; each calls its side's Connect over the connection, then Read
// and Write move data over the SDR QP. Here both run in one process, over
// a lossy in-memory link; between machines each opens its own emulated
// NIC (emunic/xsk or emunic/udp) or a BlueField-3.
func ExampleConnectSender() {
	pa, pb := pipeOver("delay=1ms,loss=2%")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	received := make(chan string, 1)
	go func() { // the receiving host
		sc := openPipeEnd(pb, "10.0.0.2", 2)
		defer sc.Close()
		conn, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		r, err := driver.ConnectReceiver(ctx, sdr.NewBootstrap(conn), sc, sdr.QPAttr{}, reliability.ReceiverConfig{})
		conn.Close()
		if err != nil {
			log.Fatal(err)
		}
		defer r.Close()
		buf := make([]byte, 11)
		if _, _, err := r.Read(ctx, buf); err != nil {
			log.Fatal(err)
		}
		received <- string(buf)
	}()

	sc := openPipeEnd(pa, "10.0.0.1", 1) // the sending host
	defer sc.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	s, err := driver.ConnectSender(ctx, sdr.NewBootstrap(conn), sc, sdr.QPAttr{}, reliability.SenderConfig{})
	conn.Close()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write(ctx, []byte("hello, SDR!"), 0); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-received)
	// Output: hello, SDR!
}

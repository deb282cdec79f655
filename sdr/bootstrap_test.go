package sdr

import (
	"errors"
	"net"
	"testing"
)

func TestBootstrapMessages(t *testing.T) {
	c1, c2 := net.Pipe()
	a, b := NewBootstrap(c1), NewBootstrap(c2)
	defer a.Close()
	defer b.Close()
	go func() {
		a.Send([]byte("info blob"))
		a.SendJSON(map[string]int{"credits": 7})
		c1.Write([]byte{0xFF, 0xFF, 0xFF, 0xFF}) // a hostile length
	}()
	msg, err := b.Recv()
	if err != nil || string(msg) != "info blob" {
		t.Fatalf("%q %v", msg, err)
	}
	var v map[string]int
	if err := b.RecvJSON(&v); err != nil || v["credits"] != 7 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := b.Recv(); !errors.Is(err, ErrTooLong) {
		t.Errorf("4 GiB message announced: %v", err)
	}
}

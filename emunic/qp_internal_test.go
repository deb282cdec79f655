package emunic

import "testing"

// newPipeDevice returns a device with cfg on one end of a pipe nobody
// reads; both close when t ends.
func newPipeDevice(t *testing.T, cfg Config) *Device {
	t.Helper()
	pa, pb := NewPipe(PipeConfig{})
	t.Cleanup(func() { pb.Close() })
	cfg.Port = pa
	d, err := NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// connectQP creates a QP of typ on pd, with a CQ of its own for both
// queues, and moves it through INIT and RTR (rtr) to RTS (rts).
func connectQP(t *testing.T, pd *PD, typ QPType, rtr, rts QPAttr) *QP {
	t.Helper()
	cq, err := NewCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPConfig{Type: typ, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		state QPState
		attr  QPAttr
	}{{StateInit, QPAttr{}}, {StateRTR, rtr}, {StateRTS, rts}} {
		if err := qp.Modify(step.state, step.attr); err != nil {
			t.Fatalf("%v QP to %v: %v", typ, step.state, err)
		}
	}
	return qp
}

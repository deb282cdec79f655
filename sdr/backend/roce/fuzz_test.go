package roce_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
)

// validInfo is a well-formed Info for seeds and tests.
func validInfo() roce.Info {
	var in roce.Info
	json.Unmarshal([]byte(`{"gid":"10.0.0.2","mac":[2,0,0,0,0,2],"qpns":[[2,3],[4,5]],"root_rkeys":[256,513],
		"root_entries":1024,"psn":1,"mtu":1024,"chunk_size":4096,"max_messages":16,"slot_size":1048576,
		"imm_layout":"10/18/4","transport":"uc"}`), &in)
	return in
}

// FuzzPeerInfo feeds Connect's decoder arbitrary peer info: it must never
// panic, must fail with ErrPeerInfo, and what it accepts must be a
// consistent description (a rectangle of QPs, one key per generation)
// that survives a round trip and matches its own geometry.
func FuzzPeerInfo(f *testing.F) {
	good := validInfo()
	blob, _ := good.Marshal()
	f.Add(blob)
	for _, s := range []string{`{"qpns":[]}`, `{"qpns":[[2,3],[4]]}`, `{}`, `null`, `[]`, `{"qpns":[[2]],"root_rkeys":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, blob []byte) {
		in, err := roce.ParseInfo(blob)
		if err != nil {
			if !errors.Is(err, backend.ErrPeerInfo) {
				t.Fatalf("refused with %v, not ErrPeerInfo", err)
			}
			return
		}
		gens, chans := len(in.QPNs), len(in.QPNs[0])
		for _, row := range in.QPNs {
			if len(row) != chans {
				t.Fatal("accepted uneven rows")
			}
		}
		if len(in.RootRKeys) != gens || in.RootBases != nil && len(in.RootBases) != gens {
			t.Fatal("accepted keys or bases that do not match the generations")
		}
		if err := in.Check(in.Geometry()); err != nil {
			t.Fatalf("info does not match its own geometry: %v", err)
		}
		again, err := in.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		in2, err := roce.ParseInfo(again)
		if err != nil {
			t.Fatalf("re-encoded info refused: %v", err)
		}
		if again2, _ := in2.Marshal(); !bytes.Equal(again, again2) {
			t.Fatal("info changes on a round trip")
		}
	})
}

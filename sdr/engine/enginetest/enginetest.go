// Package enginetest reads the per-packet engine's language-neutral test
// vectors, sdr/engine/testdata/vectors.json (the format is described in
// the file), for every implementation checked against them: sdr/engine's
// own test and the DPA's C engine (hwnic/dpa/devicetest). It is for
// tests: Load finds the file from the working directory, which go test
// sets to a package directory inside this module.
package enginetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// Path is the vector file's path from the module root.
const Path = "sdr/engine/testdata/vectors.json"

// minCases is how many cases the file has at least; fewer means a
// truncated or wrong file, not a shorter suite.
const minCases = 11

// Case posts one buffer into a slot and applies Events in order; Expect
// is the slot's final state.
type Case struct {
	Name      string
	Layout    wire.ImmLayout
	MTU       int
	ChunkSize int
	Slot      Slot
	Events    []Event
	Expect    Expect
}

// Slot is the buffer posted before the events.
type Slot struct {
	Length     int
	MsgID      uint32
	Generation uint32
	Active     bool
}

// Op is what an event does.
type Op int

const (
	// Packet is a WRITE-with-Imm completion: Generation (of the QP it
	// arrived on), Imm, Bytes, and the expected Result and CompletesImm.
	Packet Op = iota
	// Activate reuses the slot for message MsgID of Generation.
	Activate
	// Deactivate completes the slot's message.
	Deactivate
)

// Event is one step of a case.
type Event struct {
	Op           Op
	MsgID        uint32
	Channel      int
	Generation   uint32
	Imm          uint32
	Bytes        uint32
	Result       engine.Result
	CompletesImm bool
}

// Expect is a case's final state.
type Expect struct {
	ChunkFlags  []uint64 // 64 chunks per word
	Masks       []uint64 // per chunk, one bit per packet
	Imm         uint32
	ImmComplete bool
	Truncated   bool
}

// file is the JSON form.
type file struct {
	Cases []struct {
		Name      string `json:"name"`
		Layout    string `json:"layout"`
		MTU       int    `json:"mtu"`
		ChunkSize int    `json:"chunk_size"`
		Slot      struct {
			Length     int    `json:"length"`
			MsgID      uint32 `json:"msg_id"`
			Generation uint32 `json:"generation"`
			Active     bool   `json:"active"`
		} `json:"slot"`
		Events []struct {
			Op           string `json:"op"` // "" (a packet), "activate" or "deactivate"
			MsgID        uint32 `json:"msg_id"`
			Channel      int    `json:"channel"`
			Generation   uint32 `json:"generation"`
			Imm          string `json:"imm"`
			Bytes        uint32 `json:"bytes"`
			Result       string `json:"result"`
			CompletesImm bool   `json:"completes_imm"`
		} `json:"events"`
		Expect struct {
			ChunkFlags  []string `json:"chunk_flags"`
			Masks       []string `json:"masks"`
			Imm         string   `json:"imm"`
			ImmComplete bool     `json:"imm_complete"`
			Truncated   bool     `json:"truncated"`
		} `json:"expect"`
	} `json:"cases"`
}

// Load finds the module root above the working directory and parses
// its vector file.
func Load() ([]Case, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("enginetest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			return nil, errors.New("enginetest: no go.mod above the working directory: run from inside the module")
		}
		dir = up
	}
	data, err := os.ReadFile(filepath.Join(dir, Path))
	if err != nil {
		return nil, fmt.Errorf("enginetest: %w", err)
	}
	return Parse(data)
}

// Parse decodes a vector file, checking every number, layout and result
// name.
func Parse(data []byte) ([]Case, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("enginetest: %w", err)
	}
	if len(f.Cases) < minCases {
		return nil, fmt.Errorf("enginetest: %d cases, want at least %d", len(f.Cases), minCases)
	}
	var cases []Case
	for _, fc := range f.Cases {
		bad := func(err error) ([]Case, error) { return nil, fmt.Errorf("enginetest: case %q: %w", fc.Name, err) }
		layout, err := wire.ParseImmLayout(fc.Layout)
		if err != nil {
			return bad(err)
		}
		c := Case{Name: fc.Name, Layout: layout, MTU: fc.MTU, ChunkSize: fc.ChunkSize, Slot: Slot(fc.Slot)}
		for i, fe := range fc.Events {
			e := Event{MsgID: fe.MsgID, Channel: fe.Channel, Generation: fe.Generation, Bytes: fe.Bytes, CompletesImm: fe.CompletesImm}
			switch fe.Op {
			case "activate":
				e.Op = Activate
			case "deactivate":
				e.Op = Deactivate
			case "":
				imm, err := number(fe.Imm, 32)
				if err != nil {
					return bad(fmt.Errorf("event %d: %w", i, err))
				}
				if e.Result, err = engine.ParseResult(fe.Result); err != nil {
					return bad(fmt.Errorf("event %d: %w", i, err))
				}
				e.Imm = uint32(imm)
			default:
				return bad(fmt.Errorf("event %d: unknown op %q", i, fe.Op))
			}
			c.Events = append(c.Events, e)
		}
		x := fc.Expect
		c.Expect = Expect{ImmComplete: x.ImmComplete, Truncated: x.Truncated}
		imm, err := number(x.Imm, 32)
		if err != nil {
			return bad(err)
		}
		c.Expect.Imm = uint32(imm)
		for _, l := range []struct {
			in  []string
			out *[]uint64
		}{{x.ChunkFlags, &c.Expect.ChunkFlags}, {x.Masks, &c.Expect.Masks}} {
			for _, s := range l.in {
				v, err := number(s, 64)
				if err != nil {
					return bad(err)
				}
				*l.out = append(*l.out, v)
			}
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// number parses a hexadecimal ("0x…") or decimal number of at most bits.
func number(s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, fmt.Errorf("bad number %q: %w", s, err)
	}
	return v, nil
}

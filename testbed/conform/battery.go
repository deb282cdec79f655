package conform

import (
	"encoding/binary"

	"github.com/sdr-rdma/sdr/wire"
)

// emunic drop counters the cases name (emunic.Counter's metric names); an
// Inspector maps them to the target's counters.
const (
	cBadICRC     = "rx_bad_icrc"
	cMalformed   = "rx_malformed"
	cNotRoCE     = "rx_not_roce"
	cWrongGID    = "rx_wrong_gid"
	cWrongMAC    = "rx_wrong_mac"
	cIPChecksum  = "rx_bad_ip_checksum"
	cBadPKey     = "rx_bad_pkey"
	cWrongPeer   = "rx_wrong_peer"
	cUnknownQP   = "rx_unknown_qp"
	cTransport   = "rx_wrong_transport"
	cBadKey      = "rx_bad_key"
	cBounds      = "rx_out_of_bounds"
	cAccess      = "rx_access_denied"
	cPSN         = "rx_psn_error"
	cDuplicate   = "rx_duplicate"
	cInvalid     = "rx_invalid_request"
	cAbandoned   = "rx_abandoned"
	specRefusal  = "IBA ch. 9 (class C: NAK, responder QP to error); rxe do_class_ac_error"
	specHdrCheck = "IBA ch. 9 header validation: silently drop; rxe hdr_check"
)

// Battery returns the conformance cases, in the order they run.
func Battery() []Case {
	var cs []Case
	cs = append(cs, validCases()...)
	cs = append(cs, headerCases()...)
	cs = append(cs, psnCases()...)
	cs = append(cs, boundsCases()...)
	cs = append(cs, sequenceCases()...)
	cs = append(cs, readAtomicCases()...)
	cs = append(cs, framingCases()...)
	return cs
}

// writeOnly is the workhorse request: a 64-byte WRITE ONLY at +0 of the
// window at the case's first PSN, with optional field edits and mutations.
func writeOnly(e *Env, edit func(*wire.Fields), muts ...Mutation) []byte {
	op := wire.RCWriteOnly
	if e.kind == UC {
		op = wire.UCWriteOnly
	}
	data := e.Data(64)
	f := e.Write(op, e.P(0), 0, len(data), data)
	if edit != nil {
		edit(&f)
	}
	e.Send(f, muts...)
	return data
}

// executed states the outcome of writeOnly done right.
func executed(e *Env, data []byte) {
	e.Wrote(0, data)
	messageEnded(e, 0)
}

// messageEnded states what the QP's first message, ending at packet last,
// leaves behind: an RC QP acknowledges it (MSN 1) and expects the next
// PSN; a UC QP only expects the next PSN.
func messageEnded(e *Env, last int) {
	if e.kind == RC {
		e.Expect(Ack(e.P(last), 1))
		e.Leaves(e.P(last+1), 1)
	} else {
		e.Leaves(e.P(last+1), 0)
	}
}

// refused states a class C refusal of an RC request at psn (NAK, QP to
// error) or, on UC, a silent drop; nothing is written either way.
func refused(e *Env, code wire.NAKCode, psn wire.PSN, msn uint32, counter string) {
	if e.kind == RC {
		e.Expect(Nak(code, psn, msn))
		e.Breaks()
	}
	e.Drops(counter)
}

// burst queues 32 frames with a bad ICRC ahead of the frames that follow,
// so that a target that takes frames in batches (emunic) is likely to
// take those in the same batch: the response-order cases are about what
// a target does within one.
func burst(e *Env) {
	for range 32 {
		e.Send(e.Write(wire.RCWriteOnly, e.P(0), 512, 8, e.Data(8)), BadICRC)
	}
}

// both returns the case for RC and for UC.
func both(id, desc, spec string, build func(e *Env)) []Case {
	return []Case{{ID: "rc-" + id, Desc: desc, QP: RC, Spec: spec, Build: build},
		{ID: "uc-" + id, Desc: desc, QP: UC, Spec: spec, Build: build}}
}

func validCases() []Case {
	cs := both("write-only", "WRITE ONLY 64 B in bounds", "IBA ch. 9 RDMA WRITE",
		func(e *Env) { executed(e, writeOnly(e, nil)) })
	cs = append(cs, both("write-multi", "WRITE FIRST/MIDDLE/LAST, 3 x MTU", "IBA ch. 9 RDMA WRITE", func(e *Env) {
		first, middle, last := wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast
		if e.kind == UC {
			first, middle, last = wire.UCWriteFirst, wire.UCWriteMiddle, wire.UCWriteLast
		}
		data := e.Data(3 * e.MTU)
		e.Send(e.Write(first, e.P(0), 0, len(data), data[:e.MTU]))
		e.Send(e.Write(middle, e.P(1), 0, 0, data[e.MTU:2*e.MTU]))
		e.Send(e.Write(last, e.P(2), 0, 0, data[2*e.MTU:]))
		e.Wrote(0, data)
		messageEnded(e, 2)
	})...)
	cs = append(cs, both("write-imm", "WRITE ONLY with immediate 32 B (consumes a receive WQE)", "IBA ch. 9 RDMA WRITE with immediate", func(e *Env) {
		op := wire.RCWriteOnlyImm
		if e.kind == UC {
			op = wire.UCWriteOnlyImm
		}
		data := e.Data(32)
		f := e.Write(op, e.P(0), 0, len(data), data)
		f.Imm = 0xC0FFEE00 | e.QPN&0xFF
		e.Send(f)
		executed(e, data)
		e.Completes(Completion{WriteImm: true, ByteLen: 32, Imm: f.Imm})
	})...)
	cs = append(cs, both("write-imm-no-wqe", "five WRITE ONLY with immediate 16 B: the fifth finds no receive WQE (four are posted)",
		"IBA ch. 9 (receiver not ready: RC RNR NAK, QP stays; UC drop); rxe check_resource", func(e *Env) {
			op := wire.RCWriteOnlyImm
			if e.kind == UC {
				op = wire.UCWriteOnlyImm
			}
			for i := range RecvWQEs + 1 {
				data := e.Data(16)
				f := e.Write(op, e.P(i), 16*i, len(data), data)
				f.Imm = 0xD0000000 | uint32(i)
				e.Send(f)
				if i < RecvWQEs {
					e.Wrote(16*i, data)
					e.Completes(Completion{WriteImm: true, ByteLen: 16, Imm: f.Imm})
					if e.kind == RC {
						e.Expect(Ack(e.P(i), uint32(i+1)))
					}
				}
				if i == RecvWQEs-1 {
					e.Step() // the fifth only once the four are acknowledged
				}
			}
			if e.kind == RC {
				e.Expect(RNRNak(e.P(RecvWQEs), RecvWQEs))
				e.Leaves(e.P(RecvWQEs), RecvWQEs)
			} else {
				e.Leaves(e.P(RecvWQEs+1), 0)
			}
			e.Drops("rx_no_recv_wqe")
		})...)
	cs = append(cs, Case{ID: "rc-response-order", Desc: "four WRITE ONLY with immediate use up the receive WQEs; then at once a WRITE ONLY and a fifth WRITE with immediate: its ACK, then the RNR NAK",
		QP: RC, Spec: "IBA ch. 9 (responses in PSN order; a later NAK may cover an ACK, an ACK may not follow it)", Build: func(e *Env) {
			for i := range RecvWQEs {
				f := e.Write(wire.RCWriteOnlyImm, e.P(i), 16*i, 16, e.Data(16))
				f.Imm = uint32(i)
				e.Send(f)
				e.Wrote(16*i, f.Payload)
				e.Completes(Completion{WriteImm: true, ByteLen: 16, Imm: f.Imm})
				e.Expect(Ack(e.P(i), uint32(i+1)))
			}
			e.Step()
			burst(e)
			data := e.Data(64)
			e.Send(e.Write(wire.RCWriteOnly, e.P(RecvWQEs), 128, 64, data))
			f := e.Write(wire.RCWriteOnlyImm, e.P(RecvWQEs+1), 256, 16, e.Data(16))
			e.Send(f)
			e.Wrote(128, data)
			e.Expect(Ack(e.P(RecvWQEs), RecvWQEs+1), RNRNak(e.P(RecvWQEs+1), RecvWQEs+1))
			e.Leaves(e.P(RecvWQEs+1), RecvWQEs+1)
			e.Drops(cBadICRC)
		}})
	cs = append(cs, Case{ID: "rc-response-order-read", Desc: "WRITE ONLY and at once a READ: the WRITE's ACK, then the READ response",
		QP: RC, Spec: "IBA ch. 9 (responses in PSN order)", Build: func(e *Env) {
			burst(e)
			data := e.Data(64)
			e.Send(e.Write(wire.RCWriteOnly, e.P(0), 0, 64, data))
			e.Send(e.Read(e.P(1), 256, 32))
			e.Drops(cBadICRC)
			e.Expect(Ack(e.P(0), 1))
			e.Expect(e.ReadResponses(e.P(1), 256, 32, 2)...)
			e.Wrote(0, data)
			e.Leaves(e.P(2), 2)
		}})
	cs = append(cs, both("send-empty", "SEND ONLY with immediate, no payload", "IBA ch. 9 SEND", func(e *Env) {
		op := wire.RCSendOnlyImm
		if e.kind == UC {
			op = wire.UCSendOnlyImm
		}
		f := e.Base(op, e.P(0))
		f.Imm = 0x5E0D0000 | e.QPN&0xFFFF
		e.Send(f)
		e.Completes(Completion{ByteLen: 0, Imm: f.Imm, HasImm: true})
		messageEnded(e, 0)
	})...)
	cs = append(cs, Case{ID: "rc-send-fits", Desc: "SEND ONLY of as many bytes as the posted receive holds", QP: RC,
		Spec: "IBA ch. 9 SEND", Build: func(e *Env) {
			f := e.Base(wire.RCSendOnly, e.P(0))
			f.Payload = e.Data(RecvBufLen)
			e.Send(f)
			e.Completes(Completion{ByteLen: RecvBufLen})
			e.Expect(Ack(e.P(0), 1))
			e.Leaves(e.P(1), 1)
		}})
	cs = append(cs, Case{ID: "rc-send-too-long", Desc: "SEND ONLY of 16 B into an 8-byte posted receive", QP: RC,
		Spec: "IBA ch. 9 (message longer than the receive buffer): Invalid Request; rxe send_data_in ERR_LENGTH", Build: func(e *Env) {
			f := e.Base(wire.RCSendOnly, e.P(0))
			f.Payload = e.Data(2 * RecvBufLen)
			e.Send(f)
			refused(e, wire.NAKInvalidRequest, e.P(0), 0, "rx_length_error")
			e.Completes(Completion{Status: "local length error"})
		}})
	cs = append(cs, Case{ID: "rc-write-zero-length", Desc: "zero-length WRITE ONLY naming a bad R_Key and a VA past the region",
		QP: RC, Spec: "IBA ch. 9 (no memory access, no key check); rxe check_rkey", Build: func(e *Env) {
			f := e.Write(wire.RCWriteOnly, e.P(0), 0, 0, nil)
			f.RETH.RKey ^= 0xFFFFFF00
			f.RETH.VA = e.T.MR.VA + e.T.MR.Len + 1<<20
			e.Send(f)
			e.Expect(Ack(e.P(0), 1))
			e.Leaves(e.P(1), 1)
		}})
	cs = append(cs, both("ttl-1", "WRITE ONLY with IPv4 TTL 1 (an end host accepts it)", "RFC 1122 3.2.1.7; annex A17 TTL is not covered", func(e *Env) {
		executed(e, writeOnly(e, func(f *wire.Fields) { f.TTL = 1 }))
	})...)
	cs = append(cs, both("udp-src-port", "WRITE ONLY from UDP source port 1234", "annex A17 (source port is flow entropy)", func(e *Env) {
		executed(e, writeOnly(e, func(f *wire.Fields) { f.SrcPort = 1234 }))
	})...)
	cs = append(cs, both("pkey-7fff", "P_Key 0x7FFF: limited member of the QP's default partition (0xFFFF)",
		"IBA ch. 10 partitions (a limited member matches a full one); rxe pkey_match", func(e *Env) {
			executed(e, writeOnly(e, func(f *wire.Fields) { f.BTH.PKey = 0x7FFF }))
		})...)
	return cs
}

func headerCases() []Case {
	var cs []Case
	cs = append(cs, both("bad-icrc", "WRITE ONLY with a wrong ICRC", "IBA ch. 9 / annex A17: drop",
		func(e *Env) { writeOnly(e, nil, BadICRC); e.Drops(cBadICRC) })...)
	for _, pk := range []struct {
		id   string
		key  uint16
		desc string
	}{{"pkey-0000", 0x0000, "P_Key 0x0000 (invalid)"}, {"pkey-8000", 0x8000, "P_Key 0x8000 (invalid: base 0)"},
		{"pkey-other", 0xBEEF, "P_Key 0xBEEF (another partition)"}} {
		cs = append(cs, both(pk.id, pk.desc, "IBA ch. 9 / ch. 10 (partitions) P_Key check: drop, count; rxe check_keys", func(e *Env) {
			writeOnly(e, func(f *wire.Fields) { f.BTH.PKey = pk.key })
			e.Drops(cBadPKey)
		})...)
	}
	cs = append(cs, both("tver-1", "BTH TVer 1", specHdrCheck+" (TVer)", func(e *Env) {
		writeOnly(e, func(f *wire.Fields) { f.BTH.TVer = 1 })
		e.Drops(cMalformed)
	})...)
	cs = append(cs, Case{ID: "rc-reserved-opcode", Desc: "reserved RC opcode 0x15 (a WRITE ONLY's headers)", QP: RC,
		Spec: specHdrCheck + " (opcode)", Build: func(e *Env) {
			writeOnly(e, nil, RawOpcode(0x15))
			e.Drops(cMalformed)
			e.Alt("IBA ch. 9: unsupported opcode as Invalid Request (NAK, QP to error)", func() {
				e.Expect(Nak(wire.NAKInvalidRequest, e.P(0), 0))
				e.Breaks()
			})
		}})
	cs = append(cs, Case{ID: "uc-reserved-opcode", Desc: "reserved UC opcode 0x2C (a WRITE ONLY's headers)", QP: UC,
		Spec: specHdrCheck + " (opcode)", Build: func(e *Env) { writeOnly(e, nil, RawOpcode(0x2C)); e.Drops(cMalformed) }})
	cs = append(cs, Case{ID: "rc-uc-opcode", Desc: "UC WRITE ONLY to an RC QP", QP: RC, Spec: specHdrCheck + " (transport); rxe check_type_state",
		Build: func(e *Env) {
			writeOnly(e, func(f *wire.Fields) { f.BTH.Opcode = wire.UCWriteOnly })
			e.Drops(cTransport)
		}})
	cs = append(cs, Case{ID: "uc-rc-opcode", Desc: "RC WRITE ONLY to a UC QP", QP: UC, Spec: specHdrCheck + " (transport); rxe check_type_state",
		Build: func(e *Env) {
			writeOnly(e, func(f *wire.Fields) { f.BTH.Opcode = wire.RCWriteOnly })
			e.Drops(cTransport)
		}})
	cs = append(cs, Case{ID: "rc-ud-opcode", Desc: "UD SEND ONLY to an RC QP", QP: RC, Spec: specHdrCheck + " (transport); rxe check_type_state",
		Build: func(e *Env) {
			f := e.Base(wire.UDSendOnly, e.P(0))
			f.DETH = wire.DETHFields{QKey: 0x11111111, SrcQP: e.QPN}
			f.Payload = e.Data(16)
			e.Send(f)
			e.Drops(cTransport)
		}})
	cs = append(cs, Case{ID: "rc-cnp", Desc: "RoCEv2 CNP to an RC QP (a notification, not a request)", QP: RC,
		Spec: "annex A17 (CNP: congestion notification only; rxe drops it as another transport)", Build: func(e *Env) {
			e.Send(e.Base(wire.CNP, e.P(0)))
			e.Drops("rx_cnps")
		}})
	cs = append(cs, both("fecn-becn", "WRITE ONLY with BTH FECN and BECN set", "IBA ch. 9 / annex A17 (byte 4 is not covered by the ICRC; no effect on execution)",
		func(e *Env) { executed(e, writeOnly(e, func(f *wire.Fields) { f.BTH.FECN, f.BTH.BECN = true, true })) })...)
	cs = append(cs, Case{ID: "uc-read-request", Desc: "RC READ request to a UC QP", QP: UC, Spec: specHdrCheck + " (transport)",
		Build: func(e *Env) { e.Send(e.Read(e.P(0), 0, 64)); e.Drops(cTransport) }})
	for _, q := range []struct {
		id, desc string
		qpn      uint32
	}{{"qpn-unknown", "destination QP 0xFEDCBA (no such QP)", 0xFEDCBA}, {"qpn-0", "destination QP 0 (SMI: none on RoCE)", 0},
		{"qpn-1", "destination QP 1 (GSI: UD only)", 1}} {
		cs = append(cs, Case{ID: "rc-" + q.id, Desc: "RC WRITE ONLY to " + q.desc, QP: RC, Spec: specHdrCheck + " (QP)",
			Build: func(e *Env) {
				writeOnly(e, func(f *wire.Fields) { f.BTH.DestQP = q.qpn; f.SrcPort = wire.SourcePort(q.qpn, q.qpn) })
				e.Drops(cUnknownQP)
			}})
	}
	cs = append(cs, both("src-ip", "WRITE ONLY from another source IP than the connected peer's",
		"IBA ch. 9 / annex A17: a connected QP accepts only its peer; rxe check_addr", func(e *Env) {
			writeOnly(e, func(f *wire.Fields) { f.SrcIP = e.Spoof })
			e.Drops(cWrongPeer)
		})...)
	cs = append(cs, both("pad-count", "WRITE ONLY of 8 B with pad count 3 (payload reads as 5 B, DMA length 8)",
		"IBA ch. 9 length check: Invalid Request; rxe check_rkey ERR_LENGTH", func(e *Env) {
			data := e.Data(8)
			op := wire.RCWriteOnly
			if e.kind == UC {
				op = wire.UCWriteOnly
			}
			e.Send(e.Write(op, e.P(0), 0, 8, data), PadCount(3))
			refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
			if e.kind == UC {
				e.Leaves(e.P(1), 0)
			}
		})...)
	return cs
}

func psnCases() []Case {
	cs := []Case{{ID: "rc-psn-duplicate-write", Desc: "WRITE ONLY, then the same PSN again with other data", QP: RC,
		Spec: "IBA ch. 9 (duplicate: ACK again, do not execute); rxe duplicate_request", Build: func(e *Env) {
			data := writeOnly(e, nil)
			e.Expect(Ack(e.P(0), 1))
			e.Step()
			writeOnly(e, nil)
			e.Expect(Ack(e.P(0), 1))
			e.Wrote(0, data)
			e.Leaves(e.P(1), 1)
			e.Drops(cDuplicate)
		}},
		{ID: "rc-psn-ahead", Desc: "WRITE ONLY at ePSN+5, then at ePSN+6", QP: RC,
			Spec: "IBA ch. 9 (one PSN sequence error NAK per gap); rxe check_psn", Build: func(e *Env) {
				f := e.Write(wire.RCWriteOnly, e.P(5), 0, 64, e.Data(64))
				e.Send(f)
				e.Expect(Nak(wire.NAKPSNSequenceError, e.P(0), 0))
				e.Step()
				f = e.Write(wire.RCWriteOnly, e.P(6), 64, 64, e.Data(64))
				e.Send(f)
				e.Drops(cPSN)
			}},
		{ID: "rc-psn-far-ahead", Desc: "WRITE ONLY at ePSN+2^23-1 (the far edge of the window ahead)", QP: RC,
			Spec: "IBA ch. 9 (PSN sequence error: out of the duplicate half)", Build: func(e *Env) {
				e.Send(e.Write(wire.RCWriteOnly, e.P(1<<23-1), 0, 64, e.Data(64)))
				e.Expect(Nak(wire.NAKPSNSequenceError, e.P(0), 0))
				e.Drops(cPSN)
			}},
		{ID: "rc-psn-old-duplicate", Desc: "WRITE ONLY at ePSN-2^23 (the oldest duplicate PSN)", QP: RC,
			Spec: "IBA ch. 9 (duplicate region is the 2^23 PSNs before ePSN)", Build: func(e *Env) {
				e.Send(e.Write(wire.RCWriteOnly, e.P(-1<<23), 0, 64, e.Data(64)))
				e.Expect(Ack(e.P(-1), 0))
				e.Drops(cDuplicate)
			}},
		{ID: "rc-psn-wrap", Desc: "zero-length WRITEs up to PSN 0xFFFFFD, then WRITE FIRST/MIDDLE/MIDDLE/LAST across 0xFFFFFF -> 0",
			QP: RC, Spec: "IBA ch. 9 (24-bit PSN modulo arithmetic)", Build: func(e *Env) {
				k := e.PSN.Distance(0xFFFFFE)
				if k < 0 || k > 64 {
					e.Skip("the target's PSN is not within 64 of the wrap")
					return
				}
				for i := range k {
					f := e.Write(wire.RCWriteOnly, e.P(i), 0, 0, nil)
					f.BTH.AckReq = i == k-1
					e.Send(f)
				}
				if k > 0 {
					e.Expect(Ack(e.P(k-1), uint32(k)))
					e.Step()
				}
				data := e.Data(4 * e.MTU)
				ops := []wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteMiddle, wire.RCWriteLast}
				for i, op := range ops {
					e.Send(e.Write(op, e.P(k+i), 0, len(data), data[i*e.MTU:(i+1)*e.MTU]))
				}
				e.Expect(Ack(e.P(k+3), uint32(k+1)))
				e.Wrote(0, data)
				e.Leaves(e.P(k+4), uint32(k+1))
			}},
		{ID: "uc-psn-gap", Desc: "UC WRITE FIRST at ePSN, LAST at ePSN+2 (MIDDLE lost)", QP: UC,
			Spec: "IBA ch. 9 (UC: drop the rest of a message after a gap); rxe check_psn", Build: func(e *Env) {
				data := e.Data(3 * e.MTU)
				e.Send(e.Write(wire.UCWriteFirst, e.P(0), 0, len(data), data[:e.MTU]))
				e.Send(e.Write(wire.UCWriteLast, e.P(2), 0, 0, data[2*e.MTU:]))
				e.Wrote(0, data[:e.MTU])
				e.Leaves(e.P(3), 0)
				e.Drops(cPSN)
			}},
		{ID: "uc-psn-resync", Desc: "UC WRITE ONLY at ePSN+1000 (a new message resynchronizes)", QP: UC,
			Spec: "IBA ch. 9 (UC accepts FIRST/ONLY at any PSN); rxe check_psn", Build: func(e *Env) {
				data := e.Data(64)
				e.Send(e.Write(wire.UCWriteOnly, e.P(1000), 0, 64, data))
				e.Wrote(0, data)
				e.Leaves(e.P(1001), 0)
				e.Drops(cPSN) // counted as a gap, executed all the same
			}},
	}
	return cs
}

func boundsCases() []Case {
	cs := both("write-first-past-end", "WRITE FIRST whose DMA length (2 x MTU) runs past the region's end, then its LAST",
		"IBA ch. 9: bounds of [VA, VA+DMA length) checked at FIRST; rxe check_rkey", func(e *Env) {
			first, last := wire.RCWriteFirst, wire.RCWriteLast
			if e.kind == UC {
				first, last = wire.UCWriteFirst, wire.UCWriteLast
			}
			off := WindowSize - e.MTU
			data := e.Data(2 * e.MTU)
			e.Send(e.Write(first, e.P(0), off, len(data), data[:e.MTU]))
			e.Send(e.Write(last, e.P(1), off, 0, data[e.MTU:]))
			refused(e, wire.NAKRemoteAccessError, e.P(0), 0, cBounds)
			if e.kind == UC {
				e.Leaves(e.P(2), 0)
			}
		})
	for i := range cs {
		cs[i].Window = EndWindow
	}
	refusal := func(id, desc string, w Window, code wire.NAKCode, counter string, edit func(e *Env, f *wire.Fields)) []Case {
		c := both(id, desc, specRefusal, func(e *Env) {
			writeOnly(e, func(f *wire.Fields) { edit(e, f) })
			refused(e, code, e.P(0), 0, counter)
			if e.kind == UC {
				e.Leaves(e.P(1), 0)
			}
		})
		c[0].Window, c[1].Window = w, w
		return c
	}
	cs = append(cs, refusal("write-past-end", "WRITE ONLY 64 B at 32 B before the region's end", EndWindow, wire.NAKRemoteAccessError, cBounds,
		func(e *Env, f *wire.Fields) { f.RETH.VA = e.T.MR.VA + e.T.MR.Len - 32 })...)
	cs = append(cs, refusal("write-before-start", "WRITE ONLY 64 B at 8 B before the region", StartWindow, wire.NAKRemoteAccessError, cBounds,
		func(e *Env, f *wire.Fields) { f.RETH.VA = e.T.MR.VA - 8 })...)
	cs = append(cs, refusal("write-va-wrap", "WRITE ONLY 64 B at VA 2^64-32 (the range wraps around 0)", OwnWindow, wire.NAKRemoteAccessError, cBounds,
		func(e *Env, f *wire.Fields) { f.RETH.VA = ^uint64(31) })...)
	cs = append(cs, refusal("bad-rkey", "WRITE ONLY with an R_Key of no region (other index)", OwnWindow, wire.NAKRemoteAccessError, cBadKey,
		func(e *Env, f *wire.Fields) { f.RETH.RKey ^= 0x00ABCD00 })...)
	cs = append(cs, refusal("rkey-tag", "WRITE ONLY with the region's R_Key index but a wrong tag (low byte)", OwnWindow, wire.NAKRemoteAccessError, cBadKey,
		func(e *Env, f *wire.Fields) { f.RETH.RKey ^= 0x5A })...)
	ro := refusal("write-read-only-mr", "WRITE ONLY into a region registered for remote read only", OwnWindow, wire.NAKRemoteAccessError, cAccess,
		func(e *Env, f *wire.Fields) { f.RETH.VA, f.RETH.RKey = e.T.RO.VA, e.T.RO.RKey })
	for i := range ro {
		build := ro[i].Build
		ro[i].Build = func(e *Env) {
			if e.T.RO.Len < 64 {
				e.Skip("the target names no read-only region")
				return
			}
			build(e)
		}
	}
	cs = append(cs, ro...)
	// The range of a DMA length over 2^31 also leaves the region: which
	// refusal comes first is the responder's check order.
	overLimit := func(e *Env) {
		refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
		e.Alt("the range also leaves the region: Remote Access Error from a responder that checks bounds first (rxe 6.1)", func() {
			e.Expect(Nak(wire.NAKRemoteAccessError, e.P(0), 0))
			e.Breaks()
			e.Drops(cBounds)
		})
	}
	huge := Case{ID: "rc-read-dma-over-2g", Desc: "READ with DMA length 2^31+1 (in the region's first byte)", QP: RC,
		Spec: "IBA ch. 9 (DMA length at most 2^31): Invalid Request; rxe check_length (newer than 6.1)", Build: func(e *Env) {
			f := e.Read(e.P(0), 0, 0)
			f.RETH.DMALength = 1<<31 + 1
			e.Send(f)
			overLimit(e)
		}}
	cs = append(cs, huge, Case{ID: "rc-write-dma-over-2g", Desc: "WRITE FIRST with DMA length 2^31+1", QP: RC,
		Spec: huge.Spec, Build: func(e *Env) {
			e.Send(e.Write(wire.RCWriteFirst, e.P(0), 0, 1<<31+1, e.Data(e.MTU)))
			overLimit(e)
		}})
	cs = append(cs, refusal("write-longer-than-dma", "WRITE ONLY of 64 B with DMA length 32", OwnWindow, wire.NAKInvalidRequest, cInvalid,
		func(e *Env, f *wire.Fields) { f.RETH.DMALength = 32 })...)
	cs = append(cs, refusal("write-over-mtu", "WRITE ONLY of MTU+64 B", OwnWindow, wire.NAKInvalidRequest, cInvalid,
		func(e *Env, f *wire.Fields) { f.Payload = e.Data(e.MTU + 64); f.RETH.DMALength = uint32(e.MTU + 64) })...)
	return cs
}

func sequenceCases() []Case {
	return []Case{
		{ID: "rc-write-middle-first", Desc: "WRITE MIDDLE without a FIRST", QP: RC, Spec: specRefusal + "; rxe check_op_seq",
			Build: func(e *Env) {
				e.Send(e.Write(wire.RCWriteMiddle, e.P(0), 0, 0, e.Data(e.MTU)))
				refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
			}},
		{ID: "uc-write-middle-first", Desc: "UC WRITE MIDDLE and LAST without a FIRST", QP: UC, Spec: "IBA ch. 9 (class D: drop); rxe check_op_seq",
			Build: func(e *Env) {
				e.Send(e.Write(wire.UCWriteMiddle, e.P(0), 0, 0, e.Data(e.MTU)))
				e.Send(e.Write(wire.UCWriteLast, e.P(1), 0, 0, e.Data(e.MTU)))
				e.Leaves(e.P(2), 0)
				e.Drops(cAbandoned)
			}},
		{ID: "rc-write-first-then-only", Desc: "WRITE FIRST (2 x MTU), then a WRITE ONLY instead of its LAST", QP: RC,
			Spec: specRefusal + "; rxe check_op_seq", Build: func(e *Env) {
				data := e.Data(2 * e.MTU)
				e.Send(e.Write(wire.RCWriteFirst, e.P(0), 0, len(data), data[:e.MTU]))
				e.Send(e.Write(wire.RCWriteOnly, e.P(1), 2*e.MTU, 64, e.Data(64)))
				e.Wrote(0, data[:e.MTU])
				refused(e, wire.NAKInvalidRequest, e.P(1), 0, cInvalid)
			}},
		{ID: "rc-write-last-short", Desc: "WRITE FIRST with DMA length 3 x MTU, then its LAST after 2 x MTU", QP: RC,
			Spec: "IBA ch. 9 (the message must carry its DMA length): Invalid Request", Build: func(e *Env) {
				data := e.Data(2 * e.MTU)
				e.Send(e.Write(wire.RCWriteFirst, e.P(0), 0, 3*e.MTU, data[:e.MTU]))
				e.Send(e.Write(wire.RCWriteLast, e.P(1), 0, 0, data[e.MTU:]))
				e.Wrote(0, data[:e.MTU])
				refused(e, wire.NAKInvalidRequest, e.P(1), 0, cInvalid)
			}},
		{ID: "rc-write-first-short", Desc: "WRITE FIRST carrying less than an MTU", QP: RC,
			Spec: "IBA ch. 9 (FIRST and MIDDLE carry exactly the MTU); rxe check_length", Build: func(e *Env) {
				e.Send(e.Write(wire.RCWriteFirst, e.P(0), 0, 2*e.MTU, e.Data(e.MTU-64)))
				refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
			}},
	}
}

func readAtomicCases() []Case {
	le := binary.LittleEndian
	atomicAck := func(e *Env, psn wire.PSN, msn uint32, off int) Reply {
		return Reply{Opcode: wire.RCAtomicAck, PSN: psn, MSN: msn, Syndrome: wire.ACK(wire.CreditsInvalid), Orig: le.Uint64(e.Before[off:])}
	}
	return []Case{
		{ID: "rc-read", Desc: "READ 100 B", QP: RC, Spec: "IBA ch. 9 RDMA READ", Build: func(e *Env) {
			e.Send(e.Read(e.P(0), 64, 100))
			e.Expect(e.ReadResponses(e.P(0), 64, 100, 1)...)
			e.Leaves(e.P(1), 1)
		}},
		{ID: "rc-read-multi", Desc: "READ 3000 B (FIRST/MIDDLE/LAST responses)", QP: RC, Spec: "IBA ch. 9 RDMA READ", Build: func(e *Env) {
			e.Send(e.Read(e.P(0), 0, 3000))
			e.Expect(e.ReadResponses(e.P(0), 0, 3000, 1)...)
			e.Leaves(e.P(3), 1)
		}},
		{ID: "rc-read-zero-length", Desc: "zero-length READ naming a bad R_Key", QP: RC, Spec: "IBA ch. 9; rxe check_rkey", Build: func(e *Env) {
			f := e.Read(e.P(0), 0, 0)
			f.RETH.RKey ^= 0xFFFFFF00
			e.Send(f)
			e.Expect(Reply{Opcode: wire.RCReadResponseOnly, PSN: e.P(0), MSN: 1, Syndrome: wire.ACK(wire.CreditsInvalid), Data: []byte{}})
			e.Leaves(e.P(1), 1)
		}},
		{ID: "rc-read-duplicate", Desc: "READ 64 B, then the same request again", QP: RC,
			Spec: "IBA ch. 9 (a duplicate READ is executed again)", Build: func(e *Env) {
				e.Send(e.Read(e.P(0), 0, 64))
				e.Expect(e.ReadResponses(e.P(0), 0, 64, 1)...)
				e.Step()
				e.Send(e.Read(e.P(0), 0, 64))
				e.Expect(e.ReadResponses(e.P(0), 0, 64, 1)...)
				e.Leaves(e.P(1), 1)
				e.Drops(cDuplicate)
			}},
		{ID: "rc-read-past-end", Desc: "READ 64 B at 32 B before the region's end", QP: RC, Window: EndWindow, Spec: specRefusal,
			Build: func(e *Env) {
				f := e.Read(e.P(0), 0, 64)
				f.RETH.VA = e.T.MR.VA + e.T.MR.Len - 32
				e.Send(f)
				refused(e, wire.NAKRemoteAccessError, e.P(0), 0, cBounds)
			}},
		{ID: "rc-read-bad-rkey", Desc: "READ 64 B with an R_Key of no region", QP: RC, Spec: specRefusal, Build: func(e *Env) {
			f := e.Read(e.P(0), 0, 64)
			f.RETH.RKey ^= 0x00ABCD00
			e.Send(f)
			refused(e, wire.NAKRemoteAccessError, e.P(0), 0, cBadKey)
		}},
		{ID: "rc-read-with-payload", Desc: "READ request carrying 16 B of payload", QP: RC,
			Spec: "IBA ch. 9 (READ requests carry no payload): Invalid Request", Build: func(e *Env) {
				e.Send(e.Read(e.P(0), 0, 64), AppendPayload(e.Data(16)))
				refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
			}},
		{ID: "rc-fetch-add", Desc: "FETCH_ADD 5 at an aligned VA", QP: RC, Spec: "IBA ch. 9 atomics", Build: func(e *Env) {
			e.Send(e.Atomic(wire.RCFetchAdd, e.P(0), 8, 5, 0))
			e.Expect(atomicAck(e, e.P(0), 1, 8))
			e.Wrote(8, le.AppendUint64(nil, le.Uint64(e.Before[8:])+5))
			e.Leaves(e.P(1), 1)
		}},
		{ID: "rc-cmp-swap-hit", Desc: "CMP_SWP whose compare value matches", QP: RC, Spec: "IBA ch. 9 atomics", Build: func(e *Env) {
			swap := le.Uint64(e.Data(8))
			e.Send(e.Atomic(wire.RCCompareSwap, e.P(0), 16, swap, le.Uint64(e.Before[16:])))
			e.Expect(atomicAck(e, e.P(0), 1, 16))
			e.Wrote(16, le.AppendUint64(nil, swap))
			e.Leaves(e.P(1), 1)
		}},
		{ID: "rc-cmp-swap-miss", Desc: "CMP_SWP whose compare value differs", QP: RC, Spec: "IBA ch. 9 atomics", Build: func(e *Env) {
			e.Send(e.Atomic(wire.RCCompareSwap, e.P(0), 16, 0x1111, ^le.Uint64(e.Before[16:])))
			e.Expect(atomicAck(e, e.P(0), 1, 16))
			e.Leaves(e.P(1), 1)
		}},
		{ID: "rc-fetch-add-duplicate", Desc: "FETCH_ADD, then the same request again", QP: RC,
			Spec: "IBA ch. 9 (a duplicate atomic returns the saved result, not executed twice)", Build: func(e *Env) {
				e.Send(e.Atomic(wire.RCFetchAdd, e.P(0), 8, 7, 0))
				e.Expect(atomicAck(e, e.P(0), 1, 8))
				e.Step()
				e.Send(e.Atomic(wire.RCFetchAdd, e.P(0), 8, 7, 0))
				e.Expect(atomicAck(e, e.P(0), 1, 8))
				e.Wrote(8, le.AppendUint64(nil, le.Uint64(e.Before[8:])+7))
				e.Leaves(e.P(1), 1)
				e.Drops(cDuplicate)
			}},
		{ID: "rc-atomic-misaligned", Desc: "FETCH_ADD at a VA 4 bytes off 8-byte alignment", QP: RC,
			Spec: "IBA ch. 9 (8-byte aligned): Invalid Request; rxe MISALIGNED_ATOMIC", Build: func(e *Env) {
				e.Send(e.Atomic(wire.RCFetchAdd, e.P(0), 12, 1, 0))
				refused(e, wire.NAKInvalidRequest, e.P(0), 0, cInvalid)
			}},
		{ID: "rc-atomic-past-end", Desc: "FETCH_ADD at the region's end", QP: RC, Window: EndWindow, Spec: specRefusal, Build: func(e *Env) {
			f := e.Atomic(wire.RCFetchAdd, e.P(0), 0, 1, 0)
			f.AtomicETH.VA = e.T.MR.VA + e.T.MR.Len
			e.Send(f)
			refused(e, wire.NAKRemoteAccessError, e.P(0), 0, cBounds)
		}},
		{ID: "rc-atomic-read-only-mr", Desc: "FETCH_ADD in a region registered for remote read only", QP: RC, Spec: specRefusal, Build: func(e *Env) {
			if e.T.RO.Len < 8 {
				e.Skip("the target names no read-only region")
				return
			}
			f := e.Atomic(wire.RCFetchAdd, e.P(0), 0, 1, 0)
			f.AtomicETH.VA, f.AtomicETH.RKey = e.T.RO.VA, e.T.RO.RKey
			e.Send(f)
			refused(e, wire.NAKRemoteAccessError, e.P(0), 0, cAccess)
		}},
	}
}

func framingCases() []Case {
	// UC only: the probe after it works whether the write was taken or
	// not (on RC the two outcomes leave different PSNs expected).
	cs := []Case{{ID: "uc-l2-multicast", Desc: "UC WRITE ONLY in an Ethernet frame to the all-hosts group 01:00:5e:00:00:01 (IP unicast to the target)",
		QP: UC, Spec: "RFC 1122 3.3.6 leaves room; Linux delivers it (drop_unicast_in_l2_multicast=0), so rxe executes it", Build: func(e *Env) {
			data := writeOnly(e, func(f *wire.Fields) { f.DstMAC = [6]byte{0x01, 0x00, 0x5e, 0, 0, 1} })
			executed(e, data)
			e.Alt("RFC 1122 3.3.6: a host SHOULD discard a unicast datagram that came in a link-layer broadcast or multicast", func() {
				e.Leaves(e.P(1), 0)
				e.Drops(cWrongMAC)
			})
		}}}
	for _, fc := range []struct {
		id, desc, counter string
		mut               func(e *Env) Mutation
		edit              func(e *Env, f *wire.Fields)
	}{
		{id: "truncated-bth", desc: "frame cut 6 bytes into the BTH", counter: cMalformed,
			mut: func(*Env) Mutation { return Truncate(bthOff + 6) }},
		{id: "truncated-reth", desc: "frame cut 8 bytes into the RETH", counter: cMalformed,
			mut: func(*Env) Mutation { return Truncate(restOff + 8) }},
		{id: "missing-icrc", desc: "ICRC removed (IP and UDP lengths consistent)", counter: cBadICRC,
			mut: func(*Env) Mutation { return WithoutICRC }},
		{id: "wrong-dst-mac", desc: "Ethernet destination another unicast MAC", counter: cWrongMAC,
			edit: func(e *Env, f *wire.Fields) { f.DstMAC = [6]byte{0x02, 0, 0, 0x5A, 0x5A, 0x01} }},
		{id: "bad-ip-checksum", desc: "IPv4 header checksum wrong (ICRC valid)", counter: cIPChecksum,
			mut: func(*Env) Mutation { return BadIPChecksum }},
		{id: "wrong-udp-port", desc: "UDP destination port 4792", counter: cNotRoCE,
			mut: func(*Env) Mutation { return UDPDstPort(wire.RoCEv2Port + 1) }},
		{id: "ip-fragment", desc: "IPv4 first fragment (MF set) of a datagram never completed", counter: cNotRoCE,
			mut: func(*Env) Mutation { return Fragment }},
		{id: "wrong-dst-ip", desc: "IP destination another address (the target's MAC)", counter: cWrongGID,
			edit: func(e *Env, f *wire.Fields) { f.DstIP = e.Spoof }},
	} {
		cs = append(cs, both(fc.id, fc.desc, "L2/L3: not for this host or not a RoCEv2 packet: drop", func(e *Env) {
			var muts []Mutation
			if fc.mut != nil {
				muts = append(muts, fc.mut(e))
			}
			writeOnly(e, func(f *wire.Fields) {
				if fc.edit != nil {
					fc.edit(e, f)
				}
			}, muts...)
			e.Drops(fc.counter)
		})...)
	}
	return cs
}

package reliability_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/testbed/sim"
)

// schemes under test, with small codes so that 8-chunk messages span
// several submessages and a shortened last one.
var testSchemes = []struct {
	name   string
	scheme scheme.Scheme
}{
	{"sr-rto", scheme.Scheme{Kind: scheme.SRRTO}},
	{"sr-nack", scheme.Scheme{Kind: scheme.SRNACK}},
	{"ec-mds(3,2)", scheme.MustParse("ec-mds(3,2)")},
	{"ec-xor(4,2)", scheme.MustParse("ec-xor(4,2)")},
	{"hybrid-mds(4,1)", scheme.MustParse("hybrid-mds(4,1)")},
}

// firstPassLoss drops the first transmission of the chunks in mask: data
// chunk i is bit i, parity chunk j is bit chunks+j.
func firstPassLoss(chunks int, mask uint64) fate {
	return func(p packet) (int, time.Duration) {
		bit := -1
		switch p.kind {
		case dataChunk:
			bit = p.index
		case parityChunk:
			bit = chunks + p.index
		}
		if bit >= 0 && p.attempt == 0 && mask>>bit&1 != 0 {
			return 0, 0
		}
		return 1, 0
	}
}

// TestEveryFirstPassLossPattern loses every subset of the first pass of
// messages of 0..8 chunks (data and parity) under every scheme: each
// transfer completes with exact data, lossless ones without any repair,
// and lossy ones within the scheme's bound.
func TestEveryFirstPassLossPattern(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			runs := 0
			for chunks := 0; chunks <= 8; chunks++ {
				length := max(0, chunks*testMTU-testMTU/3)
				if chunks == 0 {
					length = 0
				}
				cfg := reliability.ReceiverConfig{Scheme: sc.scheme}
				probe := newHarness(t, cfg, lossless)
				total := chunks + probe.r.Plan(length).ParityChunks()
				for mask := uint64(0); mask < 1<<total; mask++ {
					runs++
					h := newHarness(t, cfg, firstPassLoss(chunks, mask))
					h.chunkEvents = mask%2 == 1 // both ways of reporting arrivals
					h.transfer(length, length, mask)
					h.run(time.Second)
					sent, recvd := h.check(0)
					if sent.err != nil {
						t.Fatalf("%d chunks, loss mask %b: failed: %v", chunks, mask, sent.err)
					}
					rtt := 2 * testDelay
					rto := 3 * rtt
					bound := 2*rtt + rto + time.Millisecond // the first pass plus one repair round, with slack
					if sc.scheme.Coded() {
						bound += rtt + rto // the fallback timeout (and a probe) come before the repair
						if lastSubmessageLost(probe.r.Plan(length), mask) {
							// Nothing shows the first pass reached it: the
							// fallback waits for an RTO of silence.
							bound += rto
						}
					}
					if recvd.stats.Duration() > bound {
						t.Errorf("%d chunks, loss mask %b: took %v, bound %v (sender %v)", chunks, mask, recvd.stats.Duration(), bound, sent)
					}
					if mask == 0 && (sent.stats.Retransmitted != 0 || recvd.stats.Fallbacks != 0) {
						t.Errorf("%d chunks lossless: %d retransmitted, %d fallbacks", chunks, sent.stats.Retransmitted, recvd.stats.Fallbacks)
					}
				}
			}
			t.Logf("%d loss patterns", runs)
		})
	}
}

// controlFate loses or duplicates control datagrams by their ordinal in a
// direction, and delays every other datagram by reorder to reorder them.
func controlFate(lostToSender, lostToReceiver map[int]bool, dup bool, reorder time.Duration) fate {
	return func(p packet) (int, time.Duration) {
		switch p.kind {
		case toSender:
			if lostToSender[p.index] {
				return 0, 0
			}
		case toReceiver:
			if lostToReceiver[p.index] {
				return 0, 0
			}
		default:
			return 1, 0
		}
		copies := 1
		if dup {
			copies = 2
		}
		if p.index%2 == 1 {
			return copies, reorder
		}
		return copies, 0
	}
}

// TestLostControlMessages loses each of the first control datagrams of
// either direction (the CTS, ACKs, the completing ACK, NACKs, probes), with
// and without a lost data chunk, and duplicates and reorders all of them.
func TestLostControlMessages(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			for _, dataLoss := range []uint64{0, 0b100, 0b10000001} {
				for dir := range 2 {
					for k := range 6 {
						for _, variant := range []struct {
							dup     bool
							reorder time.Duration
						}{{false, 0}, {true, 0}, {true, 3 * time.Millisecond}} {
							lost := map[int]bool{k: true, k + 2: true}
							ls, lr := lost, map[int]bool{}
							if dir == 1 {
								ls, lr = lr, ls
							}
							control := controlFate(ls, lr, variant.dup, variant.reorder)
							data := firstPassLoss(8, dataLoss)
							h := newHarness(t, reliability.ReceiverConfig{Scheme: sc.scheme}, func(p packet) (int, time.Duration) {
								if p.kind == toSender || p.kind == toReceiver {
									return control(p)
								}
								return data(p)
							})
							h.transfer(8*testMTU, 8*testMTU, uint64(k))
							h.transfer(3*testMTU, 3*testMTU, uint64(k+100))
							h.run(time.Second)
							for id := range uint64(2) {
								if sent, _ := h.check(id); sent.err != nil {
									t.Fatalf("loss %b, direction %d, datagrams %v lost, %+v: transfer %d failed: %v",
										dataLoss, dir, lost, variant, id, sent.err)
								}
							}
						}
					}
				}
			}
		})
	}
}

// completingAck reports whether p carries an ACK that says its transfer
// is complete.
func completingAck(p packet) bool {
	var m control.Message
	return p.kind == toSender && m.Decode(p.datagram) == nil && m.Type == control.ACK && m.AckFlags&control.AckComplete != 0
}

// TestCompletionLearnedWithinRTT loses the receiver's first completing
// ACKs of a transfer: the receiver repeats it a round trip later,
// doubling, so the sender learns of the completion within two round trips
// of the receiver per loss, and the sender's FIN stops the repeats: none
// is sent after a FIN arrived.
func TestCompletionLearnedWithinRTT(t *testing.T) {
	for _, sc := range testSchemes {
		for lost := 1; lost <= 2; lost++ {
			t.Run(fmt.Sprintf("%s/%d-lost", sc.name, lost), func(t *testing.T) {
				var h *harness
				completing, afterFin := 0, 0
				var finArrived time.Time // zero: no FIN yet
				h = newHarness(t, reliability.ReceiverConfig{Scheme: sc.scheme}, func(p packet) (int, time.Duration) {
					var m control.Message
					if p.kind == toReceiver && m.Decode(p.datagram) == nil && m.Type == control.Fin && finArrived.IsZero() {
						finArrived = h.now().Add(testDelay)
					}
					if completingAck(p) {
						completing++
						if !finArrived.IsZero() && h.now().After(finArrived) {
							afterFin++
						}
						if completing <= lost {
							return 0, 0
						}
					}
					return 1, 0
				})
				h.transfer(8*testMTU, 8*testMTU, 1)
				h.run(time.Second)
				sent, recvd := h.check(0)
				if sent.err != nil {
					t.Fatal(sent.err)
				}
				rtt := 2 * testDelay
				// Repeats wait 1, 2, … round trips (as the receiver
				// measured them: a little more than rtt); the last one
				// takes half a round trip to the sender.
				bound := time.Duration(1<<lost-1)*rtt + rtt/2 + time.Millisecond
				if late := sent.stats.End.Sub(recvd.stats.End); late > bound {
					t.Errorf("sender done %v after the receiver, bound %v", late, bound)
				}
				if finArrived.IsZero() || completing <= lost {
					t.Fatalf("%d completing ACKs, FIN seen %v: the run did not get through", completing, !finArrived.IsZero())
				}
				if afterFin > 0 {
					t.Errorf("%d completing ACKs sent after the FIN arrived", afterFin)
				}
			})
		}
	}
}

// TestSRNACKFindsLossesInRTT loses the last chunk of a first pass and
// then its repair, or a middle chunk and its repair twice: SR-NACK's
// receiver finds the tail loss from the sender's tail probe and each lost
// repair a round trip after it asked, so the transfer completes about one
// round trip per lost transmission after the first pass lands — not a
// retransmission timeout (3 RTT) per loss as before. (NoBackoff: the
// paper's semantics; by default each repeated NACK of a hole waits twice
// as long as the one before.)
func TestSRNACKFindsLossesInRTT(t *testing.T) {
	for _, tc := range []struct {
		chunk, lost int
	}{{7, 2}, {3, 3}} {
		t.Run(fmt.Sprintf("chunk%d-lost%d", tc.chunk, tc.lost), func(t *testing.T) {
			h := newHarness(t, reliability.ReceiverConfig{Config: reliability.Config{NoBackoff: true}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, func(p packet) (int, time.Duration) {
				if p.kind == dataChunk && p.index == tc.chunk && p.attempt < tc.lost {
					return 0, 0
				}
				return 1, 0
			})
			h.transfer(8*testMTU, 8*testMTU, 1)
			h.run(time.Second)
			sent, recvd := h.check(0)
			if sent.err != nil {
				t.Fatal(sent.err)
			}
			rtt := 2 * testDelay
			// The CTS's half round trip and the first pass's landing (one
			// RTT), then per lost transmission a round trip and the
			// reorder window (RTT/4), and a millisecond of slack.
			bound := rtt + time.Duration(tc.lost)*(rtt+rtt/4) + time.Millisecond
			if d := recvd.stats.Duration(); d > bound {
				t.Errorf("took %v, bound %v (retransmission timeouts would take %v)", d, bound, rtt+time.Duration(tc.lost)*3*rtt)
			}
			if sent.stats.Retransmitted != tc.lost {
				t.Errorf("%d retransmissions, want %d: a repair was asked for twice", sent.stats.Retransmitted, tc.lost)
			}
		})
	}
}

// TestRepeatedLoss loses every transmission of a chunk until its n-th:
// repair keeps going (new rounds) until it gets through.
func TestRepeatedLoss(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			for _, tries := range []int{2, 4} {
				h := newHarness(t, reliability.ReceiverConfig{Scheme: sc.scheme}, func(p packet) (int, time.Duration) {
					if (p.kind == dataChunk && (p.index == 1 || p.index == 2) || p.kind == parityChunk) && p.attempt < tries {
						return 0, 0
					}
					return 1, 0
				})
				h.transfer(8*testMTU, 8*testMTU, 1)
				h.run(time.Second)
				sent, recvd := h.check(0)
				if sent.err != nil {
					t.Fatalf("%d tries: %v", tries, sent.err)
				}
				if sent.stats.Retransmitted < 2*(tries-1) {
					t.Errorf("%d tries: %d retransmissions, want at least %d", tries, sent.stats.Retransmitted, 2*(tries-1))
				}
				t.Logf("%d tries: %v, %+v", tries, recvd.stats.Duration(), sent.stats)
			}
		})
	}
}

// TestLostImmediateCarriers loses the zero-length carriers of a short
// message once: the receiver reports the immediate missing and the sender
// sends the carriers again.
func TestLostImmediateCarriers(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t, reliability.ReceiverConfig{Scheme: sc.scheme}, func(p packet) (int, time.Duration) {
				if p.kind == carrier && p.attempt == 0 && p.index == 5 {
					return 0, 0
				}
				return 1, 0
			})
			h.transfer(2*testMTU, 2*testMTU, 1)
			h.run(time.Second)
			if sent, _ := h.check(0); sent.err != nil {
				t.Fatal(sent.err)
			}
			if h.attempts[[3]uint64{uint64(carrier), 0, 5}] < 2 {
				t.Fatal("the lost carrier was never sent again")
			}
		})
	}
}

// TestBlackholeTimesOut: a link that carries nothing fails the transfer
// on both sides at the global timeout, not before, never hanging.
func TestBlackholeTimesOut(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			cfg := reliability.ReceiverConfig{Scheme: sc.scheme}
			cfg.Timeout = 300 * time.Millisecond
			drops := 0
			h := newHarness(t, cfg, func(p packet) (int, time.Duration) {
				if p.kind == dataChunk || p.kind == parityChunk || p.kind == toSender && p.index > 0 {
					drops++
					return 0, 0 // the CTS gets through, nothing after it
				}
				return 1, 0
			})
			h.transfer(4*testMTU, 4*testMTU, 1)
			h.run(time.Second)
			sent, recvd := h.check(0)
			if !errors.Is(sent.err, reliability.ErrTimeout) && !errors.Is(sent.err, reliability.ErrAborted) ||
				!errors.Is(recvd.err, reliability.ErrTimeout) && !errors.Is(recvd.err, reliability.ErrAborted) {
				t.Fatalf("sender %v, receiver %v: want timeouts", sent.err, recvd.err)
			}
			if d := recvd.stats.Duration(); d < cfg.Timeout || d > cfg.Timeout+50*time.Millisecond {
				t.Fatalf("receiver failed after %v, timeout %v", d, cfg.Timeout)
			}
			if drops == 0 {
				t.Fatal("nothing was sent")
			}
			// Each side's error says what it waited for.
			if !strings.Contains(sent.err.Error(), "sender: 0 of ") || !strings.Contains(recvd.err.Error(), "receiver: 0 of ") {
				t.Errorf("sender %q, receiver %q: want each side's state", sent.err, recvd.err)
			}
		})
	}
}

// isAbort reports whether p carries an Abort.
func isAbort(p packet) bool {
	var m control.Message
	return (p.kind == toSender || p.kind == toReceiver) && m.Decode(p.datagram) == nil && m.Type == control.Abort
}

// TestLostAbort loses the first Abort of a transfer that one side failed:
// the other side still asks about it (the receiver repeats its CTS, the
// sender probes), and is answered with the Abort again, within a few
// round trips rather than at its timeout. Before, a lost Abort left a
// receiver waiting out its timeout, and a sender whose receiver had
// failed the transfer was told by a probe that it had completed.
func TestLostAbort(t *testing.T) {
	const timeout = 2 * time.Second
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			t.Run("sender canceled before the CTS", func(t *testing.T) {
				aborts := 0
				h := newHarness(t, reliability.ReceiverConfig{Config: reliability.Config{Timeout: timeout}, Scheme: sc.scheme},
					func(p packet) (int, time.Duration) {
						if isAbort(p) {
							if aborts++; aborts == 1 {
								return 0, 0
							}
						}
						return 1, 0
					})
				id := h.submit(4*testMTU, 1)
				h.s.Cancel(h.now(), id, errCanceled)
				h.pair.Dispatch()
				h.post(4 * testMTU)
				h.transfer(3*testMTU, 3*testMTU, 2) // the next one still matches
				h.run(2 * timeout)
				sent, recvd := h.check(id)
				if !errors.Is(sent.err, errCanceled) || !errors.Is(recvd.err, reliability.ErrAborted) {
					t.Fatalf("sender %v, receiver %v: want the cancel and ErrAborted", sent.err, recvd.err)
				}
				if aborts < 2 {
					t.Fatalf("%d Aborts sent: the lost one was not repeated", aborts)
				}
				if d := recvd.stats.Duration(); d > timeout/4 {
					t.Fatalf("the receiver learned of the abort after %v (timeout %v)", d, timeout)
				}
				if sent, _ := h.check(id + 1); sent.err != nil {
					t.Fatalf("the next transfer: %v", sent.err)
				}
			})
			t.Run("receiver canceled mid-transfer", func(t *testing.T) {
				aborts := 0
				h := newHarness(t, reliability.ReceiverConfig{Config: reliability.Config{Timeout: timeout}, Scheme: sc.scheme},
					func(p packet) (int, time.Duration) {
						switch {
						case p.kind == dataChunk || p.kind == parityChunk || p.kind == carrier:
							return 0, 0 // a black hole: only the receiver's cancel ends it
						case isAbort(p):
							if aborts++; aborts == 1 {
								return 0, 0
							}
						}
						return 1, 0
					})
				h.transfer(8*testMTU, 8*testMTU, 1)
				h.pair.At(h.now().Add(3*testDelay), sim.ArrivalFunc(func(*sim.Pair) { h.r.Cancel(h.now(), 0, errCanceled) }))
				h.run(2 * timeout)
				sent, recvd := h.check(0)
				if !errors.Is(sent.err, reliability.ErrAborted) || !errors.Is(recvd.err, errCanceled) {
					t.Fatalf("sender %v, receiver %v: want ErrAborted and the cancel", sent.err, recvd.err)
				}
				if aborts < 2 {
					t.Fatalf("%d Aborts sent: the lost one was not repeated", aborts)
				}
				if d := sent.stats.Duration(); d > timeout/4 {
					t.Fatalf("the sender learned of the abort after %v (timeout %v)", d, timeout)
				}
			})
		})
	}
}

// TestReceiverCanceledFirst: a receiver cancels its posted transfers
// before the sender has submitted them (a Read loop whose timeouts run out
// while the peer is idle), more of them than the Abort log holds. The
// sender, which heard the Aborts, fails each as it starts and sends none
// of its data; before, it started them, and once the receiver's log had
// moved on, a probe heard that they had completed.
func TestReceiverCanceledFirst(t *testing.T) {
	const n = 262 // more than the 256 failures the Abort log holds
	sent := 0
	h := newHarness(t, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, func(p packet) (int, time.Duration) {
		if p.kind == dataChunk || p.kind == parityChunk {
			sent++
		}
		return 1, 0
	})
	for range n {
		h.post(2 * testMTU)
	}
	for id := range uint64(n) {
		h.r.Cancel(h.now(), id, errCanceled)
	}
	h.pair.Dispatch()
	for end := h.now().Add(10 * testDelay); ; h.pair.Step() { // the CTSs and Aborts arrive
		if next, ok := h.pair.Next(); !ok || next.After(end) {
			break
		}
	}
	for i := range n {
		h.submit(2*testMTU, uint64(i))
	}
	h.transfer(3*testMTU, 3*testMTU, 99) // the next one still matches
	h.run(2 * time.Second)
	for id := range uint64(n) {
		if sent, recvd := h.check(id); !errors.Is(sent.err, reliability.ErrAborted) || !errors.Is(recvd.err, errCanceled) {
			t.Fatalf("transfer %d: sender %v, receiver %v: want ErrAborted and the cancel", id, sent.err, recvd.err)
		}
	}
	if s, _ := h.check(n); s.err != nil {
		t.Fatalf("the next transfer: %v", s.err)
	}
	if sent != 3 {
		t.Errorf("%d chunks sent: want the next transfer's 3 alone", sent)
	}
}

// errCanceled is the error a test cancels a transfer with.
var errCanceled = errors.New("canceled by the test")

// TestLengthMismatch: a send longer than the posted receive fails on both
// sides, and the next transfer still matches its own receive.
func TestLengthMismatch(t *testing.T) {
	h := newHarness(t, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRRTO}}, lossless)
	h.transfer(4*testMTU, 5*testMTU, 1)
	h.transfer(2*testMTU, 2*testMTU, 2)
	h.run(time.Second)
	sent, recvd := h.check(0)
	if !errors.Is(sent.err, reliability.ErrLengthMismatch) || !errors.Is(recvd.err, reliability.ErrLengthMismatch) {
		t.Fatalf("sender %v, receiver %v: want length mismatch", sent.err, recvd.err)
	}
	if sent, _ := h.check(1); sent.err != nil {
		t.Fatalf("the next transfer: %v", sent.err)
	}
}

// TestManyTransfersRandomLoss runs a window of transfers of mixed sizes
// through 10 % random loss of everything, duplicates and reordering.
func TestManyTransfersRandomLoss(t *testing.T) {
	for _, sc := range testSchemes {
		t.Run(sc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				rng := newRand(seed)
				h := newHarness(t, reliability.ReceiverConfig{Scheme: sc.scheme}, func(p packet) (int, time.Duration) {
					switch x := rng.Float64(); {
					case x < 0.10:
						return 0, 0
					case x < 0.13:
						return 2, time.Duration(rng.IntN(2000)) * time.Microsecond
					case x < 0.20:
						return 1, time.Duration(rng.IntN(3000)) * time.Microsecond
					}
					return 1, 0
				})
				for i := range 12 {
					n := (i*37)%300*testMTU/7 + 1
					h.transfer(n, n, seed*100+uint64(i))
				}
				h.run(3 * time.Second)
				for id := range uint64(12) {
					if sent, _ := h.check(id); sent.err != nil {
						t.Fatalf("seed %d transfer %d: %v", seed, id, sent.err)
					}
				}
			}
		})
	}
}

// TestTimerRaces tunes the retransmission timeout to expire at the very
// instant a lone chunk's ACK arrives (α = 1 and RTT half the link's round
// trip plus the ACK delay — none for the completing ACK that ends a coded
// transfer's repair — and one chunk's injection), and runs both orders of
// every such tie through random loss.
func TestTimerRaces(t *testing.T) {
	const inject = time.Duration(testMTU * 8) // ns per chunk at 1 Gbit/s
	for _, sc := range testSchemes {
		for _, timersFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/timers-first=%v", sc.name, timersFirst), func(t *testing.T) {
				ackDelay := 100 * time.Microsecond
				cfg := reliability.ReceiverConfig{Scheme: sc.scheme}
				// RTO = RTT + α·RTT = 2·RTT: exactly when a lone chunk's ACK
				// comes back.
				cfg.Alpha = 1
				cfg.AckDelay = ackDelay
				cfg.RTT = (2*testDelay + ackDelay + inject) / 2
				if sc.scheme.Coded() {
					// Coded transfers time only their repairs, which end in
					// the completing ACK, sent without delay.
					cfg.RTT = (2*testDelay + inject) / 2
				}
				ties := 0
				defer func() {
					if ties == 0 {
						t.Error("no timer ever fell due at a delivery's instant: the tuning is off")
					}
				}()
				for seed := range uint64(20) {
					rng := newRand(seed)
					h := newHarness(t, cfg, func(p packet) (int, time.Duration) {
						if rng.Float64() < 0.1 {
							return 0, 0
						}
						return 1, 0
					})
					h.pair.TimersFirst = timersFirst
					for i := range 3 {
						h.transfer((i+1)*3*testMTU, (i+1)*3*testMTU, seed*10+uint64(i))
					}
					h.run(time.Second)
					ties += h.pair.Ties
					for id := range uint64(3) {
						if sent, _ := h.check(id); sent.err != nil {
							t.Fatalf("seed %d transfer %d: %v", seed, id, sent.err)
						}
					}
				}
			})
		}
	}
}

// lastSubmessageLost reports whether mask (as firstPassLoss reads it)
// loses every data and parity chunk of the plan's last submessage.
func lastSubmessageLost(plan reliability.Plan, mask uint64) bool {
	l, err := plan.Layout()
	if err != nil || l.Submessages() == 0 {
		return false
	}
	last := l.Submessages() - 1
	first, n := l.DataRange(last)
	pFirst, m := l.ParityRange(last)
	for i := first; i < first+n; i++ {
		if mask>>i&1 == 0 {
			return false
		}
	}
	for j := pFirst; j < pFirst+m; j++ {
		if mask>>(plan.DataChunks()+j)&1 == 0 {
			return false
		}
	}
	return true
}

// TestAutoAdapts: Auto starts with SR-NACK (no loss measured yet), learns
// the loss from the first transfers' bitmaps and switches to a code; on a
// clean link it goes on with SR-NACK (where the model would take SR-RTO,
// Auto takes SR-NACK). Transfers are of 64 chunks so codes pay off.
func TestAutoAdapts(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		rng := newRand(9)
		h := newHarness(t, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.Auto}}, func(p packet) (int, time.Duration) {
			if (p.kind == dataChunk || p.kind == parityChunk) && rng.Float64() < loss {
				return 0, 0
			}
			return 1, 0
		})
		var plans []string
		for i := range 6 {
			h.transfer(64*testMTU, 64*testMTU, uint64(i))
			h.run(2 * time.Second)
			sent, recvd := h.check(uint64(i))
			if sent.err != nil {
				t.Fatalf("loss %v transfer %d: %v", loss, i, sent.err)
			}
			plans = append(plans, recvd.stats.Plan.String())
		}
		est := h.r.Estimator()
		t.Logf("loss %v: plans %v; estimated loss %.3f, RTT %v", loss, plans, est.Loss(), est.RTT())
		coded := strings.HasPrefix(plans[len(plans)-1], "ec")
		if plans[0] != "sr-nack" || coded != (loss > 0) || loss == 0 && plans[len(plans)-1] != "sr-nack" {
			t.Errorf("loss %v: plans %v", loss, plans)
		}
		if loss > 0 && (est.Loss() < loss/2 || est.Loss() > 2*loss) {
			t.Errorf("estimated loss %.3f for a link losing %.2f", est.Loss(), loss)
		}
	}
}

// TestFirstPassPiece walks a coded first pass transmission by
// transmission: each submessage's data chunks, then its parity chunks,
// the last submessage short, every piece's run ending where its part
// does within the submessage.
func TestFirstPassPiece(t *testing.T) {
	l, err := ec.NewLayout(ec.Params{Kind: ec.MDS, K: 4, M: 2}, 10*64, 64) // submessages of 4, 4 and 2 data chunks
	if err != nil {
		t.Fatal(err)
	}
	type piece struct {
		part     reliability.Part
		first, n int
	}
	var want []piece
	for sub, k := range []int{4, 4, 2} {
		for i := range k {
			want = append(want, piece{reliability.Data, 4*sub + i, k - i})
		}
		for j := range 2 {
			want = append(want, piece{reliability.Parity, 2*sub + j, 2 - j})
		}
	}
	if total := l.DataChunks() + l.ParityChunks(); total != len(want) {
		t.Fatalf("layout %v: %d transmissions, want %d", l, total, len(want))
	}
	for tr, w := range want {
		part, first, n := reliability.FirstPassPiece(l, tr)
		if (piece{part, first, n}) != w {
			t.Errorf("transmission %d: %v chunk %d, %d to go; want %v chunk %d, %d to go", tr, part, first, n, w.part, w.first, w.n)
		}
	}
}

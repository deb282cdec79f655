package collective_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/collective"
	"github.com/sdr-rdma/sdr/collective/localring"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// newRing builds n ranks over pipes with hop's link on every hop.
func newRing(t *testing.T, n int, hop link.Config, rc reliability.ReceiverConfig, segment int) []*collective.Ring {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := localring.New(ctx, localring.Config{Ranks: n, Hops: localring.Pipes(func(int) link.Config { return hop }),
		Sender: reliability.SenderConfig{Config: rc.Config}, Receiver: rc, Ring: collective.Config{Segment: segment}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return rs.Ranks
}

// onAll runs fn on every rank at once and fails t on any error.
func onAll(t *testing.T, ranks []*collective.Ring, fn func(ctx context.Context, r *collective.Ring) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() { errs[i] = fn(ctx, r) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

// fill writes rank's check input (collective.FillPattern).
func fill(dt collective.DataType, buf []byte, rank int) { collective.FillPattern(dt, buf, rank) }

// checkSum verifies elements [from, to) of buf hold the sum of n ranks'
// check inputs.
func checkSum(t *testing.T, dt collective.DataType, buf []byte, n, from, to int) {
	t.Helper()
	size := dt.Size()
	if wrong := collective.PatternErrors(dt, buf[from*size:to*size], n, from); wrong != 0 {
		t.Fatalf("%d of elements [%d, %d) are not the sum over %d ranks", wrong, from, to, n)
	}
}

func TestSum(t *testing.T) {
	for _, dt := range []collective.DataType{collective.Float32, collective.Float64, collective.Int32, collective.Int64} {
		for _, n := range []int{1, 7, 8, 9, 1000} {
			a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
			fill(dt, a, 0)
			fill(dt, b, 1)
			collective.Sum(dt, a, b)
			checkSum(t, dt, a, 2, 0, n)
			a[(n/2)*dt.Size()] ^= 0x40 // the check sees one element off
			if wrong := collective.PatternErrors(dt, a, 2, 0); wrong != 1 {
				t.Errorf("%v: %d wrong after corrupting one element", dt, wrong)
			}
		}
	}
}

func TestAllReduce(t *testing.T) {
	ranks := newRing(t, 4, link.Config{}, reliability.ReceiverConfig{}, 64<<10)
	for _, tc := range []struct {
		dt    collective.DataType
		elems int
	}{
		{collective.Int32, 1},           // three ranks hold empty blocks
		{collective.Float32, 1001},      // blocks not a multiple of the ranks
		{collective.Int64, 100_003},     // several segments per block
		{collective.Float64, 3 << 15},   // 768 KiB
		{collective.Float32, 256 << 10}, // 1 MiB, 4 segments a block
	} {
		t.Run(fmt.Sprintf("%v×%d", tc.dt, tc.elems), func(t *testing.T) {
			bufs := make([][]byte, len(ranks))
			for i := range bufs {
				bufs[i] = make([]byte, tc.elems*tc.dt.Size())
				fill(tc.dt, bufs[i], i)
			}
			onAll(t, ranks, func(ctx context.Context, r *collective.Ring) error {
				return r.AllReduce(ctx, bufs[r.Rank()], tc.dt)
			})
			for i := range bufs {
				checkSum(t, tc.dt, bufs[i], len(ranks), 0, tc.elems)
			}
		})
	}
}

// TestAllReduceLossy: every hop loses packets and delays them; each
// scheme still delivers the exact sum.
func TestAllReduceLossy(t *testing.T) {
	hop, err := link.ParseConfig("delay=2ms,loss=2%")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []scheme.Kind{scheme.SRNACK, scheme.EC} {
		t.Run(kind.String(), func(t *testing.T) {
			ranks := newRing(t, 3, hop, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: kind}}, 256<<10)
			const elems = 300_000
			bufs := make([][]byte, len(ranks))
			for i := range bufs {
				bufs[i] = make([]byte, elems*4)
				fill(collective.Int32, bufs[i], i)
			}
			onAll(t, ranks, func(ctx context.Context, r *collective.Ring) error {
				return r.AllReduce(ctx, bufs[r.Rank()], collective.Int32)
			})
			for i := range bufs {
				checkSum(t, collective.Int32, bufs[i], len(ranks), 0, elems)
			}
		})
	}
}

func TestReduceScatterAllGatherBroadcast(t *testing.T) {
	ranks := newRing(t, 3, link.Config{}, reliability.ReceiverConfig{}, 32<<10)
	n := len(ranks)
	const elems = 50_001
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, elems*8)
		fill(collective.Int64, bufs[i], i)
	}
	parts := make([][]byte, n)
	onAll(t, ranks, func(ctx context.Context, r *collective.Ring) error {
		var err error
		parts[r.Rank()], err = r.ReduceScatter(ctx, bufs[r.Rank()], collective.Int64)
		return err
	})
	per := (elems + n - 1) / n
	for i := range n {
		from, to := i*per, min((i+1)*per, elems)
		if len(parts[i]) != (to-from)*8 {
			t.Fatalf("rank %d's part: %d bytes, want %d", i, len(parts[i]), (to-from)*8)
		}
		checkSum(t, collective.Int64, bufs[i], n, from, to)
	}

	const part = 40_000
	gather := make([][]byte, n)
	for i := range gather {
		gather[i] = make([]byte, n*part)
		for j := range part {
			gather[i][i*part+j] = byte(i*31 + j)
		}
	}
	onAll(t, ranks, func(ctx context.Context, r *collective.Ring) error { return r.AllGather(ctx, gather[r.Rank()]) })
	for i := range n {
		for src := range n {
			for j := 0; j < part; j += 997 {
				if got, want := gather[i][src*part+j], byte(src*31+j); got != want {
					t.Fatalf("rank %d, part %d, byte %d: %d, want %d", i, src, j, got, want)
				}
			}
		}
	}

	const root = 2
	bcast := make([][]byte, n)
	for i := range bcast {
		bcast[i] = make([]byte, 200_000)
	}
	for j := range bcast[root] {
		bcast[root][j] = byte(j * 7)
	}
	onAll(t, ranks, func(ctx context.Context, r *collective.Ring) error { return r.Broadcast(ctx, bcast[r.Rank()], root) })
	for i := range n {
		if string(bcast[i]) != string(bcast[root]) {
			t.Errorf("rank %d did not get root's buffer", i)
		}
	}
}

func TestMisuse(t *testing.T) {
	if _, err := collective.NewRing(3, 3, nil, nil, collective.Config{}); err == nil {
		t.Error("rank 3 of 3 accepted")
	}
	if _, err := collective.NewRing(0, 2, nil, nil, collective.Config{}); err == nil {
		t.Error("a ring of two without connections accepted")
	}
	solo, err := collective.NewRing(0, 1, nil, nil, collective.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := solo.AllReduce(context.Background(), make([]byte, 6), collective.Int32); err == nil {
		t.Error("6 bytes of int32 accepted")
	}
	if err := solo.Broadcast(context.Background(), make([]byte, 6), 1); err == nil {
		t.Error("a broadcast from rank 1 of 1 accepted")
	}
	buf := make([]byte, 8)
	fill(collective.Int32, buf, 0)
	if err := solo.AllReduce(context.Background(), buf, collective.Int32); err != nil {
		t.Fatal(err)
	}
	checkSum(t, collective.Int32, buf, 1, 0, 2)
}

// BenchmarkSum is the reduction kernel's rate per core beside memmove's
// (copy) over the same 1 MiB, in one run.
func BenchmarkSum(b *testing.B) {
	const size = 1 << 20
	dst, src := make([]byte, size), make([]byte, size)
	b.Run("memmove", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			copy(dst, src)
		}
	})
	for _, dt := range []collective.DataType{collective.Float32, collective.Float64, collective.Int32, collective.Int64} {
		b.Run(dt.String(), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				collective.Sum(dt, dst, src)
			}
		})
	}
}

// TestBroken: a collective that fails part-way (here its context ended)
// leaves the ring refusing further collectives with ErrBroken instead
// of exchanging transfers that no longer line up.
func TestBroken(t *testing.T) {
	ranks := newRing(t, 2, link.Config{}, reliability.ReceiverConfig{}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, r := range ranks {
		if err := r.AllReduce(ctx, make([]byte, 1<<16), collective.Int32); err == nil {
			t.Fatalf("rank %d: an Allreduce with an ended context succeeded", r.Rank())
		}
	}
	for _, r := range ranks {
		if err := r.AllGather(context.Background(), make([]byte, 64)); !errors.Is(err, collective.ErrBroken) {
			t.Errorf("rank %d after a failure: %v, want ErrBroken", r.Rank(), err)
		}
	}
}

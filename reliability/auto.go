package reliability

import (
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// choose is Auto's pick for a transfer of length bytes: the scheme and
// code the paper's models (reliability/model) predict to finish first on
// the link as measured, SR-NACK where they pick SR-RTO. Before the first
// loss sample it is SR-NACK, which
// costs nothing more than SR-RTO on a clean path and finds every loss a
// round trip after it on a lossy one (SR-RTO at 30 % loss took 3-5× as
// long for the first transfer).
func (e *Estimator) choose(length int) scheme.Scheme {
	if length == 0 {
		return scheme.Scheme{Kind: scheme.SRRTO}
	}
	if e.total == 0 {
		return scheme.Scheme{Kind: scheme.SRNACK}
	}
	link := model.Link{Bandwidth: e.Bandwidth(), RTT: e.RTT(), Loss: min(e.Loss(), model.MaxLoss), ChunkSize: e.cfg.ChunkSize}
	c, err := model.Choose(link, int64(length))
	if err != nil {
		return scheme.Scheme{Kind: scheme.SRRTO} // a link the models reject: the scheme without assumptions
	}
	if c.Scheme.Kind == scheme.SRRTO {
		// The model prefers SR-RTO to SR-NACK within its tolerance for
		// sparing the NACKs, and times its timeout from the round trip
		// of an empty path. Ours follows the smoothed round trip, which
		// a queue stretches: behind one, a lost chunk waits many round
		// trips for its timer where a NACK finds it in one (16 MiB over
		// 1 Gbit/s at 5 % loss: SR-RTO 434 ms, SR-NACK 203).
		return scheme.Scheme{Kind: scheme.SRNACK}
	}
	return c.Scheme
}

// ModelChoice is the plan's scheme as reliability/model takes it, with the
// model's default alpha.
func (p Plan) ModelChoice() model.Choice {
	return model.Choice{Scheme: p.Scheme, Alpha: model.DefaultAlpha}
}

// ModelLink is the link reliability/model sees for p's transfers over a
// path that loses packetLoss of its packets, at bandwidth bit/s with
// round trip rtt: the loss of p's chunks and, for SR plans of chunks of
// several packets, the loss of their repairs, which resend only the
// packets a chunk lacks (model.PacketRepairLoss). The loss is capped at
// model.MaxLoss.
func (p Plan) ModelLink(packetLoss, bandwidth float64, rtt time.Duration) (model.Link, error) {
	packets := max(1, p.ChunkSize/max(p.MTU, 1))
	loss, err := model.ChunkLoss(packetLoss, packets)
	if err != nil {
		return model.Link{}, err
	}
	l := model.Link{Bandwidth: bandwidth, RTT: rtt, Loss: min(loss, model.MaxLoss), ChunkSize: p.ChunkSize}
	if !p.Scheme.Coded() && packets > 1 && packets <= chunk.MaxPackets {
		repair, err := model.PacketRepairLoss(packetLoss, packets)
		if err != nil {
			return model.Link{}, err
		}
		l.RepairLoss = min(repair, model.MaxLoss)
	}
	return l, nil
}

package reliability

import (
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
)

// choose is Auto's pick for a transfer of length bytes: the scheme and
// code the paper's models (reliability/model) predict to finish first on
// the link as measured. Before the first loss sample the link looks
// lossless, which picks SR.
func (e *Estimator) choose(length int) (Scheme, ec.Params) {
	if length == 0 {
		return SRRTO, ec.Params{}
	}
	link := model.Link{Bandwidth: e.Bandwidth(), RTT: e.RTT(), Loss: min(e.Loss(), model.MaxLoss), ChunkSize: e.cfg.ChunkSize}
	c, err := model.Choose(link, int64(length))
	if err != nil {
		return SRRTO, ec.Params{} // a link the models reject: the scheme without assumptions
	}
	return fromModel(c)
}

// ModelChoice returns the model's description of the plan (the inverse
// of Auto's mapping), for predictions beside measurements. The model has
// no hybrid: Hybrid is described as EC of its code, which repairs no
// sooner, so its prediction bounds Hybrid's from above.
func (p Plan) ModelChoice() model.Choice {
	c := model.Choice{Scheme: model.SRRTO, Alpha: model.DefaultAlpha}
	switch p.Scheme {
	case SRNACK:
		c.Scheme = model.SRNACK
	case EC, Hybrid:
		c.Scheme, c.K, c.M = model.ECMDS, p.Code.K, p.Code.M
		if p.Code.Kind == ec.XOR {
			c.Scheme = model.ECXOR
		}
	}
	return c
}

// fromModel maps a model choice to a scheme and code.
func fromModel(c model.Choice) (Scheme, ec.Params) {
	switch c.Scheme {
	case model.SRNACK:
		return SRNACK, ec.Params{}
	case model.ECMDS:
		return EC, ec.Params{Kind: ec.MDS, K: c.K, M: c.M}
	case model.ECXOR:
		return EC, ec.Params{Kind: ec.XOR, K: c.K, M: c.M}
	}
	return SRRTO, ec.Params{}
}

// The schemes of a run as sdr sim's -schemes names them, and the labels
// rows, tables and plots carry.

package simreport

import (
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
)

// Scheme is one scheme of the run as the user named it.
type Scheme struct {
	label  string
	scheme reliability.Scheme
	code   ec.Params
}

// ParseScheme parses a scheme as every command does
// (reliability.ParseSchemeCode); ec and hybrid without a code run
// MDS(32,8).
func ParseScheme(s string) (Scheme, error) {
	scheme, code, err := reliability.ParseSchemeCode(s)
	if err != nil {
		return Scheme{}, err
	}
	if scheme == reliability.EC || scheme == reliability.Hybrid {
		if code.K == 0 {
			code = reliability.DefaultCode
		}
		return Scheme{label: scheme.String() + "-" + code.String(), scheme: scheme, code: code}, nil
	}
	return Scheme{label: scheme.String(), scheme: scheme}, nil
}

// simSchemeLabel names a resolved scheme as the -schemes flag does.
func simSchemeLabel(s Scheme) string {
	switch s.scheme {
	case reliability.EC:
		return "ec-" + s.code.String()
	case reliability.Hybrid:
		return "hybrid-" + s.code.String()
	}
	return s.scheme.String()
}

// simPaperFour are the labels of the paper's comparison.
var simPaperFour = []string{"sr-rto", "sr-nack", "ec-xor(32,8)", "ec-mds(32,8)"}

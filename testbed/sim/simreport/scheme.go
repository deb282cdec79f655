// The schemes of a run as sdr sim's -schemes names them; rows, tables and
// plots label them as scheme.Scheme prints them.

package simreport

import "github.com/sdr-rdma/sdr/reliability/scheme"

// ParseScheme parses a scheme as every command does (scheme.Parse); ec
// and hybrid without a code run scheme.DefaultCode, MDS(32,8).
func ParseScheme(s string) (scheme.Scheme, error) {
	sc, err := scheme.Parse(s)
	return sc.WithDefaultCode(), err
}

// simPaperFour are the labels of the paper's comparison.
var simPaperFour = []string{"sr-rto", "sr-nack", "ec-xor(32,8)", "ec-mds(32,8)"}

package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestCompare runs a small comparison on a lossy link: the reliability
// schemes deliver every message exactly, raw UC cannot (a 64-packet
// message at 5 % loss almost never arrives whole), and the table and
// JSON carry the rows.
func TestCompare(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"compare", "-s", "65536", "-n", "3", "-loss", "0.05", "-rtt", "4ms", "-c", "4096",
		"-schemes", "uc,sr-rto,sr-nack,ec,hybrid,auto", "-code", "xor(8,4)", "-json"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res compareResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(res.Rows) != 6 || res.LinkGbps <= 0 {
		t.Fatalf("%d rows, link %v Gbit/s: %s", len(res.Rows), res.LinkGbps, out.String())
	}
	for _, row := range res.Rows {
		if row.Corrupt != 0 || row.Transfers != 3 {
			t.Errorf("%s: %+v", row.Scheme, row)
		}
		if row.Scheme == "uc" {
			if row.Completed == 3 {
				t.Errorf("uc completed every message through 5 %% loss of 64-packet messages: %+v", row)
			}
			continue
		}
		if row.Completed != 3 || row.MeanMs <= 0 {
			t.Errorf("%s completed %d/3 (mean %v ms)", row.Scheme, row.Completed, row.MeanMs)
		}
	}
	out.Reset()
	if code := run([]string{"compare", "-s", "8192", "-n", "1", "-loss", "0", "-rtt", "2ms", "-schemes", "sr-rto"}, &out, &errOut); code != exitOK ||
		!bytes.Contains(out.Bytes(), []byte("sr-rto    1/1")) {
		t.Fatalf("exit %d, table:\n%s", code, out.String())
	}
	if code := run([]string{"compare", "-schemes", "tcp"}, &out, &errOut); code != exitUsage {
		t.Fatalf("unknown scheme: exit %d", code)
	}
}

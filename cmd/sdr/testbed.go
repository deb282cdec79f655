package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/sdr-rdma/sdr/testbed"
)

const testbedUsage = `usage: sdr testbed clean

clean   delete every network namespace the testbed created (names starting
        with "` + testbed.NamePrefix + `") that a crashed run left behind in
        ` + testbed.RunDir + `, also those whose mount a later bind mount of
        the directory hides; their veth links and XDP programs go with them.
        Needs root.
`

func runTestbed(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sdr testbed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, testbedUsage) }
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) != "clean" {
		fs.Usage()
		return exitUsage
	}
	deleted, err := testbed.CleanupLeftovers()
	for _, name := range deleted {
		fmt.Fprintf(stdout, "deleted %s\n", name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sdr testbed clean: %v\n", err)
		return exitFault
	}
	fmt.Fprintf(stdout, "%d leftover namespaces deleted\n", len(deleted))
	return exitOK
}

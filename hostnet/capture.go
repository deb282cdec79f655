package hostnet

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// StartCapture runs tcpdump in ns on ifname, writing frames that match
// filter (a pcap filter expression) to path, and returns once tcpdump
// listens. The returned stop ends it; it waits a second first, because
// tcpdump reads the kernel's capture ring behind the traffic, lags on a
// busy machine, and drops what it has not read when interrupted.
func StartCapture(ns *Namespace, ifname, path, filter string) (stop func(), err error) {
	args := []string{"netns", "exec", ns.Name, "tcpdump", "-i", ifname, "-B", "65536", "-U", "-n", "-w", path}
	cmd := exec.Command("ip", append(args, strings.Fields(filter)...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("hostnet: tcpdump: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				close(ready)
				io.Copy(io.Discard, stderr)
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("hostnet: tcpdump on %s/%s did not start", ns.Name, ifname)
	}
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		time.Sleep(time.Second)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}, nil
}

package collective

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Launch is what a launcher tells a rank: its place and where rank 0
// coordinates.
type Launch struct {
	Rank, Size int
	// CoordinatorHost is rank 0's host ("" when the launcher does not
	// say: the caller's flag or default decides).
	CoordinatorHost string
	// Launcher names the environment it came from.
	Launcher string
}

// FromEnv reads a rank's launch from its launcher's environment: Slurm
// (SLURM_PROCID, SLURM_NTASKS, rank 0 on the first host of
// SLURM_STEP_NODELIST or SLURM_JOB_NODELIST), Open MPI
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), PMI (PMI_RANK, PMI_SIZE)
// or torchrun's convention (RANK, WORLD_SIZE, MASTER_ADDR). ok is false
// when none is set.
func FromEnv(getenv func(string) string) (l Launch, ok bool, err error) {
	for _, v := range []struct{ launcher, rank, size, host string }{
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", ""},
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", ""},
		{"pmi", "PMI_RANK", "PMI_SIZE", ""},
		{"torchrun", "RANK", "WORLD_SIZE", "MASTER_ADDR"},
	} {
		rank, size := getenv(v.rank), getenv(v.size)
		if rank == "" || size == "" {
			continue
		}
		l = Launch{Launcher: v.launcher}
		if l.Rank, err = strconv.Atoi(rank); err != nil {
			return l, false, fmt.Errorf("collective: %s=%q: %w", v.rank, rank, err)
		}
		if l.Size, err = strconv.Atoi(size); err != nil {
			return l, false, fmt.Errorf("collective: %s=%q: %w", v.size, size, err)
		}
		if l.Rank < 0 || l.Rank >= l.Size {
			return l, false, fmt.Errorf("collective: %s: rank %d of %d", v.launcher, l.Rank, l.Size)
		}
		switch {
		case v.host != "":
			l.CoordinatorHost = getenv(v.host)
		case v.launcher == "slurm":
			nodes := getenv("SLURM_STEP_NODELIST")
			if nodes == "" {
				nodes = getenv("SLURM_JOB_NODELIST")
			}
			if l.CoordinatorHost, err = FirstHost(nodes); err != nil {
				return l, false, err
			}
		}
		return l, true, nil
	}
	return Launch{}, false, nil
}

// FirstHost returns the first host of a Slurm hostlist: "node[07-10,12],gpu1"
// → "node07", "a,b" → "a", "" → "".
func FirstHost(list string) (string, error) {
	if list == "" {
		return "", nil
	}
	depth, end := 0, len(list)
	for i, c := range list {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 && end == len(list) {
				end = i
			}
		}
	}
	first := list[:end]
	open := strings.IndexByte(first, '[')
	if open < 0 {
		return first, nil
	}
	closing := strings.IndexByte(first, ']')
	if closing < open {
		return "", fmt.Errorf("collective: hostlist %q: unbalanced brackets", list)
	}
	ranges := first[open+1 : closing]
	start, _, _ := strings.Cut(strings.SplitN(ranges, ",", 2)[0], "-")
	if start == "" {
		return "", fmt.Errorf("collective: hostlist %q: empty range", list)
	}
	return first[:open] + start + first[closing+1:], nil
}

// CoordinatorAddr joins a coordinator host and port (an IPv6 host gets
// its brackets).
func CoordinatorAddr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

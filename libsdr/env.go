package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// env is the SDK's environment, read when a context is created.
type env struct {
	Generations int // SDR_QP_NUM_GENERATIONS (0: the SDK's default)
	// Transport is SDR_USE_UC_QP: unset (the SDK's default, RC), UC (1)
	// or RC (0).
	Transport transport
}

// transport is the channel QPs' transport SDR_USE_UC_QP asks for.
type transport uint8

const (
	transportDefault transport = iota
	transportUC
	transportRC
)

// channelRC reports whether a context on the resolved device name carries
// its packets on RC channel QPs: as SDR_USE_UC_QP says, else the SDK's
// default, RC — its public sdr_write_bw.c reports "SDR packet-level
// transport: RC" unless --uc sets SDR_USE_UC_QP=1 — except on dpa:,
// whose backend has UC channels only (an explicit 0 is refused there).
func (e env) channelRC(name string) bool {
	switch e.Transport {
	case transportUC:
		return false
	case transportRC:
		return true
	}
	return !strings.HasPrefix(name, "dpa:")
}

// envAccepted are the SDK's variables that have no effect on our
// backends; they are checked like the others so that a typo'd value
// does not pass silently.
var envAccepted = []string{
	"SDR_RECV_CTX_N_ROOT_MKEYS", "SDR_RECV_CTX_ROOT_MKEY_ENTRIES_FACTOR",
	"SDR_NO_RC_RNR_RETRY", "SDR_SEND_CTX_SWR_BATCH_SIZE",
	"SDR_DPA_TX_OFFLOADING_ENABLE", "SDR_DPA_TX_NUM_WORKERS",
	"SDR_DPA_RX_PROFILE_STATS_REPORT", "SDR_DPA_TX_PROFILE_STATS_REPORT",
}

// readEnv parses the SDK's variables from getenv.
func readEnv(getenv func(string) string) (env, error) {
	var e env
	num := func(name string) (int, bool, error) {
		v := getenv(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("libsdr: %s=%q: want a non-negative integer", name, v)
		}
		return n, true, nil
	}
	n, set, err := num("SDR_QP_NUM_GENERATIONS")
	if err != nil {
		return e, err
	}
	if set && n == 0 {
		return e, errors.New("libsdr: SDR_QP_NUM_GENERATIONS=0: a QP needs at least one generation")
	}
	e.Generations = n
	if n, set, err = num("SDR_USE_UC_QP"); err != nil {
		return e, err
	}
	switch {
	case set && n == 0:
		e.Transport = transportRC
	case set:
		e.Transport = transportUC
	}
	for _, name := range envAccepted {
		if _, _, err := num(name); err != nil {
			return e, err
		}
	}
	return e, nil
}

package model

import (
	"fmt"
	"time"
)

// RingEstimate bounds a ring Allreduce's completion time.
type RingEstimate struct {
	// Steps is the number of dependent steps, 2·(ranks − 1): ranks − 1 of
	// reduce-scatter, then ranks − 1 of allgather.
	Steps int
	// Step is the model of one step's message of ⌈bytes/ranks⌉ bytes.
	Step Estimate
	// MeanLower is Steps·Step.Mean, a lower bound of the mean: the
	// Allreduce ends after the last step of every rank, hence after the
	// chain of steps one block travels, whose transfers use different links
	// and are independent, so its expected length is the sum of the steps'
	// means.
	MeanLower time.Duration
	// P999Upper bounds the 99.9th percentile from above: with probability
	// ≥ 0.999 every one of the Steps·ranks transfers ends within its
	// per-transfer quantile at level 1 − 0.001/(Steps·ranks) (union bound),
	// and then no step lasts longer than that quantile.
	P999Upper time.Duration
}

// RingAllreduce bounds the completion time of a ring Allreduce of bytes
// over ranks ranks, every neighbour link being l and every step's message
// using scheme c (Appendix C's bound: the step count times the per-message
// model). It costs two model evaluations.
func RingAllreduce(l Link, bytes int64, ranks int, c Choice) (RingEstimate, error) {
	if ranks < 2 {
		return RingEstimate{}, fmt.Errorf("model: ring of %d ranks needs at least 2: %w", ranks, ErrInvalidArgument)
	}
	if bytes <= 0 {
		return RingEstimate{}, fmt.Errorf("model: Allreduce of %d bytes must be positive: %w", bytes, ErrInvalidArgument)
	}
	block := (bytes-1)/int64(ranks) + 1
	step, err := Predict(l, block, c)
	if err != nil {
		return RingEstimate{}, err
	}
	steps := 2 * (ranks - 1)
	transfers := float64(steps) * float64(ranks)
	level := 1 - 0.001/transfers
	upper, err := Quantile(l, block, c, level)
	if err != nil {
		return RingEstimate{}, err
	}
	return RingEstimate{
		Steps:     steps,
		Step:      step,
		MeanLower: seconds(float64(steps) * step.Mean.Seconds()),
		P999Upper: seconds(float64(steps) * upper.Seconds()),
	}, nil
}

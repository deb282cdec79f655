package stacks

import (
	"testing"
	"time"
)

// TestHas finds a goroutine blocked in a function of this test and does
// not find a function no goroutine runs.
func TestHas(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go blockedHere(started, release)
	<-started
	for deadline := time.Now().Add(5 * time.Second); !Has("stacks.blockedHere"); {
		if time.Now().After(deadline) { // it is in the receive, or on its way
			t.Fatal("Has never saw the blocked goroutine")
		}
	}
	if Has("stacks.notAFunctionAnyGoroutineRuns") {
		t.Error("found a function nobody runs")
	}
}

func blockedHere(started, release chan struct{}) {
	close(started)
	<-release
}

// Package stacks lets a test fence on another goroutine having reached a
// function (blocked or spinning in it) instead of sleeping for a while.
package stacks

import (
	"bytes"
	"runtime"
	"sync"
)

var (
	mu  sync.Mutex
	buf = make([]byte, 1<<20) // every goroutine's stack trace (guarded by mu)
)

// Has reports whether some goroutine's stack holds fn, a function name as
// stack traces print it (e.g. "engine.(*Slot).drain"). It formats every
// goroutine's stack: for tests, not for a data path.
func Has(fn string) bool {
	mu.Lock()
	defer mu.Unlock()
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn))
}

package main

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// errHandle is the error of a call given a handle the library did not
// make or already released.
var errHandle = errors.New("libsdr: not a valid handle (never made, or released)")

// objects maps the opaque pointers C holds to the Go objects behind
// them. C never sees a Go pointer: it gets a small integer dressed as a
// pointer, which the table validates on every call, so a stale or forged
// handle is an error rather than a crash. Safe for concurrent use: a
// sync.Map, read on every call, written when objects come and go.
type objects struct {
	m    sync.Map // uintptr → object
	next atomic.Uintptr
}

// object is anything a handle names; owner is the context it belongs
// to (nil for a context), so that closing a context drops its objects.
type object interface{ owner() *contextObj }

// add registers o and returns its handle (never 0).
func (t *objects) add(o object) uintptr {
	id := t.next.Add(1)
	t.m.Store(id, o)
	return id
}

// drop releases a handle; later lookups fail.
func (t *objects) drop(id uintptr) { t.m.Delete(id) }

// take releases handle id and reports whether this call released it: of
// concurrent releases of one handle exactly one proceeds to clean up.
func (t *objects) take(id uintptr) bool {
	_, ok := t.m.LoadAndDelete(id)
	return ok
}

// releaser is an object with something to undo when its handle goes
// with its QP or context (a receive's pinned bitmap).
type releaser interface{ release() }

// dropWhere releases every handle whose object match selects, undoing
// what each one this call released holds.
func (t *objects) dropWhere(match func(object) bool) {
	t.m.Range(func(k, v any) bool {
		o := v.(object)
		if match(o) && t.take(k.(uintptr)) {
			if r, ok := o.(releaser); ok {
				r.release()
			}
		}
		return true
	})
}

// dropOwned releases every handle owned by c.
func (t *objects) dropOwned(c *contextObj) {
	t.dropWhere(func(o object) bool { return o.owner() == c })
}

// lookup returns the object of handle id as a T.
func lookup[T object](t *objects, id uintptr, what string) (T, error) {
	var zero T
	v, ok := t.m.Load(id)
	if !ok {
		return zero, fmt.Errorf("%s %#x: %w", what, id, errHandle)
	}
	o, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("%s %#x names another kind of object: %w", what, id, errHandle)
	}
	return o, nil
}

// lastError is the message of the last failed call, for sdr_last_error.
var lastError struct {
	sync.Mutex
	msg string
}

// fail records err for sdr_last_error.
func fail(err error) {
	lastError.Lock()
	lastError.msg = err.Error()
	lastError.Unlock()
}

// lastErrorMessage returns the recorded message.
func lastErrorMessage() string {
	lastError.Lock()
	defer lastError.Unlock()
	return lastError.msg
}

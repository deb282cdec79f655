package emunic

import (
	"errors"
	"fmt"
)

// Errors returned by the verbs-like API. Test with errors.Is.
var (
	// ErrInvalidState means the QP is not in a state that allows the call
	// (posting sends before RTS, an illegal state transition).
	ErrInvalidState = errors.New("emunic: invalid QP state")
	// ErrInvalidArgument means an attribute or work request is malformed.
	ErrInvalidArgument = errors.New("emunic: invalid argument")
	// ErrMTU means a path MTU above the port's active MTU: its frames
	// would not fit the interface's MTU. It wraps ErrInvalidArgument.
	ErrMTU = fmt.Errorf("%w: path MTU above the port's active MTU", ErrInvalidArgument)
	// ErrQueueFull means a send or receive queue has no room; retry later.
	ErrQueueFull = errors.New("emunic: queue full")
	// ErrInvalidKey means an lkey names no live memory region of this
	// device, or the region lacks the access the work request needs.
	ErrInvalidKey = errors.New("emunic: invalid local key")
	// ErrOutOfBounds means a scatter/gather entry lies outside its region.
	ErrOutOfBounds = errors.New("emunic: address out of bounds")
	// ErrClosed means the device was closed.
	ErrClosed = errors.New("emunic: device closed")
	// ErrResourceBusy means a resource is still in use (an MR inside an
	// indirect MR, a PD with live MRs or QPs).
	ErrResourceBusy = errors.New("emunic: resource busy")
)

package xsk_test

import "syscall"

var interruptSignal = syscall.SIGINT

// The bring-up probe, unchanged, compiled into this package by cgo.
#include "../device/probe.c"

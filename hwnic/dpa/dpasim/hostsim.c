// The FlexIO shim the handler runs on, compiled into this package by cgo.
#include "../device/hostsim/hostsim.c"

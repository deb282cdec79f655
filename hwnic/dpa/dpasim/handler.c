// The device's RX handler, unchanged, compiled into this package by cgo.
#include "../device/handler.c"

// Package device holds the C that runs on the BlueField-3 DPA and the Go
// tests that prove it on the host: engine.h (the per-packet engine, no
// FlexIO dependency), handler.c (the RX event handler over mlx5 CQEs,
// written against the FlexIO device API), mlx5.h (the CQE and WQE fields
// it uses) and hostsim/ (plain C implementations of exactly the
// flexio_dev_* calls the handler makes, so that gcc compiles the handler
// unchanged). The tests compile the C with gcc, run the engine against
// sdr/engine's vectors and the handler under ThreadSanitizer; package
// hwnic/dpa/dpasim links the same source into an sdr backend. There is
// no Go API here.
package device

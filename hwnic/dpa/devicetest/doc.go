// Package devicetest proves the C that runs on the BlueField-3 DPA, kept
// in ../device (no Go there: engine.h, the per-packet engine without a
// FlexIO dependency; handler.c, the RX event handler over mlx5 CQEs,
// written against the FlexIO device API; mlx5.h, the CQE and WQE fields
// it uses; sdr_rx.h, what host and handler share; hostsim/, plain C
// implementations of exactly the flexio_dev_* calls the handler makes,
// so that gcc compiles the handler unchanged). Its tests compile that C
// with gcc and run the engine against sdr/engine's vectors and the
// handler's own tests, also under ThreadSanitizer; package
// hwnic/dpa/dpasim links the same source into an sdr backend. There is
// no Go API here.
package devicetest

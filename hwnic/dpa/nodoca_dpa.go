//go:build dpa && !doca

package dpa

// Without the doca tag the host side compiles against flexio_decl.h:
// enough to type-check it (go vet -tags dpa, as CI does), never enough to
// link it. A binary whose structures were laid out by hand-written
// declarations and passed to the installed libflexio would break where
// the two differ, silently; so this build refers to a symbol that
// nothing defines, and the linker stops it with the symbol's name, which
// says what to do.

/*
extern void sdr_dpa_link_needs_build_tag_doca_and_pkg_config_libflexio(void);
*/
import "C"

func init() { C.sdr_dpa_link_needs_build_tag_doca_and_pkg_config_libflexio() }

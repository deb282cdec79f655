//go:build dpa && doca

package dpa

// The host side against an installed DOCA: the include and library
// paths of the FlexIO SDK come from pkg-config, and SDR_DPA_DOCA makes
// flexio_api.h take DOCA's libflexio/flexio.h (and fail without it)
// instead of flexio_decl.h. cgo merges these flags with the other
// preambles of the package.
//
// The module name is DOCA's own: its samples declare
// dependency('libflexio') for the FlexIO host library, and map the
// FlexIO driver to the pkg-config name libflexio
// (github.com/NVIDIA-DOCA/doca-samples 3.3.0,
// samples/doca_dpa/dpa_kernel_launch/meson.build.public,
// applications/meson.build.public). DOCA installs libflexio.pc under
// /opt/mellanox/flexio/lib/pkgconfig, which is not on pkg-config's
// default path: `make dpa` checks for it and says so.

/*
#cgo pkg-config: libflexio
#cgo CFLAGS: -DSDR_DPA_DOCA
*/
import "C"

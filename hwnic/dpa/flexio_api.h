/*
 * flexio_api.h — the FlexIO host API as host.h, and the layout test
 * (flexio_layout_test.go), see it. Exactly one source, chosen by the
 * build, never by what happens to be on the include path:
 *
 *   SDR_DPA_DOCA defined (the `doca` build tag, doca_dpa.go: include and
 *   library paths from pkg-config's libflexio): the installed DOCA's
 *   libflexio/flexio.h, and an error if the compiler cannot find it;
 *
 *   otherwise (CI, `go vet -tags dpa`): flexio_decl.h, the hand-written
 *   declarations, which nodoca_dpa.go keeps from being linked.
 *
 * A silent fallback would let a build on a BlueField link libflexio
 * against hand-written struct layouts, which drift between DOCA releases
 * (flexio_cq_attr among them); the layout test compares the two wherever
 * pkg-config finds libflexio.
 */
#ifndef SDR_DPA_FLEXIO_API_H
#define SDR_DPA_FLEXIO_API_H

#ifdef SDR_DPA_DOCA
#if !__has_include(<libflexio/flexio.h>)
#error "SDR_DPA_DOCA (build tag doca) but no <libflexio/flexio.h>: pkg-config's libflexio must give DOCA's include path (PKG_CONFIG_PATH=/opt/mellanox/flexio/lib/pkgconfig)"
#endif
#include <libflexio/flexio_ver.h>
/* The FlexIO host API generation flexio_decl.h and host.h are written
 * for: 24.10 (DOCA 2.9), as handler.c states FLEXIO_DEV_VER_USED for the
 * device API. A release that no longer offers it fails to compile. */
#define FLEXIO_VER_USED FLEXIO_VER(24, 10, 0)
/* FlexIO marks host calls experimental (deprecated unless this is
 * defined); DOCA's own DPA applications build their host code with it
 * (doca-samples 3.3.0, applications/dpa_all_to_all/build_device_code.sh,
 * HOST_CC_FLAGS), as handler.c defines FLEXIO_DEV_ALLOW_EXPERIMENTAL_API
 * for the device calls. */
#define FLEXIO_ALLOW_EXPERIMENTAL_API
#include <libflexio/flexio.h>
#else
#include "flexio_decl.h"
#endif

#endif

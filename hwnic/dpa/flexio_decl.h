/*
 * flexio_decl.h — the FlexIO host calls and types hwnic/dpa uses, as
 * declared in NVIDIA's public DOCA FlexIO SDK (libflexio/flexio.h), for
 * machines without DOCA: it lets `go vet -tags dpa` type-check the host
 * side in CI. Only opaque types and the functions called are declared;
 * a DOCA installation's own header is used whenever it is present.
 */
#ifndef SDR_FLEXIO_DECL_H
#define SDR_FLEXIO_DECL_H

#include <infiniband/verbs.h>

typedef enum {
	FLEXIO_STATUS_SUCCESS = 0,
	FLEXIO_STATUS_FAILED = 1,
	FLEXIO_STATUS_TIMEOUT = 2,
	FLEXIO_STATUS_FATAL_ERR = 3,
} flexio_status;

struct flexio_process;
struct flexio_window;
struct flexio_app;

struct flexio_process_attr {
	struct ibv_pd *pd;
	int en_pcc;
};

flexio_status flexio_process_create(struct ibv_context *ibv_ctx, struct flexio_app *app,
				    const struct flexio_process_attr *process_attr, struct flexio_process **process_ptr);
flexio_status flexio_process_destroy(struct flexio_process *process);
flexio_status flexio_window_create(struct flexio_process *process, struct ibv_pd *pd, struct flexio_window **window);
flexio_status flexio_window_destroy(struct flexio_window *window);
uint32_t flexio_window_get_id(struct flexio_window *window);

#endif

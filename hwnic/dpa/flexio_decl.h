/*
 * flexio_decl.h — the FlexIO host calls and types hwnic/dpa uses, for
 * machines without DOCA: it lets `go vet -tags dpa` type-check the host
 * side in CI. A build against DOCA (the doca tag) uses the installed
 * libflexio/flexio.h instead and never this file (flexio_api.h);
 * flexio_layout_test.go compares the two wherever pkg-config finds
 * libflexio.
 *
 * Source: NVIDIA DOCA FlexIO SDK host API reference (libflexio/flexio.h,
 * "Flex IO SDK host API for DPA programs", DOCA 2.9 / FlexIO 24.10).
 * Every declaration below is that reference's, with its signature and
 * its structures' fields in their documented order; nothing is added
 * that the reference does not document. Only what hwnic/dpa calls is
 * declared.
 */
#ifndef SDR_FLEXIO_DECL_H
#define SDR_FLEXIO_DECL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

typedef uint64_t flexio_uintptr_t;

typedef enum {
	FLEXIO_STATUS_SUCCESS = 0,
	FLEXIO_STATUS_FAILED = 1,
	FLEXIO_STATUS_TIMEOUT = 2,
	FLEXIO_STATUS_FATAL_ERR = 3,
} flexio_status;

/* Element types for Flex IO CQ. */
enum {
	FLEXIO_CQ_ELEMENT_TYPE_DPA_THREAD = 0x0,
	FLEXIO_CQ_ELEMENT_TYPE_EXT_EQ = 0x2,
	FLEXIO_CQ_ELEMENT_TYPE_NON_DPA_CQ = 0x8,
	FLEXIO_CQ_ELEMENT_TYPE_DPA_MSIX_EMULATED_CQ = 0x9,
};

enum flexio_cqe_comp_type {
	FLEXIO_CQE_COMP_NONE = 0x0,
	FLEXIO_CQE_COMP_BASIC = 0x1,
	FLEXIO_CQE_COMP_ENH = 0x2,
};

enum flexio_cq_period_mode {
	FLEXIO_CQ_PERIOD_MODE_EVENT = 0x0,
	FLEXIO_CQ_PERIOD_MODE_CQE = 0x1,
};

enum flexio_memtype {
	FLEXIO_MEMTYPE_DPA = 0,
	FLEXIO_MEMTYPE_HOST = 1,
};

enum flexio_affinity_type {
	FLEXIO_AFFINITY_NONE = 0,
	FLEXIO_AFFINITY_STRICT,
	FLEXIO_AFFINITY_GROUP,
};

typedef void(flexio_func_t)(void);

struct flexio_process;
struct flexio_window;
struct flexio_event_handler;
struct flexio_thread;
struct flexio_cq;
struct flexio_uar;
struct flexio_app;

struct flexio_qmem {
	enum flexio_memtype memtype;
	union {
		flexio_uintptr_t daddr;
		uint64_t humem_offset;
	};
	uint32_t umem_id;
};

struct flexio_heap_mem_info {
	uint64_t base_addr;
	size_t size;
	size_t requested;
	size_t allocated;
};

struct flexio_cq_attr {
	uint8_t log_cq_depth;
	uint8_t element_type;
	union {
		uint32_t emulated_eqn;
		struct flexio_thread *thread;
	};
	uint32_t uar_id;
	void *uar_base_addr;
	enum flexio_cqe_comp_type cqe_comp_type;
	enum flexio_cq_period_mode cq_period_mode;
	uint16_t cq_period;
	uint16_t cq_max_count;
	bool no_arm;
	bool cc;
	uint8_t overrun_ignore;
	uint8_t always_armed;
	struct flexio_qmem cq_ring_qmem;
	flexio_uintptr_t cq_dbr_daddr;
};

struct flexio_process_attr {
	struct ibv_pd *pd;
	int en_pcc;
};

struct flexio_affinity {
	enum flexio_affinity_type type;
	uint32_t id;
};

struct flexio_event_handler_attr {
	flexio_func_t *host_stub_func;
	int continuable;
	uint64_t arg;
	flexio_uintptr_t thread_local_storage_daddr;
	struct flexio_affinity affinity;
};

flexio_status flexio_process_create(struct ibv_context *ibv_ctx, struct flexio_app *app,
				    const struct flexio_process_attr *process_attr, struct flexio_process **process_ptr);
flexio_status flexio_process_destroy(struct flexio_process *process);
flexio_status flexio_process_mem_info_get(const struct flexio_process *process, struct flexio_heap_mem_info *info);
uint32_t flexio_process_get_dumem_id(struct flexio_process *process);
struct flexio_uar *flexio_process_get_uar(struct flexio_process *process);
uint32_t flexio_uar_get_id(struct flexio_uar *uar);

flexio_status flexio_window_create(struct flexio_process *process, struct ibv_pd *pd, struct flexio_window **window);
flexio_status flexio_window_destroy(struct flexio_window *window);
uint32_t flexio_window_get_id(struct flexio_window *window);

flexio_status flexio_process_call(struct flexio_process *process, flexio_func_t *host_func, uint64_t *func_ret, ...);

flexio_status flexio_buf_dev_alloc(struct flexio_process *process, size_t buff_bsize, flexio_uintptr_t *dest_daddr_p);
flexio_status flexio_buf_dev_free(struct flexio_process *process, flexio_uintptr_t daddr);
flexio_status flexio_host2dev_memcpy(struct flexio_process *process, void *src_haddr, size_t buff_bsize,
				     flexio_uintptr_t dest_daddr);

flexio_status flexio_cq_create(struct flexio_process *process, struct ibv_context *ibv_ctx,
			       const struct flexio_cq_attr *fattr, struct flexio_cq **cq);
flexio_status flexio_cq_destroy(struct flexio_cq *cq);
uint32_t flexio_cq_get_cq_num(struct flexio_cq *cq);

flexio_status flexio_event_handler_create(struct flexio_process *process, struct flexio_event_handler_attr *fattr,
					  struct flexio_event_handler **event_handler_ptr);
flexio_status flexio_event_handler_destroy(struct flexio_event_handler *event_handler);
flexio_status flexio_event_handler_run(struct flexio_event_handler *event_handler, uint64_t user_arg);
struct flexio_thread *flexio_event_handler_get_thread(struct flexio_event_handler *event_handler);

#endif

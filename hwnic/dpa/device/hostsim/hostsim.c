/*
 * hostsim.c — plain C implementations of the FlexIO device calls the SDR
 * handler uses, over host memory (see hostsim.h).
 */
#include "hostsim.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>

#include <dpaintrin.h>
#include <libflexio-dev/flexio_dev_queue_access.h>

#define HOSTSIM_WINDOWS 4096
#define HOSTSIM_WINDOW_IDS 16

struct window {
	uint32_t mkey;
	uint64_t base, len;
};

static pthread_mutex_t windows_mu = PTHREAD_MUTEX_INITIALIZER;
static struct window windows[HOSTSIM_WINDOWS];

struct flexio_dev_thread_ctx {
	jmp_buf exit;
	struct window window[FLEXIO_DEV_WINDOW_ENTITY_NUM]; /* per entity; len 0: not configured */
	int armed;
	uint32_t arm_ci, arm_cqn;
};

struct hostsim_thread {
	struct flexio_dev_thread_ctx ctx;
	flexio_dev_event_handler_t *fn;
	uint64_t arg;
	int finished;
};

static __thread struct hostsim_thread *running;

struct hostsim_thread *hostsim_thread_create(flexio_dev_event_handler_t *fn, uint64_t arg)
{
	struct hostsim_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->fn = fn;
	t->arg = arg;
	return t;
}

void hostsim_thread_destroy(struct hostsim_thread *t) { free(t); }

enum hostsim_exit hostsim_thread_run(struct hostsim_thread *t)
{
	if (t->finished)
		return HOSTSIM_FINISHED;
	running = t;
	t->ctx.armed = 0;
	/* A thread's window configuration does not survive its run. */
	for (int e = 0; e < FLEXIO_DEV_WINDOW_ENTITY_NUM; e++)
		t->ctx.window[e] = (struct window){0};
	int how = setjmp(t->ctx.exit);
	if (how == 0) {
		t->fn(t->arg);
		how = HOSTSIM_FINISHED; /* returned without leaving through the API */
	}
	running = NULL;
	if (how == HOSTSIM_FINISHED)
		t->finished = 1;
	return (enum hostsim_exit)how;
}

int hostsim_thread_armed(struct hostsim_thread *t, uint32_t *ci, uint32_t *cqn)
{
	int armed = t->ctx.armed;
	*ci = t->ctx.arm_ci;
	*cqn = t->ctx.arm_cqn;
	t->ctx.armed = 0;
	return armed;
}

int hostsim_window_register(uint32_t mkey, uint64_t base, uint64_t len)
{
	int rc = -1;
	pthread_mutex_lock(&windows_mu);
	for (int i = 0; i < HOSTSIM_WINDOWS; i++) {
		if (windows[i].len == 0) {
			windows[i] = (struct window){mkey, base, len};
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&windows_mu);
	return len == 0 ? -1 : rc;
}

void hostsim_window_unregister(uint32_t mkey)
{
	pthread_mutex_lock(&windows_mu);
	for (int i = 0; i < HOSTSIM_WINDOWS; i++)
		if (windows[i].mkey == mkey)
			windows[i] = (struct window){0};
	pthread_mutex_unlock(&windows_mu);
}

int flexio_dev_get_thread_ctx(struct flexio_dev_thread_ctx **dtctx)
{
	if (!running)
		return -1;
	*dtctx = &running->ctx;
	return 0;
}

flexio_dev_status_t flexio_dev_multi_window_config(enum flexio_window_entity e, uint16_t id, uint32_t mkey)
{
	if (!running || (unsigned)e >= FLEXIO_DEV_WINDOW_ENTITY_NUM || id >= HOSTSIM_WINDOW_IDS)
		return FLEXIO_DEV_STATUS_FAILED;
	struct flexio_dev_thread_ctx *dtctx = &running->ctx;
	flexio_dev_status_t st = FLEXIO_DEV_STATUS_FAILED;
	pthread_mutex_lock(&windows_mu);
	for (int i = 0; i < HOSTSIM_WINDOWS; i++) {
		if (windows[i].len != 0 && windows[i].mkey == mkey) {
			dtctx->window[e] = windows[i];
			st = FLEXIO_DEV_STATUS_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&windows_mu);
	return st;
}

flexio_dev_status_t flexio_dev_multi_window_ptr_acquire(enum flexio_window_entity e, uint64_t haddr,
							flexio_uintptr_t *daddr)
{
	if (!running || (unsigned)e >= FLEXIO_DEV_WINDOW_ENTITY_NUM)
		return FLEXIO_DEV_STATUS_FAILED;
	struct window w = running->ctx.window[e];
	if (w.len == 0 || haddr < w.base || haddr - w.base >= w.len)
		return FLEXIO_DEV_STATUS_FAILED;
	*daddr = haddr; /* the host's memory is the host's */
	return FLEXIO_DEV_STATUS_SUCCESS;
}

void flexio_dev_thread_reschedule(void) { longjmp(running->ctx.exit, HOSTSIM_RESCHEDULED); }

void flexio_dev_thread_finish(void) { longjmp(running->ctx.exit, HOSTSIM_FINISHED); }

void hostsim_cq_arm(uint32_t ci, uint32_t qnum)
{
	running->ctx.armed = 1;
	running->ctx.arm_ci = ci & 0xffffff;
	running->ctx.arm_cqn = qnum;
}

static uint32_t be32(uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return __builtin_bswap32(v);
#else
	return v;
#endif
}

flexio_dev_status_t flexio_dev_dbr_cq_set_ci(uint32_t *cq_dbr, uint32_t ci)
{
	__atomic_store_n(cq_dbr, be32(ci & 0xffffff), __ATOMIC_RELEASE);
	return FLEXIO_DEV_STATUS_SUCCESS;
}

flexio_dev_status_t flexio_dev_dbr_rq_inc_pi(uint32_t *rq_dbr)
{
	uint32_t pi = be32(__atomic_load_n(rq_dbr, __ATOMIC_ACQUIRE));
	__atomic_store_n(rq_dbr, be32((pi + 1) & 0xffff), __ATOMIC_RELEASE);
	return FLEXIO_DEV_STATUS_SUCCESS;
}

void hostsim_thread_fence(int space, int pred, int succ)
{
	(void)space, (void)pred, (void)succ;
#ifdef __SANITIZE_THREAD__
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

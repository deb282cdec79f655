/*
 * hostsim.c — plain C implementations of the FlexIO device calls the SDR
 * handler uses, over host memory (see hostsim.h).
 */
#include "hostsim.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/*
 * A view is a thread's copy of one window in the strict memory model
 * (hostsim_strict_windows): what the handler's loads and stores through
 * the window reach. dirty[i] marks the bytes of word i (0xff lanes) that
 * the thread stored (window_store) and host memory does not have yet;
 * pending lists the words whose dirty is not 0. first[i] numbers the
 * oldest of word i's unperformed stores, last[i] its latest store, in
 * the thread's store order. Bit i of the lazy bitmap marks word i as not
 * yet loaded since the last read-invalidate and to be fetched again at
 * its first load (hostsim_window_load).
 */
struct view {
	uint32_t mkey;
	uint64_t base, len; /* the registered window's host range */
	uint8_t *shadow;
	uint64_t *dirty;
	uint32_t *pending, npending;
	uint64_t *first, *last;
	uint64_t *lazy;
};

#define HOSTSIM_VIEWS 8

/* A cache line of host memory: what the line model (hostsim_strict_lines) moves. */
#define HOSTSIM_LINE 64

struct flexio_dev_thread_ctx {
	jmp_buf exit;
	struct window window[FLEXIO_DEV_WINDOW_ENTITY_NUM]; /* per entity; len 0: not configured */
	int view[FLEXIO_DEV_WINDOW_ENTITY_NUM];             /* strict model: index into views */
	struct view views[HOSTSIM_VIEWS];                    /* strict model: kept across runs */
	int nviews;
	int armed;
	uint32_t arm_ci, arm_cqn;
	uint64_t stores;   /* strict model: window stores so far (their order) */
	uint64_t covered;  /* strict model: stores before the latest writeback */
	uint64_t rng;      /* strict model: this thread's seeded choices (xorshift64) */
	int fenced_w;      /* a memory write fence since the last doorbell record update */
	int cq_ci_pending; /* the CQ doorbell record moved and no write fence followed yet */
	/* strict model: the CQE whose owner byte the thread loaded last, with
	 * no memory read fence since (its other loads are not ordered after) */
	const uint8_t *cqe_unfenced;
};

int hostsim_strict; /* hostsim.h; off until hostsim_strict_windows */

/* The strict model's other settings (hostsim_strict_windows). */
static struct {
	uint64_t seed;
	void (*visible)(void *arg, uint64_t haddr, uint64_t old, uint64_t now);
	void *arg;
	void (*loading)(void *arg, uint64_t haddr);
	void *loading_arg;
	int lines; /* hostsim_strict_lines */
} strict;

struct hostsim_thread {
	struct flexio_dev_thread_ctx ctx;
	flexio_dev_event_handler_t *fn;
	uint64_t arg;
	int finished;
};

static __thread struct hostsim_thread *running;

static struct hostsim_ops ops; /* hostsim_ops_get; atomic adds, relaxed */

static void count(uint64_t *op) { __atomic_fetch_add(op, 1, __ATOMIC_RELAXED); }

void hostsim_ops_get(struct hostsim_ops *out)
{
	*out = (struct hostsim_ops){
		.loads = __atomic_load_n(&ops.loads, __ATOMIC_RELAXED),
		.stores = __atomic_load_n(&ops.stores, __ATOMIC_RELAXED),
		.writebacks = __atomic_load_n(&ops.writebacks, __ATOMIC_RELAXED),
		.read_invalidates = __atomic_load_n(&ops.read_invalidates, __ATOMIC_RELAXED),
		.window_configs = __atomic_load_n(&ops.window_configs, __ATOMIC_RELAXED),
		.ptr_acquires = __atomic_load_n(&ops.ptr_acquires, __ATOMIC_RELAXED),
	};
}

struct hostsim_thread *hostsim_thread_create(flexio_dev_event_handler_t *fn, uint64_t arg)
{
	struct hostsim_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->fn = fn;
	t->arg = arg;
	static uint64_t created;
	t->ctx.rng = (strict.seed ^ (__atomic_add_fetch(&created, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull)) | 1;
	return t;
}

void hostsim_thread_destroy(struct hostsim_thread *t)
{
	for (int i = 0; i < t->ctx.nviews; i++) {
		free(t->ctx.views[i].shadow);
		free(t->ctx.views[i].dirty);
		free(t->ctx.views[i].pending);
		free(t->ctx.views[i].first);
		free(t->ctx.views[i].last);
		free(t->ctx.views[i].lazy);
	}
	free(t);
}

static void die(const char *what)
{
	fprintf(stderr, "hostsim: %s\n", what);
	abort();
}

/* ---- the strict window model ---- */

void hostsim_strict_windows(uint64_t seed, void (*visible)(void *arg, uint64_t haddr, uint64_t old, uint64_t now), void *arg)
{
	hostsim_strict = 1;
	strict.seed = seed;
	strict.visible = visible;
	strict.arg = arg;
}

void hostsim_window_loading(void (*loading)(void *arg, uint64_t haddr), void *arg)
{
	strict.loading = loading;
	strict.loading_arg = arg;
}

void hostsim_strict_lines(int on) { __atomic_store_n(&strict.lines, on, __ATOMIC_RELEASE); }

/* lines reports whether the model moves whole cache lines (hostsim_strict_lines). */
static int lines(void) { return __atomic_load_n(&strict.lines, __ATOMIC_ACQUIRE); }

/* line_of gives the words of the view that share word i's 64-byte line
 * of host memory: [*from, *to). */
static void line_of(const struct view *v, uint64_t i, uint64_t *from, uint64_t *to)
{
	uint64_t before = (v->base + 8 * i) % HOSTSIM_LINE / 8;
	*from = i >= before ? i - before : 0;
	*to = i - before + HOSTSIM_LINE / 8;
	if (*to > v->len / 8)
		*to = v->len / 8;
}

/* line_dirty reports whether word i's line holds a store of the thread
 * not yet written back. */
static int line_dirty(const struct view *v, uint64_t i)
{
	uint64_t from, to;
	line_of(v, i, &from, &to);
	for (uint64_t j = from; j < to; j++)
		if (v->dirty[j])
			return 1;
	return 0;
}

/* rnd is xorshift64 over the thread's state: the model's seeded choices. */
static uint64_t rnd(struct flexio_dev_thread_ctx *t)
{
	uint64_t x = t->rng;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return t->rng = x;
}

/* refresh_word reads word i of the window from host memory into the
 * view, keeping the thread's own unperformed stores. */
static void refresh_word(struct view *v, uint64_t i)
{
	uint64_t m = v->dirty[i], s;
	uint64_t h = __atomic_load_n((uint64_t *)(uintptr_t)(v->base + 8 * i), __ATOMIC_ACQUIRE);
	memcpy(&s, v->shadow + 8 * i, 8);
	s = (h & ~m) | (s & m);
	memcpy(v->shadow + 8 * i, &s, 8);
}

/* refresh fetches word i into the view, or in line mode its whole line
 * unless the line holds stores not yet written back (a cache does not
 * drop a dirty line: its other words stay as the thread last saw them). */
static void refresh(struct view *v, uint64_t i)
{
	if (!lines()) {
		refresh_word(v, i);
		return;
	}
	if (line_dirty(v, i))
		return;
	uint64_t from, to;
	line_of(v, i, &from, &to);
	for (uint64_t j = from; j < to; j++)
		refresh_word(v, j);
}

/* perform_word makes the thread's stores to word i visible in host
 * memory (the host's bytes of the word are kept) and tells the harness.
 * The caller takes i off the pending list. */
static void perform_word(struct view *v, uint64_t i)
{
	uint64_t m = v->dirty[i], s;
	if (m == 0)
		return;
	memcpy(&s, v->shadow + 8 * i, 8);
	uint64_t *host = (uint64_t *)(uintptr_t)(v->base + 8 * i);
	uint64_t h = __atomic_load_n(host, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(host, &h, (h & ~m) | (s & m), 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	v->dirty[i] = 0;
	if (strict.visible)
		strict.visible(strict.arg, v->base + 8 * i, h, (h & ~m) | (s & m));
}

/* perform_line writes word i's line back whole, as the thread's copy
 * holds it, if the line holds a store of the thread: the words it never
 * stored go back as it last fetched them, over whatever the host (or
 * another thread) wrote there since. The caller takes i off the pending
 * list; the line's other pending words are left with nothing to do. */
static void perform_line(struct view *v, uint64_t i)
{
	if (!line_dirty(v, i))
		return;
	uint64_t from, to, was[HOSTSIM_LINE / 8], now[HOSTSIM_LINE / 8];
	line_of(v, i, &from, &to);
	/* The whole line first, then the harness hears of each word: it may
	 * read the line's other words when one of them moves. */
	for (uint64_t j = from; j < to; j++) {
		memcpy(&now[j - from], v->shadow + 8 * j, 8);
		was[j - from] = __atomic_exchange_n((uint64_t *)(uintptr_t)(v->base + 8 * j), now[j - from], __ATOMIC_RELEASE);
		v->dirty[j] = 0;
	}
	for (uint64_t j = from; j < to && strict.visible; j++)
		strict.visible(strict.arg, v->base + 8 * j, was[j - from], now[j - from]);
}

/* perform writes back word i's stores: the word alone, or its line. */
static void perform(struct view *v, uint64_t i)
{
	if (lines())
		perform_line(v, i);
	else
		perform_word(v, i);
}

/* read_invalidate refreshes every view of the thread, word by word in a
 * random order (a later read may be served before an earlier one), and
 * marks a random half of the words lazy: each of those is fetched again
 * at its first load, as a load the hardware performed then rather than
 * at the fence. Loads that bypass hostsim_window_load see the refresh. */
static void read_invalidate(struct flexio_dev_thread_ctx *t)
{
	for (int k = 0; k < t->nviews; k++) {
		struct view *v = &t->views[k];
		/* A stride that is a prime above n visits every word once. */
		static const uint64_t primes[] = {1000003, 1000033, 1000037, 1000039};
		uint64_t n = v->len / 8, start = n ? rnd(t) % n : 0, stride = primes[rnd(t) % 4];
		if (n >= primes[0])
			stride = 1;
		for (uint64_t j = 0; j < n; j++)
			refresh(v, (start + j * stride) % n);
		for (uint64_t j = 0; j < (n + 63) / 64; j++)
			v->lazy[j] = rnd(t);
	}
}

/* writeback performs every store the thread's views hold, in a random
 * order: a writeback orders the stores before it against those after
 * it, not among themselves. */
static void writeback(struct flexio_dev_thread_ctx *t)
{
	t->covered = t->stores;
	for (int k = 0; k < t->nviews; k++) {
		struct view *v = &t->views[k];
		for (uint32_t j = v->npending; j > 1; j--) {
			uint32_t r = (uint32_t)(rnd(t) % j), x = v->pending[j - 1];
			v->pending[j - 1] = v->pending[r], v->pending[r] = x;
		}
		/* Each perform may call the harness, which counts what is still
		 * pending: take each word off the list as it is performed. */
		while (v->npending > 0)
			perform(v, v->pending[--v->npending]);
	}
}

/* changes reports whether the thread's unperformed stores to word i
 * would change what host memory holds: a store of the value already
 * there is not one the host can see missing. */
static int changes(const struct view *v, uint64_t i)
{
	uint64_t s, h = __atomic_load_n((const uint64_t *)(uintptr_t)(v->base + 8 * i), __ATOMIC_ACQUIRE);
	memcpy(&s, v->shadow + 8 * i, 8);
	return ((s ^ h) & v->dirty[i]) != 0;
}

int hostsim_pending_stores_before(uint64_t haddr)
{
	const struct flexio_dev_thread_ctx *t = running ? &running->ctx : NULL;
	uint64_t at = 0;
	for (int k = 0; t && k < t->nviews; k++) {
		const struct view *v = &t->views[k];
		if (haddr >= v->base && haddr < v->base + v->len)
			at = v->last[(haddr - v->base) / 8];
	}
	int n = 0;
	for (int k = 0; at && k < t->nviews; k++)
		for (uint32_t j = 0; j < t->views[k].npending; j++)
			n += t->views[k].first[t->views[k].pending[j]] < at && changes(&t->views[k], t->views[k].pending[j]);
	return n;
}

/* early does what a cache may do at any time: perform one of the
 * thread's stores, or refresh one word it did not store, ahead of any
 * fence. Called at every device call. */
static void early(struct flexio_dev_thread_ctx *t)
{
	if (!hostsim_strict || t->nviews == 0)
		return;
	struct view *v = &t->views[rnd(t) % (uint64_t)t->nviews];
	uint64_t n = v->len / 8, r = rnd(t) % 4;
	if (r == 0 && v->npending > 0) {
		uint32_t j = (uint32_t)(rnd(t) % v->npending), i = v->pending[j];
		v->pending[j] = v->pending[--v->npending];
		perform(v, i);
	} else if (r == 1 && n > 0) {
		uint64_t i = rnd(t) % n;
		if (v->dirty[i] == 0)
			refresh(v, i);
	}
}

void hostsim_window_store(void *p, uint64_t value, int size)
{
	struct flexio_dev_thread_ctx *t = running ? &running->ctx : NULL;
	uint8_t *b = p;
	for (int k = 0; hostsim_strict && t && k < t->nviews; k++) {
		struct view *v = &t->views[k];
		if (b < v->shadow || b >= v->shadow + v->len)
			continue;
		uint64_t off = (uint64_t)(b - v->shadow);
		if (off % (uint64_t)size != 0)
			die("a misaligned window store");
		memcpy(b, &value, (size_t)size); /* little-endian: the low bytes */
		count(&ops.stores);
		uint64_t seq = ++t->stores;
		if (v->dirty[off / 8] == 0) {
			v->pending[v->npending++] = (uint32_t)(off / 8);
			v->first[off / 8] = seq;
		}
		v->last[off / 8] = seq;
		v->dirty[off / 8] |= (size == 8 ? ~0ull : ((1ull << 8 * size) - 1)) << 8 * (off % 8);
		return;
	}
	/* Not a window view: a release store (dpasim's host reads it concurrently). */
	if (size == 8)
		__atomic_store_n((uint64_t *)p, value, __ATOMIC_RELEASE);
	else if (size == 4)
		__atomic_store_n((uint32_t *)p, (uint32_t)value, __ATOMIC_RELEASE);
	else
		die("a window store of a size other than 4 or 8");
}

uint64_t hostsim_window_load_strict(const uint64_t *p)
{
	struct flexio_dev_thread_ctx *t = running ? &running->ctx : NULL;
	const uint8_t *b = (const uint8_t *)p;
	for (int k = 0; t && k < t->nviews; k++) {
		struct view *v = &t->views[k];
		if (b < v->shadow || b >= v->shadow + v->len)
			continue;
		uint64_t off = (uint64_t)(b - v->shadow), i = off / 8, w;
		if (off % 8 != 0)
			die("a misaligned window load");
		count(&ops.loads);
		if (strict.loading)
			strict.loading(strict.loading_arg, v->base + off);
		if (v->lazy[i / 64] >> (i % 64) & 1) {
			v->lazy[i / 64] &= ~(1ull << (i % 64));
			refresh(v, i);
		}
		memcpy(&w, b, 8);
		return w;
	}
	/* Not a window view: host memory, which dpasim's host writes concurrently. */
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* view_of returns the thread's view of window w, making it (a copy of
 * host memory as it is now) at the thread's first use. */
static int view_of(struct flexio_dev_thread_ctx *t, struct window w)
{
	for (int k = 0; k < t->nviews; k++)
		if (t->views[k].mkey == w.mkey && t->views[k].base == w.base && t->views[k].len == w.len)
			return k;
	if (t->nviews == HOSTSIM_VIEWS || w.base % 8 != 0 || w.len % 8 != 0)
		die("strict windows: too many windows, or one not 8-byte aligned and sized");
	struct view *v = &t->views[t->nviews];
	*v = (struct view){.mkey = w.mkey, .base = w.base, .len = w.len, .shadow = calloc(1, w.len), .dirty = calloc(w.len / 8, 8),
			    .pending = calloc(w.len / 8, 4), .first = calloc(w.len / 8, 8), .last = calloc(w.len / 8, 8),
			    .lazy = calloc((w.len / 8 + 63) / 64, 8)};
	if (!v->shadow || !v->dirty || !v->pending || !v->first || !v->last || !v->lazy)
		die("out of memory");
	for (uint64_t i = 0; i < w.len / 8; i++)
		refresh_word(v, i);
	return t->nviews++;
}

enum hostsim_exit hostsim_thread_run(struct hostsim_thread *t)
{
	if (t->finished)
		return HOSTSIM_FINISHED;
	/* A run may start inside another thread's (a test's host reacting to
	 * a store that became visible runs a second handler there, as the
	 * hardware runs them side by side): that one goes on after it. */
	struct hostsim_thread *outer = running;
	running = t;
	t->ctx.armed = 0;
	t->ctx.fenced_w = 0;
	t->ctx.cq_ci_pending = 0;
	/* A thread's window configuration does not survive its run. */
	for (int e = 0; e < FLEXIO_DEV_WINDOW_ENTITY_NUM; e++)
		t->ctx.window[e] = (struct window){0};
	int how = setjmp(t->ctx.exit);
	if (how == 0) {
		t->fn(t->arg);
		how = HOSTSIM_FINISHED; /* returned without leaving through the API */
	}
	running = outer;
	/* A store the cache happened to perform early is no excuse: only a
	 * writeback guarantees it reaches the host. (Every pending store is
	 * one made since the last writeback, which empties the views.) */
	if (hostsim_strict && t->ctx.stores != t->ctx.covered)
		die("a run ended with window stores not written back");
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
	count(&ops.window_configs);
	pthread_mutex_lock(&windows_mu);
	for (int i = 0; i < HOSTSIM_WINDOWS; i++) {
		if (windows[i].len != 0 && windows[i].mkey == mkey) {
			dtctx->window[e] = windows[i];
			if (hostsim_strict)
				dtctx->view[e] = view_of(dtctx, windows[i]);
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
	count(&ops.ptr_acquires);
	if (w.len == 0 || haddr < w.base || haddr - w.base >= w.len)
		return FLEXIO_DEV_STATUS_FAILED;
	early(&running->ctx);
	if (hostsim_strict) /* the thread's copy, at an address of its own */
		*daddr = (flexio_uintptr_t)(uintptr_t)(running->ctx.views[running->ctx.view[e]].shadow + (haddr - w.base));
	else
		*daddr = haddr; /* the host's memory is the host's */
	return FLEXIO_DEV_STATUS_SUCCESS;
}

void flexio_dev_thread_reschedule(void) { longjmp(running->ctx.exit, HOSTSIM_RESCHEDULED); }

void flexio_dev_thread_finish(void) { longjmp(running->ctx.exit, HOSTSIM_FINISHED); }

void hostsim_cq_arm(uint32_t ci, uint32_t qnum)
{
	early(&running->ctx);
	if (hostsim_strict && running->ctx.cq_ci_pending)
		die("CQ armed before a write fence ordered its doorbell record");
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
	if (running) {
		early(&running->ctx);
		running->ctx.cq_ci_pending = 1;
	}
	__atomic_store_n(cq_dbr, be32(ci & 0xffffff), __ATOMIC_RELEASE);
	return FLEXIO_DEV_STATUS_SUCCESS;
}

flexio_dev_status_t flexio_dev_dbr_rq_inc_pi(uint32_t *rq_dbr)
{
	if (running) {
		early(&running->ctx);
		if (hostsim_strict && !running->ctx.fenced_w)
			die("receive doorbell record moved without a write fence after the WQE");
		running->ctx.fenced_w = 0;
	}
	uint32_t pi = be32(__atomic_load_n(rq_dbr, __ATOMIC_ACQUIRE));
	__atomic_store_n(rq_dbr, be32((pi + 1) & 0xffff), __ATOMIC_RELEASE);
	return FLEXIO_DEV_STATUS_SUCCESS;
}

void hostsim_cqe_owner_loaded(const uint8_t *cqe)
{
	if (running)
		running->ctx.cqe_unfenced = cqe;
}

uint32_t hostsim_cqe_served(const uint8_t *cqe, uint32_t v)
{
	struct flexio_dev_thread_ctx *t = running ? &running->ctx : NULL;
	/* Not ordered after the owner byte's load: the hardware may have
	 * performed it first, before the NIC wrote the CQE. */
	if (t && t->cqe_unfenced == cqe && rnd(t) % 2 == 0)
		return ~v;
	return v;
}

unsigned long long hostsim_cycles(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void hostsim_thread_fence(int space, int pred, int succ)
{
	struct flexio_dev_thread_ctx *t = running ? &running->ctx : NULL;
	if (t && hostsim_strict) {
		early(t);
		if (space == __DPA_MMIO || space == __DPA_SYSTEM) {
			if (pred & __DPA_W) {
				count(&ops.writebacks);
				writeback(t);
			}
			if (pred & __DPA_R) {
				count(&ops.read_invalidates);
				read_invalidate(t);
			}
		}
		if (space != __DPA_MMIO && (pred & __DPA_W)) {
			t->fenced_w = 1;
			t->cq_ci_pending = 0;
		}
		if (space != __DPA_MMIO && (pred & __DPA_R) && (succ & __DPA_R))
			t->cqe_unfenced = NULL;
	}
#ifdef __SANITIZE_THREAD__
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/*
 * hostsim's flexio_dev_queue_access.h: the queue calls ../../handler.c
 * makes, implemented in ../hostsim.c. flexio_dev_cq_arm carries the
 * public header's gate on both sides:
 *
 *   FLEXIO_DEV_VER_USED >= 24.10   void flexio_dev_cq_arm(uint32_t ci, uint32_t qnum)
 *   FLEXIO_DEV_VER_USED <  24.10   flexio_dev_status_t flexio_dev_cq_arm(struct flexio_dev_thread_ctx *, ci, qnum)
 *
 * The doorbell-record calls have one signature in every release.
 */
#ifndef SDR_HOSTSIM_FLEXIO_DEV_QUEUE_ACCESS_H
#define SDR_HOSTSIM_FLEXIO_DEV_QUEUE_ACCESS_H

#include <libflexio-dev/flexio_dev.h>
#include <stdint.h>

/* hostsim's arm: a CQE at or beyond ci of CQ qnum raises the next event. */
void hostsim_cq_arm(uint32_t ci, uint32_t qnum);

#if FLEXIO_DEV_VER_USED >= FLEXIO_DEV_VER(24, 10, 0)
static inline void flexio_dev_cq_arm(uint32_t ci, uint32_t qnum) { hostsim_cq_arm(ci, qnum); }
#else
static inline flexio_dev_status_t flexio_dev_cq_arm(struct flexio_dev_thread_ctx *dtctx, uint32_t ci, uint32_t qnum)
{
	(void)dtctx;
	hostsim_cq_arm(ci, qnum);
	return FLEXIO_DEV_STATUS_SUCCESS;
}
#endif

/* Write the CQ doorbell record's consumer index (big-endian, 24 bits). */
flexio_dev_status_t flexio_dev_dbr_cq_set_ci(uint32_t *cq_dbr, uint32_t ci);
/* Add one to the RQ doorbell record's producer counter (big-endian, 16 bits). */
flexio_dev_status_t flexio_dev_dbr_rq_inc_pi(uint32_t *rq_dbr);

#endif

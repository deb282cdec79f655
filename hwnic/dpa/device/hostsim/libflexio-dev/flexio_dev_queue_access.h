/*
 * hostsim's flexio_dev_queue_access.h: the queue calls ../../handler.c
 * makes (FlexIO API 24.10 and later signatures), implemented in
 * ../hostsim.c.
 */
#ifndef SDR_HOSTSIM_FLEXIO_DEV_QUEUE_ACCESS_H
#define SDR_HOSTSIM_FLEXIO_DEV_QUEUE_ACCESS_H

#include <libflexio-dev/flexio_dev.h>
#include <stdint.h>

/* Arm CQ qnum at consumer index ci: a CQE at or beyond ci raises an event. */
void flexio_dev_cq_arm(uint32_t ci, uint32_t qnum);
/* Write the CQ doorbell record's consumer index (big-endian, 24 bits). */
void flexio_dev_dbr_cq_set_ci(uint32_t *cq_dbr, uint32_t ci);
/* Add one to the RQ doorbell record's producer counter (big-endian, 16 bits). */
void flexio_dev_dbr_rq_inc_pi(uint32_t *rq_dbr);

#endif

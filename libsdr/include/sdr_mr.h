/*
 * sdr_mr.h - memory registration of the SDR-RDMA SDK's C interface,
 * implemented by libsdr (see sdr.h). Declarations match the public SDK's.
 */
#ifndef _SDR_MR_H_ /* the SDK's guard */
#define _SDR_MR_H_

#include <stddef.h>
#include <stdint.h>

#include "sdr.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sdr_mr;

enum sdr_access_flags {
    SDR_ACCESS_REMOTE_WRITE = 0 /* peers may write the region */
};

/* Registers length bytes at addr for sends and receives of the context's
   QPs. The memory is used in place, never copied, and must stay allocated
   until sdr_mr_dereg. NULL on failure. */
struct sdr_mr *sdr_mr_reg(struct sdr_context *ctx, void *addr, size_t length,
                          enum sdr_access_flags flags);

/* Releases the registration. */
int sdr_mr_dereg(struct sdr_mr *mr);

/* The key that names the registration in sdr_send_wr, sdr_send_continue_wr
   and sdr_recv_wr (local to the context). */
int sdr_mr_lkey_get(struct sdr_mr *mr, uint32_t *lkey);

/* The remote key. SDR messages address the peer's posted buffers, not its
   keys: it equals the lkey and the peer has no use for it. */
int sdr_mr_rkey_get(struct sdr_mr *mr, uint32_t *rkey);

#ifdef __cplusplus
}
#endif

#endif /* _SDR_MR_H_ */

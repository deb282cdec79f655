/*
 * mlx5.h — the parts of the mlx5 completion and work queue formats the SDR
 * handler reads and writes, as byte offsets into big-endian memory (the
 * layout of rdma-core's struct mlx5_cqe64 and struct mlx5_wqe_data_seg in
 * <infiniband/mlx5dv.h>, which the tests check these offsets against).
 * Portable C: no FlexIO or rdma-core dependency, so dpacc and gcc both
 * build it.
 */
#ifndef SDR_DPA_MLX5_H
#define SDR_DPA_MLX5_H

#include <stdint.h>

#define SDR_CQE_SIZE 64
#define SDR_CQE_OFF_IMM 36       /* imm_inval_pkey, be32 */
#define SDR_CQE_OFF_BYTE_CNT 44  /* byte_cnt, be32 */
#define SDR_CQE_OFF_QPN 56       /* sop_drop_qpn, be32, QPN in the low 24 bits */
#define SDR_CQE_OFF_WQE_CNT 60   /* wqe_counter, be16 */
#define SDR_CQE_OFF_OP_OWN 63    /* opcode in bits 4..7, owner in bit 0 */
#define SDR_CQE_OPCODE_RESP_WR_IMM 0x1 /* MLX5_CQE_RESP_WR_IMM */
#define SDR_CQE_OPCODE_RESP_SEND_IMM 0x3 /* MLX5_CQE_RESP_SEND_IMM: a fence marker */
#define SDR_CQE_OPCODE_RESP_ERR 0xe    /* MLX5_CQE_RESP_ERR */
#define SDR_CQE_OPCODE_INVALID 0xf     /* MLX5_CQE_INVALID: never written by hardware */

#define SDR_RWQE_SIZE 16         /* a receive WQE of one data segment */
#define SDR_INVALID_LKEY 0x100   /* MLX5_INVALID_LKEY: ends a scatter list */

static inline uint32_t sdr_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint16_t sdr_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline void sdr_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static inline void sdr_put_be64(uint8_t *p, uint64_t v)
{
	sdr_put_be32(p, (uint32_t)(v >> 32));
	sdr_put_be32(p + 4, (uint32_t)v);
}

/*
 * A CQE's loads: plain unless the includer defines them first, as
 * handler.c does for hostsim builds, where hostsim serves them under its
 * model of load order.
 */
#ifndef SDR_CQE_OP_OWN
#define SDR_CQE_OP_OWN(cqe) __atomic_load_n(&(cqe)[SDR_CQE_OFF_OP_OWN], __ATOMIC_RELAXED)
#endif
#ifndef SDR_CQE_BE32
#define SDR_CQE_BE32(cqe, off) sdr_be32((cqe) + (off))
#endif

/*
 * sdr_cqe_op_own loads the byte the NIC writes last. It orders nothing:
 * a reader that finds the CQE ready (sdr_cqe_ready) must fence DPA
 * memory reads (R, R) before it reads the rest, or those loads may be
 * performed first and see the CQE before the NIC wrote it.
 */
static inline uint8_t sdr_cqe_op_own(const uint8_t *cqe) { return SDR_CQE_OP_OWN(cqe); }

/*
 * sdr_cqe_ready: whether the CQE at consumer index ci of a ring of
 * 2^log_size entries has been written by the NIC in the current pass:
 * its owner bit equals the pass parity (ci >> log_size) & 1 and its
 * opcode is not the invalid one the ring is initialised with.
 */
static inline int sdr_cqe_ready(uint8_t op_own, uint32_t ci, uint32_t log_size)
{
	return (op_own >> 4) != SDR_CQE_OPCODE_INVALID && (op_own & 1) == ((ci >> log_size) & 1);
}

static inline uint8_t sdr_cqe_opcode(uint8_t op_own) { return op_own >> 4; }
static inline uint32_t sdr_cqe_imm(const uint8_t *cqe) { return SDR_CQE_BE32(cqe, SDR_CQE_OFF_IMM); }
static inline uint32_t sdr_cqe_byte_cnt(const uint8_t *cqe) { return SDR_CQE_BE32(cqe, SDR_CQE_OFF_BYTE_CNT); }
static inline uint32_t sdr_cqe_qpn(const uint8_t *cqe) { return SDR_CQE_BE32(cqe, SDR_CQE_OFF_QPN) & 0xffffff; }
static inline uint16_t sdr_cqe_wqe_counter(const uint8_t *cqe) { return sdr_be16(cqe + SDR_CQE_OFF_WQE_CNT); }

/*
 * sdr_rwqe_set writes a receive WQE of one data segment (byte_count,
 * lkey, addr; struct mlx5_wqe_data_seg). SDR's receive WQEs scatter
 * nothing: a WRITE-with-Imm places its payload through the rkey, and
 * the WQE only carries the completion.
 */
static inline void sdr_rwqe_set(uint8_t *wqe, uint32_t byte_count, uint32_t lkey, uint64_t addr)
{
	sdr_put_be32(wqe, byte_count);
	sdr_put_be32(wqe + 4, lkey);
	sdr_put_be64(wqe + 8, addr);
}

#endif /* SDR_DPA_MLX5_H */

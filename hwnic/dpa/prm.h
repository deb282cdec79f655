/*
 * prm.h — the few mlx5 firmware commands hwnic/dpa issues through DevX
 * (mlx5dv_devx_obj_create / _modify), as bit offsets into the command
 * mailboxes. The layouts are the public mlx5 Programmer's Reference
 * Manual's, as the Linux kernel publishes them in
 * include/linux/mlx5/mlx5_ifc.h (struct mlx5_ifc_create_qp_in_bits,
 * mlx5_ifc_qpc_bits, mlx5_ifc_ads_bits, mlx5_ifc_rst2init_qp_in_bits,
 * mlx5_ifc_init2rtr_qp_in_bits, mlx5_ifc_create_mkey_in_bits,
 * mlx5_ifc_mkc_bits, mlx5_ifc_klm_bits, mlx5_ifc_query_hca_cap_in_bits,
 * mlx5_ifc_query_hca_cap_out_bits, mlx5_ifc_roce_cap_bits): offsets are counted in bits
 * from the start of each structure, big-endian, most significant bit
 * first, as the PRM numbers them.
 *
 * Why DevX: the FlexIO host API creates RC QPs only
 * (flexio_qp_attr.transport_type: "currently only FLEXIO_QPC_ST_RC is
 * supported"), and SDR's channels are UC; and an indirect mkey with one
 * KLM per message ID is larger than a UMR work request can carry.
 */
#ifndef SDR_DPA_PRM_H
#define SDR_DPA_PRM_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* Command opcodes (PRM "Command Reference"). */
#define SDR_PRM_QUERY_HCA_CAP 0x100
#define SDR_PRM_CREATE_MKEY 0x200
#define SDR_PRM_CREATE_QP 0x500
#define SDR_PRM_RST2INIT_QP 0x502
#define SDR_PRM_INIT2RTR_QP 0x503
#define SDR_PRM_2ERR_QP 0x507

/* Mailbox sizes in bytes. */
#define SDR_PRM_CREATE_QP_IN 0x1d0   /* create_qp_in, with its qpc extension */
#define SDR_PRM_CREATE_QP_OUT 0x10
#define SDR_PRM_MODIFY_QP_IN 0x110   /* rst2init / init2rtr _qp_in */
#define SDR_PRM_MODIFY_QP_OUT 0x10
#define SDR_PRM_2ERR_QP_IN 0x10
#define SDR_PRM_CREATE_MKEY_IN 0x110 /* create_mkey_in up to klm_pas_mtt */
#define SDR_PRM_CREATE_MKEY_OUT 0x10
#define SDR_PRM_KLM_SIZE 0x10
#define SDR_PRM_QUERY_HCA_CAP_IN 0x10
#define SDR_PRM_QUERY_HCA_CAP_OUT 0x1010 /* the header, then the capability union (0x8000 bits) */

/* Common command header. */
#define SDR_PRM_OPCODE 0x00, 16
#define SDR_PRM_OUT_STATUS 0x00, 8
#define SDR_PRM_OUT_SYNDROME 0x20, 32
#define SDR_PRM_QPN 0x48, 24         /* modify commands' qpn; create_qp_out's qpn */
#define SDR_PRM_MKEY_INDEX 0x48, 24  /* create_mkey_out */

/*
 * query_hca_cap_in / _out. op_mod names the capability and whether its
 * maximum or current value: (type << 1) | 1 for the current one, the
 * RoCE capabilities being type 4 (the kernel's enum mlx5_cap_type,
 * MLX5_CAP_ROCE, and HCA_CAP_OPMOD_GET_CUR in include/linux/mlx5/device.h).
 */
#define SDR_PRM_OP_MOD 0x30, 16
#define SDR_PRM_CAP_ROCE_CUR ((0x4 << 1) | 0x1)
#define SDR_PRM_CAPABILITY 0x80      /* query_hca_cap_out: where the capability starts */
/* roce_cap fields, relative to SDR_PRM_CAPABILITY: the timestamp
 * formats a RoCE QP may take (0 free running only, 1 real time only, 2
 * both). */
#define SDR_ROCE_CAP_QP_TS_FORMAT 0x1e, 2

/* create_qp_in / modify_qp_in: where the qpc starts. */
#define SDR_PRM_QPC 0xc0
#define SDR_PRM_WQ_UMEM_OFFSET 0x800 /* 64 bits */
#define SDR_PRM_WQ_UMEM_ID 0x840, 32
#define SDR_PRM_WQ_UMEM_VALID 0x860, 1

/* qpc fields, relative to SDR_PRM_QPC. */
#define SDR_QPC_ST 0x08, 8
#define SDR_QPC_PM_STATE 0x13, 2
#define SDR_QPC_PD 0x28, 24
#define SDR_QPC_MTU 0x40, 3
#define SDR_QPC_LOG_MSG_MAX 0x43, 5
#define SDR_QPC_LOG_RQ_SIZE 0x49, 4
#define SDR_QPC_LOG_RQ_STRIDE 0x4d, 3
#define SDR_QPC_NO_SQ 0x50, 1
#define SDR_QPC_TS_FORMAT 0x58, 2
#define SDR_QPC_UAR_PAGE 0x68, 24
#define SDR_QPC_REMOTE_QPN 0xa8, 24
/* primary_address_path (an ads at qpc bit 0xc0) */
#define SDR_QPC_SRC_ADDR_INDEX 0x108, 8
#define SDR_QPC_HOP_LIMIT 0x118, 8
#define SDR_QPC_RGID 0x140           /* 16 bytes */
#define SDR_QPC_UDP_SPORT 0x1d0, 16
#define SDR_QPC_VHCA_PORT_NUM 0x1e8, 8
#define SDR_QPC_RMAC_47_32 0x1f0, 16
#define SDR_QPC_RMAC_31_0 0x200, 32
#define SDR_QPC_CQN_SND 0x3e8, 24
#define SDR_QPC_RWE 0x491, 1
#define SDR_QPC_NEXT_RCV_PSN 0x4a8, 24
#define SDR_QPC_CQN_RCV 0x4e8, 24
#define SDR_QPC_DBR_ADDR 0x500       /* 64 bits */
#define SDR_QPC_RQ_TYPE 0x565, 3
#define SDR_QPC_DBR_UMEM_VALID 0x683, 1
#define SDR_QPC_DBR_UMEM_ID 0x720, 32

#define SDR_QPC_ST_UC 0x1
/*
 * Timestamp formats of a QP: the device's default, or free running. The
 * kernel's mlx5_get_qp_default_ts picks the default where the RoCE
 * capability qp_ts_format offers a real-time clock (any value but 0),
 * free running otherwise; a device that offers only the real-time
 * clock refuses free running, one without it the default.
 */
#define SDR_QPC_TS_FORMAT_FREE_RUNNING 0x0
#define SDR_QPC_TS_FORMAT_DEFAULT 0x1
#define SDR_QPC_PM_STATE_MIGRATED 0x3

/* create_mkey_in: the mkey context starts at bit 0x80. */
#define SDR_PRM_MKC 0x80
#define SDR_PRM_TRANSLATIONS_ACTUAL 0x300, 32
#define SDR_PRM_KLMS 0x880           /* klm_pas_mtt */
/* mkc fields, relative to SDR_PRM_MKC. */
#define SDR_MKC_ACCESS_MODE_4_2 0x03, 3
#define SDR_MKC_RW 0x12, 1
#define SDR_MKC_LW 0x14, 1
#define SDR_MKC_LR 0x15, 1
#define SDR_MKC_ACCESS_MODE_1_0 0x16, 2
#define SDR_MKC_QPN 0x20, 24
#define SDR_MKC_MKEY_7_0 0x38, 8
#define SDR_MKC_PD 0x68, 24
#define SDR_MKC_START_ADDR 0x80      /* 64 bits */
#define SDR_MKC_LEN 0xc0             /* 64 bits */
#define SDR_MKC_TRANSLATIONS 0x1a0, 32
#define SDR_MKC_ACCESS_MODE_KLMS 0x2

/*
 * sdr_prm_set stores the low width bits of v at bit offset off of the
 * big-endian mailbox p (a field never crosses a 32-bit boundary).
 */
static inline void sdr_prm_set(void *p, uint32_t off, uint32_t width, uint32_t v)
{
	uint32_t *dw = (uint32_t *)p + off / 32;
	uint32_t shift = 32 - width - off % 32;
	uint32_t mask = (width == 32 ? 0xffffffffu : (1u << width) - 1) << shift;
	*dw = htobe32((be32toh(*dw) & ~mask) | ((v << shift) & mask));
}

/* sdr_prm_get reads a field sdr_prm_set would write. */
static inline uint32_t sdr_prm_get(const void *p, uint32_t off, uint32_t width)
{
	uint32_t v = be32toh(((const uint32_t *)p)[off / 32]) >> (32 - width - off % 32);
	return width == 32 ? v : v & ((1u << width) - 1);
}

/* sdr_prm_set64 stores a 64-bit field at a 64-bit aligned offset. */
static inline void sdr_prm_set64(void *p, uint32_t off, uint64_t v)
{
	uint64_t be = htobe64(v);
	memcpy((uint8_t *)p + off / 8, &be, 8);
}

/* The two-argument field macros above expand into (off, width). */
#define SDR_SET(p, base, field, v) sdr_prm_set_at(p, base, field, v)
#define sdr_prm_set_at(p, base, off, width, v) sdr_prm_set(p, (base) + (off), width, v)
#define SDR_GET(p, base, field) sdr_prm_get_at(p, base, field)
#define sdr_prm_get_at(p, base, off, width) sdr_prm_get(p, (base) + (off), width)

#endif /* SDR_DPA_PRM_H */

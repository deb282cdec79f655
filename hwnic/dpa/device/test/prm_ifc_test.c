/*
 * prm_ifc_test — every field ../../prm.h writes into a DevX mailbox,
 * checked against the mlx5 PRM layouts as the Linux kernel publishes
 * them (include/linux/mlx5/mlx5_ifc.h, from Debian's linux-headers
 * package): each struct mlx5_ifc_*_bits holds one u8 per bit, so a
 * field's offsetof is its bit offset and its sizeof its width. Run by
 * prm_test.go; prints "ok prm_ifc" or a FAIL line per mismatch.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What the kernel header needs of the kernel. */
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#define BIT(n) (1ULL << (n))
#define BIT_ULL(n) (1ULL << (n))
#include <mlx5_ifc.h>

#include "prm.h"

static int failures;

#define BITOFF(typ, fld) ((uint32_t)offsetof(struct mlx5_ifc_##typ##_bits, fld))
#define BITWIDTH(typ, fld) ((uint32_t)sizeof(((struct mlx5_ifc_##typ##_bits *)0)->fld))

/* check compares a field macro of prm.h (offset, width) with the header's. */
static void check(const char *name, uint32_t off, uint32_t width, uint32_t want_off, uint32_t want_width)
{
	if (off != want_off || width != want_width) {
		printf("FAIL %s: prm.h has bit %#x width %u, mlx5_ifc.h bit %#x width %u\n", name, off, width, want_off,
		       want_width);
		failures++;
	}
}

/* FIELD checks prm.h's name (an "offset, width" pair relative to base)
 * against field fld of the kernel's struct typ, at header offset hbase. */
#define FIELD(name, typ, fld, hbase)                                                                   \
	do {                                                                                           \
		uint32_t f[2] = {name};                                                                \
		check(#name, f[0], f[1], BITOFF(typ, fld) + (hbase), BITWIDTH(typ, fld));             \
	} while (0)

/* inside checks a field the kernel's header leaves reserved (it does not
 * use it; rdma-core's DevX does): prm.h's bits must lie in the reserved
 * range, never over a field the kernel names. */
static void inside(const char *name, uint32_t off, uint32_t width, uint32_t res_off, uint32_t res_width)
{
	if (off < res_off || off + width > res_off + res_width) {
		printf("FAIL %s: prm.h has bits %#x..%#x, outside the kernel's reserved %#x..%#x\n", name, off,
		       off + width - 1, res_off, res_off + res_width - 1);
		failures++;
	}
}

#define RESERVED(name, typ, res, hbase)                                                                \
	do {                                                                                           \
		uint32_t f[2] = {name};                                                                \
		inside(#name, f[0], f[1], BITOFF(typ, res) + (hbase), BITWIDTH(typ, res));            \
	} while (0)
#define RESERVED_AT(name, width, typ, res, hbase) inside(#name, name, width, BITOFF(typ, res) + (hbase), BITWIDTH(typ, res))

/* AT checks a field that prm.h gives as an offset only (wide fields). */
#define AT(name, typ, fld, hbase) check(#name, name, BITWIDTH(typ, fld), BITOFF(typ, fld) + (hbase), BITWIDTH(typ, fld))

int main(void)
{
	/* Command headers. */
	FIELD(SDR_PRM_OPCODE, create_qp_in, opcode, 0);
	FIELD(SDR_PRM_OPCODE, rst2init_qp_in, opcode, 0);
	FIELD(SDR_PRM_OPCODE, init2rtr_qp_in, opcode, 0);
	FIELD(SDR_PRM_OPCODE, qp_2err_in, opcode, 0);
	FIELD(SDR_PRM_OPCODE, create_mkey_in, opcode, 0);
	FIELD(SDR_PRM_OUT_STATUS, create_qp_out, status, 0);
	FIELD(SDR_PRM_OUT_SYNDROME, create_qp_out, syndrome, 0);
	FIELD(SDR_PRM_QPN, create_qp_out, qpn, 0);
	FIELD(SDR_PRM_QPN, rst2init_qp_in, qpn, 0);
	FIELD(SDR_PRM_QPN, init2rtr_qp_in, qpn, 0);
	FIELD(SDR_PRM_QPN, qp_2err_in, qpn, 0);
	FIELD(SDR_PRM_MKEY_INDEX, create_mkey_out, mkey_index, 0);
	FIELD(SDR_PRM_OPCODE, query_hca_cap_in, opcode, 0);
	FIELD(SDR_PRM_OP_MOD, query_hca_cap_in, op_mod, 0);
	FIELD(SDR_PRM_OUT_STATUS, query_hca_cap_out, status, 0);
	check("SDR_PRM_CAPABILITY", SDR_PRM_CAPABILITY, 0, BITOFF(query_hca_cap_out, capability), 0);
	FIELD(SDR_ROCE_CAP_QP_TS_FORMAT, roce_cap, qp_ts_format, 0);

	/* Where the QP context starts, and create_qp_in's own fields. */
	check("SDR_PRM_QPC (create_qp_in)", SDR_PRM_QPC, 0, BITOFF(create_qp_in, qpc), 0);
	check("SDR_PRM_QPC (rst2init_qp_in)", SDR_PRM_QPC, 0, BITOFF(rst2init_qp_in, qpc), 0);
	check("SDR_PRM_QPC (init2rtr_qp_in)", SDR_PRM_QPC, 0, BITOFF(init2rtr_qp_in, qpc), 0);
	RESERVED_AT(SDR_PRM_WQ_UMEM_OFFSET, 64, create_qp_in, reserved_at_800, 0);
	RESERVED(SDR_PRM_WQ_UMEM_ID, create_qp_in, reserved_at_800, 0);
	FIELD(SDR_PRM_WQ_UMEM_VALID, create_qp_in, wq_umem_valid, 0);

	/* The QP context. */
	FIELD(SDR_QPC_ST, qpc, st, 0);
	FIELD(SDR_QPC_PM_STATE, qpc, pm_state, 0);
	FIELD(SDR_QPC_PD, qpc, pd, 0);
	FIELD(SDR_QPC_MTU, qpc, mtu, 0);
	FIELD(SDR_QPC_LOG_MSG_MAX, qpc, log_msg_max, 0);
	FIELD(SDR_QPC_LOG_RQ_SIZE, qpc, log_rq_size, 0);
	FIELD(SDR_QPC_LOG_RQ_STRIDE, qpc, log_rq_stride, 0);
	FIELD(SDR_QPC_NO_SQ, qpc, no_sq, 0);
	FIELD(SDR_QPC_TS_FORMAT, qpc, ts_format, 0);
	FIELD(SDR_QPC_UAR_PAGE, qpc, uar_page, 0);
	FIELD(SDR_QPC_REMOTE_QPN, qpc, remote_qpn, 0);
	uint32_t ads = BITOFF(qpc, primary_address_path);
	FIELD(SDR_QPC_SRC_ADDR_INDEX, ads, src_addr_index, ads);
	FIELD(SDR_QPC_HOP_LIMIT, ads, hop_limit, ads);
	AT(SDR_QPC_RGID, ads, rgid_rip, ads);
	FIELD(SDR_QPC_UDP_SPORT, ads, udp_sport, ads);
	FIELD(SDR_QPC_VHCA_PORT_NUM, ads, vhca_port_num, ads);
	FIELD(SDR_QPC_RMAC_47_32, ads, rmac_47_32, ads);
	FIELD(SDR_QPC_RMAC_31_0, ads, rmac_31_0, ads);
	FIELD(SDR_QPC_CQN_SND, qpc, cqn_snd, 0);
	FIELD(SDR_QPC_RWE, qpc, rwe, 0);
	FIELD(SDR_QPC_NEXT_RCV_PSN, qpc, next_rcv_psn, 0);
	FIELD(SDR_QPC_CQN_RCV, qpc, cqn_rcv, 0);
	AT(SDR_QPC_DBR_ADDR, qpc, dbr_addr, 0);
	FIELD(SDR_QPC_RQ_TYPE, qpc, rq_type, 0);
	FIELD(SDR_QPC_DBR_UMEM_VALID, qpc, dbr_umem_valid, 0);
	RESERVED(SDR_QPC_DBR_UMEM_ID, qpc, reserved_at_684, 0);

	/* create_mkey_in and the mkey context. */
	check("SDR_PRM_MKC", SDR_PRM_MKC, 0, BITOFF(create_mkey_in, memory_key_mkey_entry), 0);
	FIELD(SDR_PRM_TRANSLATIONS_ACTUAL, create_mkey_in, translations_octword_actual_size, 0);
	check("SDR_PRM_KLMS", SDR_PRM_KLMS, 0, BITOFF(create_mkey_in, klm_pas_mtt), 0);
	FIELD(SDR_MKC_ACCESS_MODE_4_2, mkc, access_mode_4_2, 0);
	FIELD(SDR_MKC_RW, mkc, rw, 0);
	FIELD(SDR_MKC_LW, mkc, lw, 0);
	FIELD(SDR_MKC_LR, mkc, lr, 0);
	FIELD(SDR_MKC_ACCESS_MODE_1_0, mkc, access_mode_1_0, 0);
	FIELD(SDR_MKC_QPN, mkc, qpn, 0);
	FIELD(SDR_MKC_MKEY_7_0, mkc, mkey_7_0, 0);
	FIELD(SDR_MKC_PD, mkc, pd, 0);
	AT(SDR_MKC_START_ADDR, mkc, start_addr, 0);
	AT(SDR_MKC_LEN, mkc, len, 0);
	FIELD(SDR_MKC_TRANSLATIONS, mkc, translations_octword_size, 0);

	/* Mailbox sizes: the commands' fixed parts fit. */
	/* Ours carries the QP context extension after the kernel's fixed part. */
	if (SDR_PRM_CREATE_QP_IN * 8 < BITOFF(create_qp_in, pas)) {
		printf("FAIL SDR_PRM_CREATE_QP_IN: %#x bytes, shorter than the kernel's fixed part (%#x)\n",
		       SDR_PRM_CREATE_QP_IN, BITOFF(create_qp_in, pas) / 8);
		failures++;
	}
	check("SDR_PRM_MODIFY_QP_IN", SDR_PRM_MODIFY_QP_IN * 8, 0, (uint32_t)sizeof(struct mlx5_ifc_rst2init_qp_in_bits), 0);
	check("SDR_PRM_MODIFY_QP_IN (init2rtr)", SDR_PRM_MODIFY_QP_IN * 8, 0, (uint32_t)sizeof(struct mlx5_ifc_init2rtr_qp_in_bits), 0);
	check("SDR_PRM_CREATE_MKEY_IN", SDR_PRM_CREATE_MKEY_IN * 8, 0, BITOFF(create_mkey_in, klm_pas_mtt), 0);
	check("SDR_PRM_QUERY_HCA_CAP_IN", SDR_PRM_QUERY_HCA_CAP_IN * 8, 0, (uint32_t)sizeof(struct mlx5_ifc_query_hca_cap_in_bits), 0);
	check("SDR_PRM_QUERY_HCA_CAP_OUT", SDR_PRM_QUERY_HCA_CAP_OUT * 8, 0, (uint32_t)sizeof(struct mlx5_ifc_query_hca_cap_out_bits), 0);

	/* Constants. */
	check("SDR_QPC_ST_UC", SDR_QPC_ST_UC, 0, MLX5_QPC_ST_UC, 0);
	check("SDR_QPC_PM_STATE_MIGRATED", SDR_QPC_PM_STATE_MIGRATED, 0, MLX5_QPC_PM_STATE_MIGRATED, 0);
	check("SDR_MKC_ACCESS_MODE_KLMS", SDR_MKC_ACCESS_MODE_KLMS, 0, MLX5_MKC_ACCESS_MODE_KLMS, 0);
	check("SDR_QPC_TS_FORMAT_DEFAULT", SDR_QPC_TS_FORMAT_DEFAULT, 0, MLX5_TIMESTAMP_FORMAT_DEFAULT, 0);
	check("SDR_QPC_TS_FORMAT_FREE_RUNNING", SDR_QPC_TS_FORMAT_FREE_RUNNING, 0, MLX5_TIMESTAMP_FORMAT_FREE_RUNNING, 0);
	check("SDR_PRM_QUERY_HCA_CAP", SDR_PRM_QUERY_HCA_CAP, 0, MLX5_CMD_OP_QUERY_HCA_CAP, 0);
	check("SDR_PRM_CREATE_QP", SDR_PRM_CREATE_QP, 0, MLX5_CMD_OP_CREATE_QP, 0);
	check("SDR_PRM_RST2INIT_QP", SDR_PRM_RST2INIT_QP, 0, MLX5_CMD_OP_RST2INIT_QP, 0);
	check("SDR_PRM_INIT2RTR_QP", SDR_PRM_INIT2RTR_QP, 0, MLX5_CMD_OP_INIT2RTR_QP, 0);
	check("SDR_PRM_2ERR_QP", SDR_PRM_2ERR_QP, 0, MLX5_CMD_OP_2ERR_QP, 0);
	check("SDR_PRM_CREATE_MKEY", SDR_PRM_CREATE_MKEY, 0, MLX5_CMD_OP_CREATE_MKEY, 0);

	if (failures)
		return 1;
	printf("ok prm_ifc\n");
	return 0;
}

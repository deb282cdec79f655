/*
 * prm_test.c — checks hwnic/dpa/prm.h's DevX mailbox writer against
 * byte vectors worked out by hand from the PRM layouts (the Linux
 * kernel's mlx5_ifc.h bit offsets: a field at bit b of width w sits in
 * big-endian byte b/8, b%8 bits below its top), not from the code: the
 * opcode, qpc fields of create_qp_in (st, pm_state, pd, mtu with
 * log_msg_max, remote_qpn, rwe, next_rcv_psn, cqn_rcv, dbr_addr), the
 * wq_umem fields, and create_mkey_in's mkc access bits, pd and KLM
 * count. Prints "ok prm" or the first mismatch.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "prm.h"

static int check(const uint8_t *buf, size_t off, const uint8_t *want, size_t n, const char *what)
{
	if (memcmp(buf + off, want, n) == 0)
		return 0;
	printf("%s: bytes at %#zx:", what, off);
	for (size_t i = 0; i < n; i++)
		printf(" %02x", buf[off + i]);
	printf(", want");
	for (size_t i = 0; i < n; i++)
		printf(" %02x", want[i]);
	printf("\n");
	return 1;
}

int main(void)
{
	uint8_t qp[SDR_PRM_CREATE_QP_IN] = {0};
	int bad = 0;
	SDR_SET(qp, 0, SDR_PRM_OPCODE, SDR_PRM_CREATE_QP);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_ST, SDR_QPC_ST_UC);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_PM_STATE, SDR_QPC_PM_STATE_MIGRATED);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_PD, 0xabcdef);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_MTU, 5);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_LOG_MSG_MAX, 30);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_REMOTE_QPN, 0x123456);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_RWE, 1);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_NEXT_RCV_PSN, 0x654321);
	SDR_SET(qp, SDR_PRM_QPC, SDR_QPC_CQN_RCV, 0xabc);
	sdr_prm_set64(qp, SDR_PRM_QPC + SDR_QPC_DBR_ADDR, 0x1122334455667788ull);
	SDR_SET(qp, 0, SDR_PRM_WQ_UMEM_ID, 0xdeadbeef);
	SDR_SET(qp, 0, SDR_PRM_WQ_UMEM_VALID, 1);
	/* create_qp_in: opcode in bytes 0-1; the qpc starts at byte 0x18. */
	bad |= check(qp, 0x00, (const uint8_t[]){0x05, 0x00}, 2, "opcode");
	bad |= check(qp, 0x19, (const uint8_t[]){0x01, 0x18}, 2, "st, pm_state");          /* qpc bits 0x08, 0x13 */
	bad |= check(qp, 0x1d, (const uint8_t[]){0xab, 0xcd, 0xef}, 3, "pd");              /* qpc bit 0x28 */
	bad |= check(qp, 0x20, (const uint8_t[]){0xbe}, 1, "mtu, log_msg_max");            /* qpc bits 0x40, 0x43 */
	bad |= check(qp, 0x2d, (const uint8_t[]){0x12, 0x34, 0x56}, 3, "remote_qpn");      /* qpc bit 0xa8 */
	bad |= check(qp, 0xaa, (const uint8_t[]){0x40}, 1, "rwe");                         /* qpc bit 0x491 */
	bad |= check(qp, 0xad, (const uint8_t[]){0x65, 0x43, 0x21}, 3, "next_rcv_psn");    /* qpc bit 0x4a8 */
	bad |= check(qp, 0xb5, (const uint8_t[]){0x00, 0x0a, 0xbc}, 3, "cqn_rcv");         /* qpc bit 0x4e8 */
	bad |= check(qp, 0xb8, (const uint8_t[]){0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}, 8, "dbr_addr");
	bad |= check(qp, 0x108, (const uint8_t[]){0xde, 0xad, 0xbe, 0xef, 0x80}, 5, "wq_umem_id, wq_umem_valid");
	if (sdr_prm_get(qp, SDR_PRM_QPC + 0x4a8, 24) != 0x654321 || sdr_prm_get(qp, SDR_PRM_OPCODE) != 0x500) {
		printf("get does not read what set wrote\n");
		bad = 1;
	}

	uint8_t mk[SDR_PRM_CREATE_MKEY_IN] = {0};
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_ACCESS_MODE_1_0, SDR_MKC_ACCESS_MODE_KLMS);
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_RW, 1);
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_LW, 1);
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_LR, 1);
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_PD, 0x000102);
	SDR_SET(mk, SDR_PRM_MKC, SDR_MKC_QPN, 0xffffff);
	SDR_SET(mk, 0, SDR_PRM_TRANSLATIONS_ACTUAL, 1024);
	/* create_mkey_in: the mkc starts at byte 0x10. */
	bad |= check(mk, 0x12, (const uint8_t[]){0x2e}, 1, "rw, lw, lr, access_mode_1_0"); /* mkc bits 0x12-0x17 */
	bad |= check(mk, 0x14, (const uint8_t[]){0xff, 0xff, 0xff, 0x00}, 4, "qpn");      /* mkc bit 0x20 */
	bad |= check(mk, 0x1d, (const uint8_t[]){0x00, 0x01, 0x02}, 3, "pd");             /* mkc bit 0x68 */
	bad |= check(mk, 0x60, (const uint8_t[]){0x00, 0x00, 0x04, 0x00}, 4, "translations_octword_actual_size");
	if (SDR_PRM_KLMS / 8 != SDR_PRM_CREATE_MKEY_IN || SDR_PRM_QPC + 0x740 != SDR_PRM_WQ_UMEM_OFFSET) {
		printf("mailbox sizes disagree with the layouts\n");
		bad = 1;
	}
	if (!bad)
		printf("ok prm\n");
	return 0;
}

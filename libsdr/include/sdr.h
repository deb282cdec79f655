/*
 * sdr.h - the SDR-RDMA SDK's C interface, implemented by libsdr over the
 * sdr project's backends (github.com/sdr-rdma/sdr): the emulated RoCEv2 NIC
 * (emunic, over AF_XDP or UDP) and the BlueField-3 DPA (builds with -tags dpa).
 *
 * Declarations match the public SDK's sdr.h, so programs written for the SDK
 * build unchanged; the text and the notes on behaviour are this project's.
 * Link with $(pkg-config --cflags --libs sdr).
 *
 * Devices. sdr_context_create's dev_name selects the backend:
 *   "udp:ADDR"    the emulated NIC on a UDP socket bound to local IPv4 ADDR
 *                 (RoCEv2 frames inside UDP datagrams; no privileges)
 *   "xsk:IFACE"   the emulated NIC on an AF_XDP socket of network interface
 *                 IFACE (real RoCEv2 frames; needs root)
 *   "pipe:NAME[/LINK]"
 *                 one end of an in-process link: the first context naming it
 *                 creates it, the second takes the other end; LINK models
 *                 both directions in the grammar of `sdr write-bw -link`
 *                 (e.g. "pipe:demo/loss=5%,delay=1ms"; no privileges)
 *   "dpa:MLX5DEV" a BlueField-3 (libsdr built with -tags dpa on a DOCA host)
 * The environment variable SDR_DEVICE, when set, replaces dev_name, so a
 * program that hard-codes "mlx5_0" runs on the emulated NIC with
 * SDR_DEVICE=udp:127.0.0.1. A NULL or empty dev_name without SDR_DEVICE
 * means "udp:127.0.0.1".
 *
 * Environment read by sdr_context_create (the SDK benchmark's variables):
 *   SDR_QP_NUM_GENERATIONS   generations per QP (default 2)
 *   SDR_USE_UC_QP            1: UC channel QPs; 0: RC channel QPs (emulated
 *                            NIC only); unset: the SDK's default, RC (the
 *                            SDK's sdr_write_bw.c reports RC unless --uc
 *                            sets 1), except on "dpa:", which has UC only
 *   SDR_RECV_CTX_N_ROOT_MKEYS, SDR_RECV_CTX_ROOT_MKEY_ENTRIES_FACTOR
 *                            accepted; our backends keep one root mkey per
 *                            generation with one entry per message ID
 *   SDR_NO_RC_RNR_RETRY, SDR_SEND_CTX_SWR_BATCH_SIZE,
 *   SDR_DPA_TX_OFFLOADING_ENABLE, SDR_DPA_TX_NUM_WORKERS,
 *   SDR_DPA_RX_PROFILE_STATS_REPORT, SDR_DPA_TX_PROFILE_STATS_REPORT
 *                            accepted and without effect (sends are posted
 *                            from the host; no profiling counters)
 * Each must be a non-negative integer when set; anything else fails
 * sdr_context_create.
 *
 * Errors. A call that fails returns NULL or SDR_ERROR and records why;
 * sdr_last_error (an addition of this library) returns the message.
 * SDR_RETRY means "no resources at the moment": the same call may succeed
 * later. A handle that is not (or no longer) valid is an error, never a
 * crash.
 *
 * Threads. Every call may be made from any thread; per call:
 *   sdr_recv_post, sdr_send_post, sdr_streaming_send_start: safe from
 *     several threads on one QP; the library serializes them, and the
 *     order in which they take the QP is the order of the messages.
 *   sdr_streaming_send_continue: safe from several threads on one stream
 *     (pieces may go in any order); sdr_streaming_send_end after them.
 *   sdr_recv_imm_get, sdr_recv_bitmap_get, sdr_recv_bitmap_chunk_expand,
 *     sdr_send_poll, sdr_qp_info_size_get, sdr_qp_info_get, sdr_mr_*key_get:
 *     safe at any time, while the library's threads deliver packets.
 *   sdr_recv_complete, sdr_send_poll reporting completion, sdr_mr_dereg,
 *     sdr_qp_destroy, sdr_context_destroy, sdr_qp_connect: release or
 *     change what a handle names; another thread's later call with that
 *     handle fails with SDR_ERROR, and a bitmap pointer of a completed
 *     receive must not be read any more.
 *   sdr_context_create, sdr_qp_create, sdr_mr_reg, sdr_last_error: safe.
 */
#ifndef _SDR_H_ /* the SDK's guard: a program may test it */
#define _SDR_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sdr_context;
struct sdr_qp;
struct sdr_send_handle;
struct sdr_recv_handle;

/* Return codes of every int-returning call. */
enum sdr_errcode {
    SDR_SUCCESS = 0, /* done */
    SDR_ERROR = 1,   /* failed; sdr_last_error says why */
    SDR_RETRY = 2    /* not now: no slot, credit or queue room, or not yet */
};

/* Path MTU. RoCEv2 (as ibv_mtu) starts at 256: sdr_qp_create refuses
   SDR_MTU_64 and SDR_MTU_128, which the SDK's enum lists, with a message. */
enum sdr_mtu {
    SDR_MTU_64,
    SDR_MTU_128,
    SDR_MTU_256,
    SDR_MTU_512,
    SDR_MTU_1024,
    SDR_MTU_2048,
    SDR_MTU_4096
};

/* Device attributes. */
struct sdr_dev_attr {
    uint32_t num_channels; /* transport QPs per generation carrying each SDR
                              QP's packets (1..64) */
    uint32_t log_max_qps;  /* at most 2^log_max_qps QPs on the context */
};

enum sdr_wr_opcode {
    SDR_WR_WRITE,          /* a message without immediate */
    SDR_WR_WRITE_WITH_IMM  /* a message carrying imm_value */
};

/* QP attributes; the peer's QP must have the same geometry. */
struct sdr_qp_attr {
    uint32_t bitmap_chunk_size_log_bytes; /* chunk: 2^n bytes, a multiple of
                                             the MTU, at most 64 MTUs */
    size_t max_in_flight_log_bytes;       /* 2^n bytes of posted receives and
                                             open sends; a message holds at
                                             most 2^(n - max_log_num_msgs) */
    uint32_t max_log_num_msgs;            /* 2^n receives posted at once */
    enum sdr_mtu mtu;
    uint8_t send_enable;
    uint8_t recv_enable;
    uint32_t rate_limit;                  /* pacing per channel in kbit/s, as
                                             ibv_qp_attr.rate_limit; 0: none */
};

/* One whole message. */
struct sdr_send_wr {
    enum sdr_wr_opcode opcode;
    uint32_t imm_value;     /* with SDR_WR_WRITE_WITH_IMM */
    uint32_t length;        /* bytes */
    uint32_t lkey;          /* of the registration holding local_addr */
    uint64_t local_addr;
    uint64_t remote_offset; /* in bitmap chunks; must be 0 here (a message's
                               pieces at other offsets go through the
                               streaming calls) */
};

/* Opens a streamed message. */
struct sdr_send_start_wr {
    enum sdr_wr_opcode opcode;
    uint32_t imm_value;
};

/* A piece of a streamed message. */
struct sdr_send_continue_wr {
    uint32_t length;        /* a multiple of the MTU unless the piece ends
                               the message's slot */
    uint64_t local_addr;
    uint32_t lkey;
    uint64_t remote_offset; /* in bitmap chunks */
};

/* A receive buffer for the next message the peer sends. */
struct sdr_recv_wr {
    uint32_t max_length;
    uint32_t lkey;
    uint64_t address;
};

/* Send status; no flags are defined. */
struct sdr_send_status {
    uint32_t flags;
};

/* Opens a device (see "Devices" above). NULL on failure. */
struct sdr_context *sdr_context_create(const char *dev_name, struct sdr_dev_attr *dev_attr);

/* Closes the device with every QP, registration and handle made from it. */
int sdr_context_destroy(struct sdr_context *context);

/* Creates a QP. NULL on failure (bad attributes, too many QPs). */
struct sdr_qp *sdr_qp_create(struct sdr_context *ctx, struct sdr_qp_attr *qp_attr);

/* Destroys a QP and invalidates its handles. */
int sdr_qp_destroy(struct sdr_qp *qp);

/* The size of the opaque QP information sdr_qp_info_get writes. */
int sdr_qp_info_size_get(struct sdr_qp *qp, size_t *info_size);

/* Writes the QP's information, to hand to the peer's sdr_qp_connect out of
   band (e.g. over TCP). */
int sdr_qp_info_get(struct sdr_qp *qp, void *info);

/* Connects the QP to the peer whose information this is. Fails (and the QP
   stays unconnected) on malformed information or another geometry. */
int sdr_qp_connect(struct sdr_qp *qp, void *remote_qp_info);

/* Posts max_length bytes at address (inside the registration of lkey) as the
   buffer of the next message the peer sends. SDR_RETRY while that message's
   slot still holds an uncompleted receive or the in-flight bytes are used. */
int sdr_recv_post(struct sdr_qp *qp, struct sdr_recv_wr *wr,
                  struct sdr_recv_handle **handle);

/* The message's immediate; SDR_RETRY until all of it arrived. */
int sdr_recv_imm_get(struct sdr_recv_handle *handle, uint32_t *immediate);

/* A pointer to the receive's chunk bitmap (bit i of byte i/8 for chunk i)
   and its size in bytes. The memory is where the library records chunk
   completions: the pointer stays valid, and its bits only go from 0 to 1,
   until sdr_recv_complete; poll it without calling the library. A
   zero-length receive has no bitmap (NULL, 0). */
int sdr_recv_bitmap_get(struct sdr_recv_handle *handle, uint8_t **bitmap_bytes,
                        size_t *bitmap_num_bytes);

/* Writes chunk chunk_offset's packet bitmap (bit k: packet k of the chunk
   arrived) to one uint64_t at bitmap; chunks hold at most 64 packets. */
int sdr_recv_bitmap_chunk_expand(struct sdr_recv_handle *handle, uint32_t chunk_offset,
                                 uint64_t *bitmap);

/* Releases the receive (complete or not): no packet writes its buffer once
   this returns, and the handle and its bitmap pointer are invalid. Every
   posted receive must be completed. */
int sdr_recv_complete(struct sdr_recv_handle *handle);

/* Sends one message, all of it or nothing, from the start of the peer's
   receive buffer (remote_offset 0; anything else is SDR_ERROR). SDR_RETRY
   when the QP has no free message (slots or in-flight bytes) at the moment.
   It returns once the message is queued; the library's send thread injects
   it, in posting order: leave the buffer unchanged until sdr_send_poll
   reports the send complete. */
int sdr_send_post(struct sdr_qp *qp, struct sdr_send_wr *wr,
                  struct sdr_send_handle **handle);

/* Opens a streamed message: it takes the next message number, so the
   peer's next posted receive is its. Its pieces follow with
   sdr_streaming_send_continue, in any order, and sdr_streaming_send_end
   closes it (sending the immediate where no piece carried it). */
int sdr_streaming_send_start(struct sdr_qp *qp, struct sdr_send_start_wr *wr,
                             struct sdr_send_handle **handle);

/* Sends a piece of a streamed message, all of it or nothing; SDR_RETRY when
   the transmit queue is full for now. Resending a piece is allowed. */
int sdr_streaming_send_continue(struct sdr_send_handle *handle, struct sdr_send_continue_wr *wr);

/* Closes a streamed message. */
int sdr_streaming_send_end(struct sdr_send_handle *handle);

/* Whether the send was injected (handed to the wire; not "delivered": that
   is what the peer's bitmap says). SDR_SUCCESS with *completed_flag = 1
   once it was, after which the handle is invalid; SDR_RETRY with
   *completed_flag = 0 for a posted message not yet injected or a stream
   not yet ended; SDR_ERROR with *completed_flag = 1 for a posted message
   that failed (its QP destroyed or broken before it left), the handle
   released. status may be NULL. */
int sdr_send_poll(struct sdr_send_handle *handle, int *completed_flag,
                  struct sdr_send_status *status);

/* Addition of this library, the counterpart of ibv_comp_channel for event
   loops: *fd is a descriptor (an eventfd, non-blocking, close-on-exec) that
   becomes readable when one of the QP's receives progresses (a chunk or the
   immediate completes, or the message is longer than the buffer) or a
   message sdr_send_post queued completes. A stream completes in
   sdr_streaming_send_end, with no event. The first call creates it; events
   before are not signalled, so poll the handles once after it. The QP owns
   it: do not close it; sdr_qp_destroy does. Events coalesce: after one,
   nothing more is written until sdr_qp_event_ack. A loop: wait for POLLIN
   (epoll, poll), sdr_qp_event_ack, then poll the handles (sdr_send_poll,
   sdr_recv_bitmap_get, sdr_recv_imm_get) -- an event after the ack wakes the
   loop again, one before it is what that poll finds. */
int sdr_qp_event_fd_get(struct sdr_qp *qp, int *fd);

/* Addition of this library: empties the QP's event descriptor and re-arms
   it (see sdr_qp_event_fd_get). SDR_ERROR before sdr_qp_event_fd_get. */
int sdr_qp_event_ack(struct sdr_qp *qp);

/* Addition of this library: copies the message of the last failed call (of
   any thread) into buf, NUL-terminated within size bytes, and returns its
   full length; 0 when nothing failed yet. */
size_t sdr_last_error(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* _SDR_H_ */

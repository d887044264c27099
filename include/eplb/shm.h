/* eplb/shm.h — the shared-memory segment between a serving runtime and the
 * eplbd daemon.
 *
 * Rank 0 of a runtime creates one POSIX shared-memory segment per
 * deployment, publishes its windowed statistics into it, and takes new plans
 * from a mailbox in it; eplbd opens the segment, reads the statistics and
 * posts plans. Both sides use only the functions below; the layout is public
 * so that other languages can read it, and is fixed by this header.
 *
 * Layout (host byte order, all offsets from the start of the segment):
 *   [0, 256)                       eplb_shm_header_t
 *   [stats_offset, +8*L*E)          double counts[L][E]: tokens routed to
 *                                   (layer, expert) summed over the runtime's
 *                                   window (window_steps steps ending at step)
 *   [mailbox_offset, +mailbox_bytes) the plan mailbox: one plan block
 * stats_offset = 256; mailbox_offset = stats_offset + 8*L*E rounded up to 64;
 * segment_bytes = mailbox_offset + mailbox_bytes.
 *
 * Plan block (binary, mailbox_length bytes, everything 8-byte aligned):
 *   eplb_shm_plan_block_t                 (24 bytes)
 *   uint32_t slots_per_gpu[G]             padded to a multiple of 8 bytes
 *   int32_t  phy2log[L][R]                padded to a multiple of 8 bytes
 *   double   share[L][R]
 * A block is accepted only if its shape matches the segment's L and E, the
 * slots sum to R, every id is an expert, every expert has a replica and each
 * expert's shares sum to 1 (the checks of eplb_plan_read).
 *
 * Consistency: the statistics and the mailbox each have a sequence number
 * used as a seqlock. A writer takes it from even to odd with a
 * compare-and-swap (a second writer gets EPLB_EBUSY), writes, and makes it
 * even again (release). A reader copies the data between two reads of the
 * sequence and retries when it was odd or changed; after a bounded number of
 * tries it reports EPLB_EBUSY. One writer per area is the intended use (the
 * runtime writes statistics, the daemon writes the mailbox); a writer that
 * dies mid-write leaves the area odd, which readers report as EPLB_EBUSY.
 *
 * Validation: every read (not only open) checks the magic, the version, the
 * header size, L and E against the limits of trace.h, and that the offsets
 * and sizes the header claims fit the length the segment had when opened;
 * statistics must be finite and >= 0. A malformed or hostile segment gives
 * EPLB_EFORMAT with a detail naming the segment and the field.
 *
 * Truncation: any process of the user may shrink the segment at any moment,
 * and touching a mapped page past the new end kills the process (SIGBUS).
 * So a handle from eplb_shm_open never maps the segment: it reads and writes
 * with pread/pwrite on its descriptor, and a segment whose size is not the
 * one it had at open (or that shrinks during a copy) gives EPLB_EFORMAT for
 * that call; a later call succeeds again once the segment is whole. Such a
 * handle excludes other opened writers with flock(2) on the segment. The
 * creator's handle works on its mapping (no system call in the serving
 * loop) and so relies on nobody truncating the segment it owns.
 *
 * Threads: a handle may be used by one thread at a time; any number of
 * processes may map the same segment.
 */
#ifndef EPLB_SHM_H
#define EPLB_SHM_H

#include "eplb/common.h"
#include "eplb/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EPLB_SHM_MAGIC UINT64_C(0x314d4853424c5045) /* bytes "EPLBSHM1" (little-endian) */
#define EPLB_SHM_VERSION 1u
#define EPLB_SHM_HEADER_BYTES 256u
/* Default mailbox capacity (enough for 64 layers x 512 slots). */
#define EPLB_SHM_DEFAULT_MAILBOX_BYTES (4u << 20)
/* Largest mailbox accepted when creating or opening (1 GiB). */
#define EPLB_SHM_MAX_MAILBOX_BYTES (UINT64_C(1) << 30)

/* The header at offset 0 (256 bytes). Fields marked "seq" are written under
 * the corresponding sequence number. Do not write them directly: use the
 * functions below. */
typedef struct eplb_shm_header {
  uint64_t magic;          /* EPLB_SHM_MAGIC */
  uint32_t version;        /* EPLB_SHM_VERSION */
  uint32_t header_bytes;   /* EPLB_SHM_HEADER_BYTES */
  uint64_t segment_bytes;  /* total length */
  uint32_t num_layers;     /* L */
  uint32_t num_experts;    /* E */
  uint64_t stats_offset;   /* offset of counts[L][E] */
  uint64_t mailbox_offset; /* offset of the mailbox */
  uint64_t mailbox_bytes;  /* mailbox capacity */
  uint64_t stats_seq;      /* seqlock of the statistics (even: stable) */
  uint64_t step;           /* seq: last step included in counts */
  uint64_t window_steps;   /* seq: steps summed in counts */
  int64_t updated_ns;      /* seq: CLOCK_REALTIME of the last publish, nanoseconds */
  uint64_t mailbox_seq;    /* seqlock of the mailbox (even: stable) */
  uint64_t mailbox_epoch;  /* seq: epoch of the posted plan, 0 = empty */
  uint64_t mailbox_length; /* seq: bytes of the posted plan block */
  uint64_t applied_epoch;  /* epoch the runtime reports in force (eplb_shm_ack_plan) */
  uint32_t creator_pid;    /* process that created the segment */
  uint32_t reserved0;
  uint8_t reserved[128]; /* zero */
} eplb_shm_header_t;

/* Start of a plan block in the mailbox (24 bytes). */
typedef struct eplb_shm_plan_block {
  uint32_t num_layers;  /* L (= the segment's) */
  uint32_t num_experts; /* E (= the segment's) */
  uint32_t num_gpus;    /* G >= 1 */
  uint32_t num_nodes;   /* N >= 1, G % N == 0 */
  uint32_t num_slots;   /* R = sum of slots_per_gpu, R >= E */
  uint32_t reserved;    /* zero */
} eplb_shm_plan_block_t;

typedef struct eplb_shm eplb_shm_t;

/* A consistent snapshot of the statistics' header fields. */
typedef struct eplb_shm_stats_info {
  uint64_t sequence;      /* stats_seq of the snapshot (grows by 2 per publish; 0 = never) */
  uint64_t step;          /* last step in the window */
  uint64_t window_steps;  /* steps in the window */
  int64_t updated_ns;     /* CLOCK_REALTIME of the publish, ns (0 = never) */
  uint64_t applied_epoch; /* plan epoch the runtime says is in force */
} eplb_shm_stats_info_t;

typedef enum eplb_shm_access {
  EPLB_SHM_READ = 0,      /* read statistics and the mailbox */
  EPLB_SHM_READ_WRITE = 1 /* also post plans / publish statistics */
} eplb_shm_access_t;

/* Creates segment `name` ("/eplb-deploy0": a leading slash, no other) with
 * shm_open(O_CREAT | O_EXCL, 0600), sizes and maps it, and writes the header.
 * mailbox_bytes 0 means EPLB_SHM_DEFAULT_MAILBOX_BYTES. Returns EPLB_OK,
 * EPLB_EINVAL (bad name, L or E of 0), EPLB_ERANGE (beyond the limits),
 * EPLB_EBUSY (the name exists: remove a stale one with eplb_shm_unlink),
 * EPLB_EIO, EPLB_ENOMEM. The creator's handle is read-write. */
EPLB_API eplb_status_t eplb_shm_create(const char *name, uint32_t num_layers, uint32_t num_experts,
                                       uint64_t mailbox_bytes, eplb_shm_t **out);

/* Opens an existing segment and validates its header against its length.
 * Returns EPLB_OK, EPLB_EIO (no such segment, no permission), EPLB_EFORMAT
 * (bad magic, version or sizes; the detail names the field), EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_shm_open(const char *name, eplb_shm_access_t access, eplb_shm_t **out);

/* Unmaps and closes (does not remove the name). NULL is a no-op. */
EPLB_API void eplb_shm_close(eplb_shm_t *shm);

/* Removes the name (existing mappings stay valid). EPLB_EIO if it fails. */
EPLB_API eplb_status_t eplb_shm_unlink(const char *name);

/* Shape given at create (as validated at open). */
EPLB_API uint32_t eplb_shm_num_layers(const eplb_shm_t *shm);
EPLB_API uint32_t eplb_shm_num_experts(const eplb_shm_t *shm);

/* The mailbox's capacity in bytes (the header's mailbox_bytes), and the
 * bytes of the plan block a plan of num_layers x num_slots on num_gpus
 * takes there (layout above; 0 when it overflows): a publisher can tell
 * before planning whether its plans will fit. */
EPLB_API uint64_t eplb_shm_mailbox_bytes(const eplb_shm_t *shm);
EPLB_API uint64_t eplb_shm_plan_block_bytes(uint32_t num_layers, uint32_t num_gpus,
                                            uint64_t num_slots);

/* Runtime side: copies counts[L][E] (finite, >= 0) into the segment under
 * the statistics seqlock, with the step and window length. EPLB_EINVAL
 * (read-only handle, NULL), EPLB_EFORMAT (bad value or header),
 * EPLB_EBUSY (another writer is active). Wait-free otherwise: on the
 * creator's handle no system call, suitable for the serving loop. */
EPLB_API eplb_status_t eplb_shm_publish_stats(eplb_shm_t *shm, uint64_t step, uint64_t window_steps,
                                              const double *counts);

/* Daemon side: copies a consistent snapshot of counts[L][E] into `counts`
 * (may be NULL to read only `info`) and its header fields into *info.
 * EPLB_EFORMAT (header or value invalid), EPLB_EBUSY (no stable snapshot
 * after bounded retries). */
EPLB_API eplb_status_t eplb_shm_read_stats(eplb_shm_t *shm, eplb_shm_stats_info_t *info,
                                           double *counts);

/* Daemon side: serialises the plan (its L and E must match: EPLB_ESHAPE)
 * into the mailbox with `epoch` (> 0; larger than the previous post's,
 * else EPLB_EINVAL). EPLB_ERANGE if the block does not fit the mailbox. */
EPLB_API eplb_status_t eplb_shm_post_plan(eplb_shm_t *shm, const eplb_plan_t *plan, uint64_t epoch);

/* Epoch of the plan in the mailbox (0 = none) without copying it: cheap
 * enough to call every step (on the creator's handle, no system call). */
EPLB_API eplb_status_t eplb_shm_mailbox_epoch(eplb_shm_t *shm, uint64_t *epoch);

/* Runtime side: reads and validates the posted plan. *out is NULL and
 * *epoch 0 when the mailbox is empty; otherwise *out is a new plan owned by
 * the caller (no loads: metrics are zero until eplb_plan_evaluate).
 * EPLB_EFORMAT/ESHAPE/ERANGE for a bad block (nothing is returned). */
EPLB_API eplb_status_t eplb_shm_read_plan(eplb_shm_t *shm, uint64_t *epoch, eplb_plan_t **out);

/* Runtime side: records that `epoch` is now in force (shown by the daemon). */
EPLB_API eplb_status_t eplb_shm_ack_plan(eplb_shm_t *shm, uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_SHM_H */

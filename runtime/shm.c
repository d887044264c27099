/* runtime/shm.c — the shared-memory segment between a runtime (rank 0) and
 * eplbd: statistics under a seqlock and a plan mailbox (layout in
 * include/eplb/shm.h). Every access re-validates the header because the
 * other side may be buggy or hostile.
 *
 * Two ways to reach the bytes. The creator (the runtime) uses its own
 * mapping: no system call in the serving loop. An opened handle (the daemon)
 * never maps the segment: it reads and writes with pread/pwrite on its
 * descriptor. Any process of the user may truncate the segment at any time,
 * and a load from a mapped page past the new end raises SIGBUS however
 * recently the size was checked, whereas pread past the end just comes back
 * short, which is reported as EPLB_EFORMAT. */
#include "core/core.h"
#include "eplb/shm.h"
#include "planner/planner.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(eplb_shm_header_t) == EPLB_SHM_HEADER_BYTES, "shm header is 256 bytes");
_Static_assert(sizeof(eplb_shm_plan_block_t) == 24, "plan block header is 24 bytes");

/* Readers give up after this many unstable snapshots (a writer that died
 * mid-write, or one publishing faster than we can copy). */
#define READ_TRIES 256

struct eplb_shm {
  char name[256];
  int writable;
  uint8_t *base; /* the creator's mapping; NULL for an opened handle */
  uint64_t length;
  uint32_t num_layers, num_experts;
  uint64_t mailbox_offset, mailbox_bytes;
  int fd; /* an opened handle's descriptor (every access goes through it); -1 for the creator */
};

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static uint64_t round64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }
static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static eplb_shm_header_t *hdr(const eplb_shm_t *shm) { return (eplb_shm_header_t *)shm->base; }

#define OFF(field) offsetof(eplb_shm_header_t, field)

/* Copies len bytes at off out of the segment into `to`, or from `from`
 * into it (exactly one is non-NULL). An opened handle's short transfer
 * means that the segment shrank under it. */
static eplb_status_t seg_io(const eplb_shm_t *shm, uint64_t off, void *to, const void *from,
                            size_t len) {
  if (shm->base) {
    memcpy(to ? to : shm->base + off, to ? shm->base + off : from, len);
    return EPLB_OK;
  }
  for (size_t done = 0; done < len;) {
    off_t at = (off_t)(off + done);
    ssize_t k = to ? pread(shm->fd, (uint8_t *)to + done, len - done, at)
                   : pwrite(shm->fd, (const uint8_t *)from + done, len - done, at);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return eplb__error(EPLB_EFORMAT, "shm", "%s: %s %zu bytes at offset %llu: %s", shm->name,
                         to ? "reading" : "writing", len, (unsigned long long)off,
                         k < 0 ? strerror(errno) : "the segment shrank");
    done += (size_t)k;
  }
  return EPLB_OK;
}

static eplb_status_t seg_read(const eplb_shm_t *shm, uint64_t off, void *to, size_t len) {
  return seg_io(shm, off, to, NULL, len);
}

static eplb_status_t seg_write(eplb_shm_t *shm, uint64_t off, const void *from, size_t len) {
  return seg_io(shm, off, NULL, from, len);
}

/* One 64-bit header word, relaxed, or acquire (later reads stay after it). */
static eplb_status_t get64(const eplb_shm_t *shm, size_t off, uint64_t *v, int acquire) {
  if (shm->base) {
    uint64_t *p = (uint64_t *)(void *)(shm->base + off);
    *v = acquire ? LOAD_ACQ(p) : LOAD(p);
    return EPLB_OK;
  }
  eplb_status_t st = seg_read(shm, off, v, sizeof *v);
  /* The kernel's copy ran in this thread: the fence orders it before the
   * loads of the next pread, as LOAD_ACQ does for the mapping. */
  if (acquire)
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return st;
}

/* One 64-bit header word, relaxed, or release (earlier writes stay before it). */
static eplb_status_t put64(eplb_shm_t *shm, size_t off, uint64_t v, int release) {
  if (shm->base) {
    uint64_t *p = (uint64_t *)(void *)(shm->base + off);
    if (release)
      STORE_REL(p, v);
    else
      STORE(p, v);
    return EPLB_OK;
  }
  if (release)
    __atomic_thread_fence(__ATOMIC_RELEASE);
  return seg_write(shm, off, &v, sizeof v);
}

/* A copy of the header, word by word with relaxed loads from the mapping
 * (fields change under us: no torn word, no data race), or one pread. */
static eplb_status_t read_header(const eplb_shm_t *shm, eplb_shm_header_t *h) {
  if (!shm->base)
    return seg_read(shm, 0, h, sizeof *h);
  uint64_t w[sizeof *h / 8];
  const uint64_t *src = (const uint64_t *)(const void *)shm->base;
  for (size_t i = 0; i < sizeof w / sizeof *w; i++)
    w[i] = LOAD(&src[i]);
  memcpy(h, w, sizeof *h);
  return EPLB_OK;
}

/* An opened handle's segment must still have the length it had at open: a
 * segment that changed size is bad for this access (it may be back to its
 * size and contents by the next). */
static eplb_status_t check_length(const eplb_shm_t *shm) {
  struct stat sb;
  if (shm->base)
    return EPLB_OK;
  if (fstat(shm->fd, &sb))
    return eplb__error(EPLB_EIO, "shm", "%s: fstat: %s", shm->name, strerror(errno));
  if ((uint64_t)sb.st_size != shm->length)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: the segment changed size to %lld bytes (was %llu)",
                       shm->name, (long long)sb.st_size, (unsigned long long)shm->length);
  return EPLB_OK;
}

static eplb_status_t check_name(const char *name) {
  if (!name || name[0] != '/' || !name[1] || strchr(name + 1, '/') || strlen(name) >= 256)
    return eplb__error(EPLB_EINVAL, "shm", "segment name \"%s\": expected \"/NAME\" (no other '/')",
                       name ? name : "(null)");
  return EPLB_OK;
}

/* Mailbox offset for a shape, 0 on overflow or beyond the limits. */
static uint64_t layout(uint32_t L, uint32_t E) {
  if (!L || !E || L > EPLB_TRACE_MAX_LAYERS || E > EPLB_TRACE_MAX_EXPERTS)
    return 0;
  return round64(EPLB_SHM_HEADER_BYTES + (uint64_t)L * E * sizeof(double));
}

/* Checks the header against what this handle opened. Called on every access. */
static eplb_status_t validate(const eplb_shm_t *shm) {
  eplb_shm_header_t h;
  const char *n = shm->name;
  eplb_status_t st = check_length(shm);
  if (st || (st = read_header(shm, &h)))
    return st;
  if (h.magic != EPLB_SHM_MAGIC)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: bad magic", n);
  if (h.version != EPLB_SHM_VERSION)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: unsupported version %u (expected %u)", n,
                       h.version, EPLB_SHM_VERSION);
  if (h.header_bytes != EPLB_SHM_HEADER_BYTES)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: header_bytes %u (expected %u)", n, h.header_bytes,
                       EPLB_SHM_HEADER_BYTES);
  if (h.num_layers != shm->num_layers || h.num_experts != shm->num_experts)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: shape changed to %u x %u (was %u x %u)", n,
                       h.num_layers, h.num_experts, shm->num_layers, shm->num_experts);
  if (h.segment_bytes != shm->length)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: segment_bytes %llu but the segment has %llu", n,
                       (unsigned long long)h.segment_bytes, (unsigned long long)shm->length);
  if (h.stats_offset != EPLB_SHM_HEADER_BYTES || h.mailbox_offset != shm->mailbox_offset ||
      h.mailbox_bytes != shm->mailbox_bytes)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: offsets or mailbox_bytes inconsistent", n);
  return EPLB_OK;
}

static eplb_status_t map_segment(eplb_shm_t *shm, int fd, int prot) {
  void *p = mmap(NULL, (size_t)shm->length, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return eplb__error(EPLB_EIO, "shm", "%s: mmap: %s", shm->name, strerror(errno));
  shm->base = p;
  return EPLB_OK;
}

eplb_status_t eplb_shm_create(const char *name, uint32_t num_layers, uint32_t num_experts,
                              uint64_t mailbox_bytes, eplb_shm_t **out) {
  eplb_status_t st;
  if (!out)
    return eplb__error(EPLB_EINVAL, "shm", "create: NULL argument");
  *out = NULL;
  if ((st = check_name(name)))
    return st;
  if (!num_layers || !num_experts)
    return eplb__error(EPLB_EINVAL, "shm", "%s: %u layers x %u experts", name, num_layers,
                       num_experts);
  uint64_t moff = layout(num_layers, num_experts);
  if (!mailbox_bytes)
    mailbox_bytes = EPLB_SHM_DEFAULT_MAILBOX_BYTES;
  if (!moff || mailbox_bytes > EPLB_SHM_MAX_MAILBOX_BYTES)
    return eplb__error(EPLB_ERANGE, "shm", "%s: %u layers x %u experts, mailbox %llu bytes", name,
                       num_layers, num_experts, (unsigned long long)mailbox_bytes);
  eplb_shm_t *shm = eplb__calloc(1, sizeof *shm);
  if (!shm)
    return eplb__error(EPLB_ENOMEM, "shm", "%s: out of memory", name);
  snprintf(shm->name, sizeof shm->name, "%s", name);
  shm->writable = 1;
  shm->fd = -1;
  shm->num_layers = num_layers;
  shm->num_experts = num_experts;
  shm->mailbox_offset = moff;
  shm->mailbox_bytes = round64(mailbox_bytes);
  shm->length = moff + shm->mailbox_bytes;
  int created = 0;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    st = eplb__error(errno == EEXIST ? EPLB_EBUSY : EPLB_EIO, "shm", "%s: cannot create: %s", name,
                     strerror(errno));
    goto fail;
  }
  created = 1;
  /* The umask may only remove bits; fchmod makes 0600 exact whatever it is. */
  if (fchmod(fd, 0600) || ftruncate(fd, (off_t)shm->length)) {
    st = eplb__error(EPLB_EIO, "shm", "%s: cannot size: %s", name, strerror(errno));
    goto fail;
  }
  if ((st = map_segment(shm, fd, PROT_READ | PROT_WRITE)))
    goto fail;
  close(fd);
  fd = -1;
  eplb_shm_header_t *h = hdr(shm);
  h->version = EPLB_SHM_VERSION;
  h->header_bytes = EPLB_SHM_HEADER_BYTES;
  h->segment_bytes = shm->length;
  h->num_layers = num_layers;
  h->num_experts = num_experts;
  h->stats_offset = EPLB_SHM_HEADER_BYTES;
  h->mailbox_offset = shm->mailbox_offset;
  h->mailbox_bytes = shm->mailbox_bytes;
  h->creator_pid = (uint32_t)getpid();
  /* The magic goes last: an opener that races the creation sees no magic. */
  STORE_REL(&h->magic, EPLB_SHM_MAGIC);
  *out = shm;
  return EPLB_OK;
fail:
  if (fd >= 0)
    close(fd);
  if (created)
    shm_unlink(name);
  eplb__free(shm);
  return st;
}

eplb_status_t eplb_shm_open(const char *name, eplb_shm_access_t access, eplb_shm_t **out) {
  eplb_status_t st;
  if (!out)
    return eplb__error(EPLB_EINVAL, "shm", "open: NULL argument");
  *out = NULL;
  if ((st = check_name(name)))
    return st;
  eplb_shm_t *shm = eplb__calloc(1, sizeof *shm);
  if (!shm)
    return eplb__error(EPLB_ENOMEM, "shm", "%s: out of memory", name);
  snprintf(shm->name, sizeof shm->name, "%s", name);
  shm->writable = access == EPLB_SHM_READ_WRITE;
  shm->fd = -1;
  /* O_NONBLOCK: anyone may put a FIFO under the name, and opening it for
   * reading would wait for a writer for ever. */
  int fd = shm_open(name, (shm->writable ? O_RDWR : O_RDONLY) | O_NONBLOCK, 0);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb)) {
    st = eplb__error(EPLB_EIO, "shm", "%s: cannot open: %s", name, strerror(errno));
    goto fail;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = eplb__error(EPLB_EFORMAT, "shm", "%s: not a shared-memory segment", name);
    goto fail;
  }
  if (sb.st_size < (off_t)EPLB_SHM_HEADER_BYTES) {
    st = eplb__error(EPLB_EFORMAT, "shm", "%s: %lld bytes is shorter than the header", name,
                     (long long)sb.st_size);
    goto fail;
  }
  shm->length = (uint64_t)sb.st_size;
  shm->fd = fd; /* no mapping: see the top of the file */
  fd = -1;
  eplb_shm_header_t h;
  if ((st = read_header(shm, &h)))
    goto fail;
  shm->num_layers = h.num_layers;
  shm->num_experts = h.num_experts;
  shm->mailbox_offset = layout(shm->num_layers, shm->num_experts);
  if (!shm->mailbox_offset) {
    st = eplb__error(EPLB_EFORMAT, "shm", "%s: bad shape %u layers x %u experts", name,
                     shm->num_layers, shm->num_experts);
    goto fail;
  }
  if (shm->mailbox_offset > shm->length ||
      shm->length - shm->mailbox_offset > EPLB_SHM_MAX_MAILBOX_BYTES) {
    st = eplb__error(EPLB_EFORMAT, "shm", "%s: %llu bytes do not fit %u layers x %u experts", name,
                     (unsigned long long)shm->length, shm->num_layers, shm->num_experts);
    goto fail;
  }
  shm->mailbox_bytes = shm->length - shm->mailbox_offset;
  if ((st = validate(shm)))
    goto fail;
  *out = shm;
  return EPLB_OK;
fail:
  if (fd >= 0)
    close(fd);
  if (shm->fd >= 0)
    close(shm->fd);
  eplb__free(shm);
  return st;
}

void eplb_shm_close(eplb_shm_t *shm) {
  if (!shm)
    return;
  if (shm->base)
    munmap(shm->base, (size_t)shm->length);
  if (shm->fd >= 0)
    close(shm->fd);
  eplb__free(shm);
}

eplb_status_t eplb_shm_unlink(const char *name) {
  eplb_status_t st = check_name(name);
  if (st)
    return st;
  if (shm_unlink(name))
    return eplb__error(EPLB_EIO, "shm", "%s: cannot remove: %s", name, strerror(errno));
  return EPLB_OK;
}

uint32_t eplb_shm_num_layers(const eplb_shm_t *shm) { return shm ? shm->num_layers : 0; }
uint32_t eplb_shm_num_experts(const eplb_shm_t *shm) { return shm ? shm->num_experts : 0; }

/* Seqlock write side: even -> odd so that two writers never interleave.
 * The creator takes the sequence by compare-and-swap on its mapping. An
 * opened handle cannot compare-and-swap through a descriptor: it holds an
 * exclusive flock instead (another opened handle gets EPLB_EBUSY) and
 * refuses an odd sequence (the creator, or a writer that died, is in). */
static eplb_status_t write_begin(eplb_shm_t *shm, size_t off, uint64_t *seq) {
  uint64_t s = 0;
  eplb_status_t st = EPLB_OK;
  if (shm->base) {
    uint64_t *p = (uint64_t *)(void *)(shm->base + off);
    s = LOAD(p);
    if ((s & 1) ||
        !__atomic_compare_exchange_n(p, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
      st = EPLB_EBUSY;
  } else if (flock(shm->fd, LOCK_EX | LOCK_NB)) {
    if (errno != EWOULDBLOCK)
      return eplb__error(EPLB_EIO, "shm", "%s: flock: %s", shm->name, strerror(errno));
    st = EPLB_EBUSY;
  } else {
    if (!(st = get64(shm, off, &s, 1)) && (s & 1))
      st = EPLB_EBUSY;
    if (!st)
      st = put64(shm, off, s + 1, 0);
    if (st)
      flock(shm->fd, LOCK_UN);
  }
  if (st == EPLB_EBUSY)
    return eplb__error(EPLB_EBUSY, "shm", "%s: another writer is active", shm->name);
  if (st)
    return st;
  /* Orders the odd sequence before the data stores that follow. */
  __atomic_thread_fence(__ATOMIC_RELEASE);
  *seq = s + 2;
  return EPLB_OK;
}

/* Makes the sequence even again after the data (release), also after a
 * failed write: a segment cut under us is invalid by its size already,
 * whereas an odd sequence would refuse every later writer. Returns the
 * first error. */
static eplb_status_t write_end(eplb_shm_t *shm, size_t off, uint64_t seq, eplb_status_t st) {
  eplb_status_t end = put64(shm, off, seq, 1);
  if (!shm->base)
    flock(shm->fd, LOCK_UN);
  return st ? st : end;
}

static eplb_status_t check_writable(const eplb_shm_t *shm, const char *what) {
  if (!shm->writable)
    return eplb__error(EPLB_EINVAL, "shm", "%s: %s: the handle is read-only", shm->name, what);
  return validate(shm);
}

eplb_status_t eplb_shm_publish_stats(eplb_shm_t *shm, uint64_t step, uint64_t window_steps,
                                     const double *counts) {
  if (!shm || !counts)
    return eplb__error(EPLB_EINVAL, "shm", "publish: NULL argument");
  eplb_status_t st = check_writable(shm, "publish");
  if (st)
    return st;
  size_t n = (size_t)shm->num_layers * shm->num_experts;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(counts[i]) || counts[i] < 0)
      return eplb__error(EPLB_EFORMAT, "shm", "%s: publish: count of layer %zu expert %zu is %g",
                         shm->name, i / shm->num_experts, i % shm->num_experts, counts[i]);
  uint64_t next;
  if ((st = write_begin(shm, OFF(stats_seq), &next)))
    return st;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = (uint64_t)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
  if (!(st = seg_write(shm, EPLB_SHM_HEADER_BYTES, counts, n * sizeof *counts)) &&
      !(st = put64(shm, OFF(step), step, 0)) &&
      !(st = put64(shm, OFF(window_steps), window_steps, 0)) &&
      !(st = put64(shm, OFF(updated_ns), now, 0)))
    st = check_length(shm); /* pwrite past a cut end grows the segment instead of failing */
  return write_end(shm, OFF(stats_seq), next, st);
}

eplb_status_t eplb_shm_read_stats(eplb_shm_t *shm, eplb_shm_stats_info_t *info, double *counts) {
  if (!shm || !info)
    return eplb__error(EPLB_EINVAL, "shm", "read: NULL argument");
  eplb_status_t st = validate(shm);
  if (st)
    return st;
  size_t n = (size_t)shm->num_layers * shm->num_experts;
  for (int t = 0; t < READ_TRIES; t++) {
    uint64_t s1, s2, step, window, updated, applied;
    if ((st = get64(shm, OFF(stats_seq), &s1, 1)))
      return st;
    if (s1 & 1) {
      sched_yield();
      continue;
    }
    if ((st = get64(shm, OFF(step), &step, 0)) ||
        (st = get64(shm, OFF(window_steps), &window, 0)) ||
        (st = get64(shm, OFF(updated_ns), &updated, 0)) ||
        (counts && (st = seg_read(shm, EPLB_SHM_HEADER_BYTES, counts, n * sizeof *counts))))
      return st;
    /* Orders the copies above before the second read of the sequence. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if ((st = get64(shm, OFF(stats_seq), &s2, 0)))
      return st;
    if (s2 != s1)
      continue;
    /* The size once more: a cut during the copy either made it short
     * (reported above) or is still in force here. */
    if ((st = check_length(shm)) || (st = get64(shm, OFF(applied_epoch), &applied, 0)))
      return st;
    for (size_t i = 0; counts && i < n; i++)
      if (!isfinite(counts[i]) || counts[i] < 0)
        return eplb__error(EPLB_EFORMAT, "shm", "%s: count of layer %zu expert %zu is %g",
                           shm->name, i / shm->num_experts, i % shm->num_experts, counts[i]);
    info->sequence = s1;
    info->step = step;
    info->window_steps = window;
    info->updated_ns = (int64_t)updated;
    info->applied_epoch = applied;
    return EPLB_OK;
  }
  return eplb__error(EPLB_EBUSY, "shm", "%s: statistics changing or a writer stalled (seq odd)",
                     shm->name);
}

/* Bytes of a plan block for (L, G, R); 0 on overflow. */
static uint64_t block_bytes(uint64_t L, uint64_t G, uint64_t R) {
  uint64_t lr;
  if (__builtin_mul_overflow(L, R, &lr) || lr > (UINT64_C(1) << 40) || G > (UINT64_C(1) << 30))
    return 0;
  return sizeof(eplb_shm_plan_block_t) + pad8(G * 4) + pad8(lr * 4) + lr * 8;
}

uint64_t eplb_shm_plan_block_bytes(uint32_t num_layers, uint32_t num_gpus, uint64_t num_slots) {
  return block_bytes(num_layers, num_gpus, num_slots);
}

uint64_t eplb_shm_mailbox_bytes(const eplb_shm_t *shm) { return shm ? shm->mailbox_bytes : 0; }

eplb_status_t eplb_shm_post_plan(eplb_shm_t *shm, const eplb_plan_t *plan, uint64_t epoch) {
  if (!shm || !plan)
    return eplb__error(EPLB_EINVAL, "shm", "post: NULL argument");
  eplb_status_t st = check_writable(shm, "post");
  if (st)
    return st;
  uint32_t L = eplb_plan_num_layers(plan), E = eplb_plan_num_experts(plan);
  uint32_t G = eplb_plan_num_gpus(plan), R = eplb_plan_num_slots(plan);
  if (L != shm->num_layers || E != shm->num_experts)
    return eplb__error(EPLB_ESHAPE, "shm", "%s: plan is %u x %u, segment %u x %u", shm->name, L, E,
                       shm->num_layers, shm->num_experts);
  uint64_t prev;
  if ((st = get64(shm, OFF(mailbox_epoch), &prev, 0)))
    return st;
  if (!epoch || epoch <= prev)
    return eplb__error(EPLB_EINVAL, "shm", "%s: epoch %llu is not after the posted %llu", shm->name,
                       (unsigned long long)epoch, (unsigned long long)prev);
  uint64_t bytes = block_bytes(L, G, R);
  if (!bytes || bytes > shm->mailbox_bytes)
    return eplb__error(EPLB_ERANGE, "shm", "%s: plan needs %llu bytes, mailbox has %llu", shm->name,
                       (unsigned long long)bytes, (unsigned long long)shm->mailbox_bytes);
  /* The block is built aside and copied in one go (one pwrite for an
   * opened handle); the padding is zero. */
  uint8_t *block = eplb__calloc(1, (size_t)bytes);
  if (!block)
    return eplb__error(EPLB_ENOMEM, "shm", "%s: out of memory", shm->name);
  uint8_t *p = block;
  eplb_shm_plan_block_t b = {L, E, G, eplb_plan_num_nodes(plan), R, 0};
  memcpy(p, &b, sizeof b);
  p += sizeof b;
  memcpy(p, eplb_plan_slots_per_gpu(plan), (size_t)G * 4);
  p += pad8((uint64_t)G * 4);
  for (uint32_t l = 0; l < L; l++)
    memcpy(p + (size_t)l * R * 4, eplb_plan_phy2log(plan, l), (size_t)R * 4);
  p += pad8((uint64_t)L * R * 4);
  for (uint32_t l = 0; l < L; l++)
    memcpy(p + (size_t)l * R * 8, eplb_plan_share(plan, l), (size_t)R * 8);
  uint64_t next;
  if (!(st = write_begin(shm, OFF(mailbox_seq), &next))) {
    if (!(st = seg_write(shm, shm->mailbox_offset, block, (size_t)bytes)) &&
        !(st = put64(shm, OFF(mailbox_epoch), epoch, 0)) &&
        !(st = put64(shm, OFF(mailbox_length), bytes, 0)))
      st = check_length(shm); /* pwrite past a cut end grows the segment instead of failing */
    st = write_end(shm, OFF(mailbox_seq), next, st);
  }
  eplb__free(block);
  return st;
}

eplb_status_t eplb_shm_mailbox_epoch(eplb_shm_t *shm, uint64_t *epoch) {
  if (!shm || !epoch)
    return eplb__error(EPLB_EINVAL, "shm", "mailbox epoch: NULL argument");
  eplb_status_t st = validate(shm);
  if (st)
    return st;
  for (int t = 0; t < READ_TRIES; t++) {
    uint64_t s1, e, s2;
    if ((st = get64(shm, OFF(mailbox_seq), &s1, 1)) || (st = get64(shm, OFF(mailbox_epoch), &e, 0)))
      return st;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if ((st = get64(shm, OFF(mailbox_seq), &s2, 0)))
      return st;
    if (!(s1 & 1) && s2 == s1) {
      *epoch = e;
      return EPLB_OK;
    }
    sched_yield();
  }
  return eplb__error(EPLB_EBUSY, "shm", "%s: mailbox changing or a writer stalled", shm->name);
}
/* Builds a plan from a private copy of a block, checking it like a plan file. */
static eplb_status_t parse_block(const eplb_shm_t *shm, const uint8_t *p, uint64_t len,
                                 eplb_plan_t **out) {
  const char *n = shm->name;
  eplb_shm_plan_block_t b;
  if (len < sizeof b)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox: %llu bytes is no plan block", n,
                       (unsigned long long)len);
  memcpy(&b, p, sizeof b);
  if (b.num_layers != shm->num_layers || b.num_experts != shm->num_experts)
    return eplb__error(EPLB_ESHAPE, "shm", "%s: mailbox: plan is %u x %u, segment %u x %u", n,
                       b.num_layers, b.num_experts, shm->num_layers, shm->num_experts);
  if (!b.num_gpus || !b.num_nodes || b.num_gpus % b.num_nodes || b.num_slots < b.num_experts ||
      b.num_gpus > b.num_slots)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox: %u GPUs, %u nodes, %u slots", n,
                       b.num_gpus, b.num_nodes, b.num_slots);
  uint64_t want = block_bytes(b.num_layers, b.num_gpus, b.num_slots);
  if (want != len)
    return eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox: length %llu, the shape needs %llu", n,
                       (unsigned long long)len, (unsigned long long)want);
  const uint8_t *q = p + sizeof b;
  uint32_t *slots = eplb__malloc_array(b.num_gpus, sizeof *slots);
  if (!slots)
    return eplb__error(EPLB_ENOMEM, "shm", "%s: out of memory", n);
  memcpy(slots, q, (size_t)b.num_gpus * 4);
  q += pad8((uint64_t)b.num_gpus * 4);
  eplb_status_t st = EPLB_OK;
  uint64_t sum = 0;
  for (uint32_t g = 0; g < b.num_gpus; g++) {
    if (!slots[g]) {
      st = eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox: GPU %u has no slot", n, g);
      goto done;
    }
    sum += slots[g];
  }
  if (sum != b.num_slots) {
    st = eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox: slots sum to %llu, not %u", n,
                     (unsigned long long)sum, b.num_slots);
    goto done;
  }
  size_t lr = (size_t)b.num_layers * b.num_slots;
  eplb__plan_shape_t shape = {b.num_layers, b.num_experts, b.num_gpus,
                              b.num_nodes,  b.num_slots,   slots};
  /* eplb__malloc's copy keeps the block's 8-byte alignment; the planner
   * copies the arrays out with memcpy and checks them like a plan file's
   * (ids in range, shares summing to 1). */
  st = eplb__plan_from_arrays(&shape, EPLB_POLICY_DEEPSEEK, (const int32_t *)(const void *)q,
                              (const double *)(const void *)(q + pad8((uint64_t)lr * 4)), n, out);
done:
  eplb__free(slots);
  return st;
}

eplb_status_t eplb_shm_read_plan(eplb_shm_t *shm, uint64_t *epoch, eplb_plan_t **out) {
  if (!shm || !epoch || !out)
    return eplb__error(EPLB_EINVAL, "shm", "read plan: NULL argument");
  *out = NULL;
  *epoch = 0;
  eplb_status_t st = validate(shm);
  if (st)
    return st;
  uint8_t *copy = NULL;
  for (int t = 0; t < READ_TRIES; t++) {
    uint64_t s1, s2, e, len;
    if ((st = get64(shm, OFF(mailbox_seq), &s1, 1)))
      goto done;
    if (s1 & 1) {
      sched_yield();
      continue;
    }
    if ((st = get64(shm, OFF(mailbox_epoch), &e, 0)) ||
        (st = get64(shm, OFF(mailbox_length), &len, 0)) || !e)
      goto done;
    if (len > shm->mailbox_bytes) {
      st = eplb__error(EPLB_EFORMAT, "shm", "%s: mailbox_length %llu exceeds the mailbox",
                       shm->name, (unsigned long long)len);
      goto done;
    }
    eplb__free(copy);
    copy = eplb__malloc(len ? (size_t)len : 1);
    if (!copy) {
      st = eplb__error(EPLB_ENOMEM, "shm", "%s: out of memory", shm->name);
      goto done;
    }
    if ((st = seg_read(shm, shm->mailbox_offset, copy, (size_t)len)))
      goto done;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if ((st = get64(shm, OFF(mailbox_seq), &s2, 0)))
      goto done;
    if (s2 != s1)
      continue;
    if ((st = check_length(shm)))
      goto done;
    if ((st = parse_block(shm, copy, len, out)) == EPLB_OK)
      *epoch = e;
    goto done;
  }
  st = eplb__error(EPLB_EBUSY, "shm", "%s: mailbox changing or a writer stalled", shm->name);
done:
  eplb__free(copy);
  return st;
}

eplb_status_t eplb_shm_ack_plan(eplb_shm_t *shm, uint64_t epoch) {
  if (!shm)
    return eplb__error(EPLB_EINVAL, "shm", "ack: NULL argument");
  eplb_status_t st = check_writable(shm, "ack");
  if (st)
    return st;
  return put64(shm, OFF(applied_epoch), epoch, 1);
}

/* runtime/counter.c — counting of recorded ids on an internal thread.
 *
 * Counting is one read-modify-write per id (about a cycle each), as much
 * as the whole SIMD map; on a host with a spare core it need not sit on
 * the serving thread. record validates the ids and packs them into a ring
 * (bytes when E <= 256, else 16-bit words) in the same pass, and a worker
 * thread counts them into its own array. Whoever drains the ring holds
 * `drain`: the worker, or step_end, which drains what is left itself (so
 * correctness never waits on the worker's schedule) before it adds the
 * worker's counts to the step. The serving thread never makes a system
 * call here: the worker polls, watching the queue for 200 us after it
 * found work and sleeping longer and longer (up to 1 ms) while it finds
 * nothing. */
#include "runtime/runtime.h"

#include <stdatomic.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_PACK 1
#endif

enum { RING_BYTES = 1u << 20, HDR = 8, POLL_MIN_US = 20, POLL_MAX_US = 1000, SPIN_US = 200 };

struct eplb__counter {
  uint32_t L, E, width;  /* width: bytes per packed id (1 or 2) */
  uint8_t *ring;         /* RING_BYTES */
  _Atomic uint64_t head; /* bytes published (producer) */
  /* The producer's own copies: it never loads head (the worker polls that
   * line, so a load would miss) and loads tail only when its copy says the
   * ring is full. */
  uint64_t head_own, tail_seen, pending_head;
  _Atomic uint64_t tail; /* bytes consumed (under drain) */
  uint32_t *counts;      /* [L * E] counted since the last collect (under drain) */
  pthread_mutex_t drain;
  pthread_t thread;
  _Atomic bool stop;
};

/* Entries: a header {layer, n} then n packed ids, padded to 8 bytes; a
 * header with layer UINT32_MAX means "continue at offset 0". */
static size_t entry_bytes(const eplb__counter_t *c, uint32_t n) {
  return HDR + (((size_t)n * c->width + 7) & ~(size_t)7);
}

static void count_entry(eplb__counter_t *c, uint32_t layer, const uint8_t *p, uint32_t n) {
  uint32_t *restrict cnt = c->counts + (size_t)layer * c->E;
  uint32_t i = 0;
  if (c->width == 1) {
    for (; i + 4 <= n; i += 4) {
      cnt[p[i]]++;
      cnt[p[i + 1]]++;
      cnt[p[i + 2]]++;
      cnt[p[i + 3]]++;
    }
    for (; i < n; i++)
      cnt[p[i]]++;
  } else {
    for (; i < n; i++) {
      uint16_t v;
      memcpy(&v, p + 2 * (size_t)i, 2);
      cnt[v]++;
    }
  }
}

/* Counts everything published; the caller holds drain. */
static bool drain_locked(eplb__counter_t *c) {
  uint64_t h = atomic_load_explicit(&c->head, memory_order_acquire);
  uint64_t t = atomic_load_explicit(&c->tail, memory_order_relaxed);
  bool any = t != h;
  while (t != h) {
    size_t off = (size_t)(t % RING_BYTES);
    uint32_t hdr[2];
    memcpy(hdr, c->ring + off, HDR);
    if (hdr[0] == UINT32_MAX) {
      t += RING_BYTES - off;
      continue;
    }
    count_entry(c, hdr[0], c->ring + off + HDR, hdr[1]);
    t += entry_bytes(c, hdr[1]);
    /* Released per entry so that a producer waiting for room moves on. */
    atomic_store_explicit(&c->tail, t, memory_order_release);
  }
  return any;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
  eplb__counter_t *c = arg;
#ifdef PR_SET_TIMERSLACK
  /* The default 50 us of slack would stretch the shortest poll fourfold. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
  long wait_us = POLL_MIN_US;
  while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
    pthread_mutex_lock(&c->drain);
    bool any = drain_locked(c);
    pthread_mutex_unlock(&c->drain);
    if (any) {
      /* A step's records come microseconds apart: watch the queue for a
       * while before sleeping, or the rest of the step would be left to
       * step_end. */
      double until = eplb__now() + SPIN_US * 1e-6;
      while (atomic_load_explicit(&c->head, memory_order_acquire) ==
                 atomic_load_explicit(&c->tail, memory_order_relaxed) &&
             !atomic_load_explicit(&c->stop, memory_order_relaxed) && eplb__now() < until) {
        for (int i = 0; i < 64; i++)
          cpu_relax();
        /* Polite: should this thread share a CPU with the serving thread,
         * the watching must not take the serving thread's time. */
        sched_yield();
      }
      wait_us = POLL_MIN_US;
      continue;
    }
    struct timespec ts = {0, wait_us * 1000};
    nanosleep(&ts, NULL);
    wait_us = wait_us * 2 > POLL_MAX_US ? POLL_MAX_US : wait_us * 2;
  }
  return NULL;
}

eplb_status_t eplb__counter_create(uint32_t L, uint32_t E, eplb__counter_t **out) {
  *out = NULL;
  eplb__counter_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "runtime", "count_thread: out of memory");
  c->L = L, c->E = E, c->width = E <= 256 ? 1 : 2; /* E <= 65535 (the runtime's config check) */
  c->ring = eplb__malloc(RING_BYTES);
  c->counts = eplb__calloc((size_t)L * E, sizeof *c->counts);
  eplb_status_t st = EPLB_OK;
  if (!c->ring || !c->counts) {
    st = eplb__error(EPLB_ENOMEM, "runtime", "count_thread: out of memory");
    goto fail;
  }
  if (pthread_mutex_init(&c->drain, NULL) != 0) {
    st = eplb__error(EPLB_ENOMEM, "runtime", "count_thread: mutex");
    goto fail;
  }
  if (pthread_create(&c->thread, NULL, worker, c) != 0) {
    pthread_mutex_destroy(&c->drain);
    st = eplb__error(EPLB_ENOMEM, "runtime", "count_thread: cannot start the thread");
    goto fail;
  }
  *out = c;
  return EPLB_OK;
fail:
  eplb__free(c->ring);
  eplb__free(c->counts);
  eplb__free(c);
  return st;
}

void eplb__counter_destroy(eplb__counter_t *c) {
  if (!c)
    return;
  atomic_store_explicit(&c->stop, true, memory_order_release);
  pthread_join(c->thread, NULL);
  pthread_mutex_destroy(&c->drain);
  eplb__free(c->ring);
  eplb__free(c->counts);
  eplb__free(c);
}

/* Packs n ids into dst (width bytes each) and returns the largest id as
 * unsigned (a negative id is huge), so max < E proves the call valid. */
static uint32_t pack_scalar(const int32_t *ids, size_t n, uint32_t width, uint8_t *dst) {
  uint32_t all = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)ids[i];
    all = v > all ? v : all;
    if (width == 1)
      dst[i] = (uint8_t)v;
    else
      memcpy(dst + 2 * i, &(uint16_t){(uint16_t)v}, 2);
  }
  return all;
}

#ifdef HAVE_AVX512_PACK
__attribute__((target("avx512f"))) static uint32_t pack_avx512(const int32_t *ids, size_t n,
                                                               uint32_t width, uint8_t *dst) {
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i v = _mm512_loadu_si512(ids + i);
    acc = _mm512_max_epu32(acc, v);
    if (width == 1)
      _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(v));
    else
      _mm256_storeu_si256((__m256i *)(dst + 2 * i), _mm512_cvtepi32_epi16(v));
  }
  uint32_t all = (uint32_t)_mm512_reduce_max_epu32(acc);
  uint32_t tail = pack_scalar(ids + i, n - i, width, dst + i * width);
  return tail > all ? tail : all;
}
#endif

static uint32_t pack(const int32_t *ids, size_t n, uint32_t width, uint8_t *dst) {
#ifdef HAVE_AVX512_PACK
  /* The map's kernel choice (AVX-512 F/BW/DQ/VL, or EPLB_MAP_ISA=scalar). */
  if (eplb__map_isa() == EPLB__MAP_AVX512)
    return pack_avx512(ids, n, width, dst);
#endif
  return pack_scalar(ids, n, width, dst);
}

uint32_t eplb__counter_width(const eplb__counter_t *c) { return c->width; }

uint8_t *eplb__counter_reserve(eplb__counter_t *c, uint32_t layer, size_t n) {
  /* One entry holds at most a quarter of the ring; bigger calls count inline. */
  if (n == 0 || n > RING_BYTES / 4 / c->width)
    return NULL;
  size_t need = entry_bytes(c, (uint32_t)n);
  uint64_t h = c->head_own;
  size_t off = (size_t)(h % RING_BYTES), skip = RING_BYTES - off < need ? RING_BYTES - off : 0;
  /* No room: the worker is steps behind (descheduled, or without a core of
   * its own). The caller counts this call inline; neither waiting for the
   * worker nor draining its backlog here would bound the serving thread's
   * time. */
  if (h + skip + need - c->tail_seen > RING_BYTES) {
    c->tail_seen = atomic_load_explicit(&c->tail, memory_order_acquire);
    if (h + skip + need - c->tail_seen > RING_BYTES)
      return NULL;
  }
  /* Nothing is published until commit: an entry left uncommitted is
   * written over by the next reserve (the wrap marker too, identically). */
  if (skip) {
    uint32_t wrap[2] = {UINT32_MAX, 0};
    memcpy(c->ring + off, wrap, sizeof wrap);
    h += skip, off = 0;
  }
  uint32_t hdr[2] = {layer, (uint32_t)n};
  memcpy(c->ring + off, hdr, sizeof hdr);
  c->pending_head = h + need;
  return c->ring + off + HDR;
}

void eplb__counter_commit(eplb__counter_t *c) {
  c->head_own = c->pending_head;
  atomic_store_explicit(&c->head, c->pending_head, memory_order_release);
}

/* Returns 0 (queued), 1 (an id >= E: nothing queued), -1 (no room for the
 * call in the ring: count inline). */
int eplb__counter_push(eplb__counter_t *c, uint32_t layer, const int32_t *ids, size_t n) {
  if (n == 0)
    return 0;
  uint8_t *dst = eplb__counter_reserve(c, layer, n);
  if (!dst)
    return -1;
  if (pack(ids, n, c->width, dst) >= c->E)
    return 1; /* a bad id: the caller names it; nothing is published */
  eplb__counter_commit(c);
  return 0;
}

void eplb__counter_hold(eplb__counter_t *c, bool hold) {
  if (hold)
    pthread_mutex_lock(&c->drain);
  else
    pthread_mutex_unlock(&c->drain);
}

void eplb__counter_collect(eplb__counter_t *c, uint32_t *restrict counts) {
  /* The worker holds drain while it counts, typically for microseconds:
   * spin a little before blocking, since a futex wake-up costs more. */
  int locked = 0;
  for (int i = 0; i < 20000 && !locked; i++)
    locked = pthread_mutex_trylock(&c->drain) == 0;
  if (!locked)
    pthread_mutex_lock(&c->drain);
  drain_locked(c);
  size_t n = (size_t)c->L * c->E;
  const uint32_t *restrict mine = c->counts;
  for (size_t i = 0; i < n; i++)
    counts[i] += mine[i];
  memset(c->counts, 0, n * sizeof *c->counts);
  pthread_mutex_unlock(&c->drain);
}

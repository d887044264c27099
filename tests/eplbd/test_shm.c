/* tests/eplbd/test_shm.c — the shared-memory segment (runtime/shm.c). */
#include "eplb/shm.h"
#include "tests/support.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char name[64];

static void setup(void) {
  snprintf(name, sizeof name, "/eplb-test-%ld", (long)getpid());
  eplb_shm_unlink(name);
}

static void teardown(void) { eplb_shm_unlink(name); }

static eplb_plan_t *small_plan(uint32_t L, uint32_t E) {
  eplb_loads_t *loads;
  ck_assert_int_eq(eplb_loads_create(L, E, &loads), EPLB_OK);
  for (size_t i = 0; i < (size_t)L * E; i++)
    loads->values[i] = (double)(1 + (i * 37) % 101);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = 4;
  o.num_replicas = E + 4;
  eplb_plan_t *p;
  ck_assert_int_eq(eplb_plan_create(loads, &o, &p), EPLB_OK);
  eplb_loads_destroy(loads);
  return p;
}

START_TEST(round_trip_and_mode) {
  eplb_shm_t *w, *r;
  ck_assert_int_eq(eplb_shm_create(name, 3, 16, 0, &w), EPLB_OK);
  ck_assert_int_eq(eplb_shm_create(name, 3, 16, 0, &r), EPLB_EBUSY); /* O_EXCL */
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 0777, 0600);
  ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ, &r), EPLB_OK);
  ck_assert_uint_eq(eplb_shm_num_layers(r), 3);
  ck_assert_uint_eq(eplb_shm_num_experts(r), 16);
  eplb_shm_stats_info_t info;
  double got[48], put[48];
  ck_assert_int_eq(eplb_shm_read_stats(r, &info, got), EPLB_OK);
  ck_assert_uint_eq(info.sequence, 0);
  for (int i = 0; i < 48; i++)
    put[i] = i * 1.5;
  ck_assert_int_eq(eplb_shm_publish_stats(w, 77, 8, put), EPLB_OK);
  ck_assert_int_eq(eplb_shm_read_stats(r, &info, got), EPLB_OK);
  ck_assert_uint_eq(info.sequence, 2);
  ck_assert_uint_eq(info.step, 77);
  ck_assert_uint_eq(info.window_steps, 8);
  ck_assert_int_gt(info.updated_ns, 0);
  ck_assert_mem_eq(got, put, sizeof put);
  /* A read-only handle cannot publish; bad values are refused. */
  ck_assert_int_eq(eplb_shm_publish_stats(r, 1, 1, put), EPLB_EINVAL);
  put[5] = -1;
  ck_assert_int_eq(eplb_shm_publish_stats(w, 1, 1, put), EPLB_EFORMAT);
  eplb_shm_close(r);
  eplb_shm_close(w);
  eplb_shm_close(NULL);
}
END_TEST

START_TEST(mailbox_round_trip) {
  eplb_shm_t *rt, *d;
  ck_assert_int_eq(eplb_shm_create(name, 2, 12, 0, &rt), EPLB_OK);
  ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ_WRITE, &d), EPLB_OK);
  uint64_t epoch = 9;
  eplb_plan_t *got = NULL;
  ck_assert_int_eq(eplb_shm_read_plan(rt, &epoch, &got), EPLB_OK);
  ck_assert_uint_eq(epoch, 0);
  ck_assert_ptr_null(got);
  eplb_plan_t *p = small_plan(2, 12), *wrong = small_plan(3, 12);
  /* A publisher can size its plans against the mailbox before planning. */
  uint64_t block = eplb_shm_plan_block_bytes(2, 4, 16);
  ck_assert_uint_gt(block, 2 * 16 * 12);
  ck_assert_uint_ge(eplb_shm_mailbox_bytes(d), block);
  ck_assert_uint_eq(eplb_shm_mailbox_bytes(d), eplb_shm_mailbox_bytes(rt));
  ck_assert_uint_eq(eplb_shm_mailbox_bytes(NULL), 0);
  ck_assert_uint_eq(eplb_shm_plan_block_bytes(UINT32_MAX, 4, UINT64_MAX / 2), 0);
  ck_assert_int_eq(eplb_shm_post_plan(d, wrong, 1), EPLB_ESHAPE);
  ck_assert_int_eq(eplb_shm_post_plan(d, p, 1), EPLB_OK);
  ck_assert_int_eq(eplb_shm_post_plan(d, p, 1), EPLB_EINVAL); /* epochs increase */
  ck_assert_int_eq(eplb_shm_mailbox_epoch(rt, &epoch), EPLB_OK);
  ck_assert_uint_eq(epoch, 1);
  ck_assert_int_eq(eplb_shm_read_plan(rt, &epoch, &got), EPLB_OK);
  ck_assert_uint_eq(epoch, 1);
  ck_assert_uint_eq(eplb_plan_num_slots(got), 16);
  ck_assert_uint_eq(eplb_plan_num_gpus(got), 4);
  for (uint32_t l = 0; l < 2; l++) {
    ck_assert_mem_eq(eplb_plan_phy2log(got, l), eplb_plan_phy2log(p, l), 16 * 4);
    ck_assert_mem_eq(eplb_plan_share(got, l), eplb_plan_share(p, l), 16 * 8);
  }
  ck_assert_int_eq(eplb_shm_ack_plan(rt, 1), EPLB_OK);
  eplb_shm_stats_info_t info;
  ck_assert_int_eq(eplb_shm_read_stats(d, &info, NULL), EPLB_OK);
  ck_assert_uint_eq(info.applied_epoch, 1);
  eplb_plan_destroy(got);
  eplb_plan_destroy(p);
  eplb_plan_destroy(wrong);
  eplb_shm_close(d);
  eplb_shm_close(rt);
}
END_TEST

/* Damages the header through a raw mapping and expects open or read to fail. */
static void poke(void (*damage)(eplb_shm_header_t *, uint8_t *), int at_open, int stats_bad) {
  eplb_shm_t *w, *r = NULL;
  ck_assert_int_eq(eplb_shm_create(name, 2, 8, 4096, &w), EPLB_OK);
  if (!at_open)
    ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ, &r), EPLB_OK);
  int fd = shm_open(name, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  uint8_t *base = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(base, MAP_FAILED);
  damage((eplb_shm_header_t *)base, base);
  munmap(base, 4096);
  close(fd);
  eplb_shm_stats_info_t info;
  double counts[16];
  if (at_open) {
    eplb_status_t st = eplb_shm_open(name, EPLB_SHM_READ, &r);
    ck_assert_int_eq(st, EPLB_EFORMAT);
    ck_assert_ptr_nonnull(strstr(eplb_error_detail(), name));
  } else {
    eplb_status_t st = eplb_shm_read_stats(r, &info, counts);
    if (stats_bad)
      ck_assert(st == EPLB_EFORMAT || st == EPLB_EBUSY);
    uint64_t e;
    eplb_plan_t *p = NULL;
    st = eplb_shm_read_plan(r, &e, &p);
    ck_assert(st != EPLB_OK || !p);
    if (!stats_bad)
      ck_assert_int_ne(st, EPLB_OK);
  }
  eplb_shm_close(r);
  eplb_shm_close(w);
  eplb_shm_unlink(name);
}

static void bad_magic(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->magic = 0x1234; }
static void bad_version(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->version = 2; }
static void bad_size(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->segment_bytes *= 2; }
static void bad_shape(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->num_experts = 60000; }
static void bad_header(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->header_bytes = 128; }
static void bad_offset(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->mailbox_offset = 64; }
static void torn_seq(eplb_shm_header_t *h, uint8_t *b) { (void)b, h->stats_seq = 7; }
static void nan_count(eplb_shm_header_t *h, uint8_t *b) {
  (void)h;
  memset(b + EPLB_SHM_HEADER_BYTES, 0xff, 8);
}
static void huge_mailbox(eplb_shm_header_t *h, uint8_t *b) {
  (void)b;
  h->mailbox_epoch = 5;
  h->mailbox_length = UINT64_C(1) << 40;
}
static void garbage_block(eplb_shm_header_t *h, uint8_t *b) {
  h->mailbox_epoch = 5;
  h->mailbox_length = 64;
  memset(b + h->mailbox_offset, 0x7f, 64);
}

START_TEST(validation_rejects_bad_headers) {
  void (*at_open[])(eplb_shm_header_t *, uint8_t *) = {bad_magic, bad_version, bad_size,
                                                       bad_shape, bad_header,  bad_offset};
  for (size_t i = 0; i < sizeof at_open / sizeof *at_open; i++)
    poke(at_open[i], 1, 1);
  void (*later[])(eplb_shm_header_t *, uint8_t *) = {bad_magic,  bad_version, bad_size, bad_shape,
                                                     bad_header, bad_offset,  torn_seq, nan_count};
  for (size_t i = 0; i < sizeof later / sizeof *later; i++)
    poke(later[i], 0, 1);
  poke(huge_mailbox, 0, 0);
  poke(garbage_block, 0, 0);
}
END_TEST

START_TEST(bad_names_and_shapes) {
  eplb_shm_t *s;
  ck_assert_int_eq(eplb_shm_create("noslash", 1, 1, 0, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_shm_create("/a/b", 1, 1, 0, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_shm_create(name, 0, 4, 0, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_shm_create(name, 5000, 4, 0, &s), EPLB_ERANGE);
  ck_assert_int_eq(eplb_shm_open("/eplb-does-not-exist-x", EPLB_SHM_READ, &s), EPLB_EIO);
}
END_TEST

/* A writer hammers the statistics with rows that are all equal to a
 * counter; a reader must never see a mix of two publishes. */
#define HL 4
#define HE 64
static volatile int hammer_stop;
static void *hammer(void *arg) {
  eplb_shm_t *w = arg;
  static double v[HL * HE];
  for (uint64_t i = 1; !hammer_stop; i++) {
    for (int k = 0; k < HL * HE; k++)
      v[k] = (double)i;
    eplb_shm_publish_stats(w, i, 1, v);
  }
  return NULL;
}

START_TEST(seqlock_readers_never_see_torn_updates) {
  eplb_shm_t *w, *r;
  ck_assert_int_eq(eplb_shm_create(name, HL, HE, 0, &w), EPLB_OK);
  ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ, &r), EPLB_OK);
  pthread_t t;
  hammer_stop = 0;
  ck_assert_int_eq(pthread_create(&t, NULL, hammer, w), 0);
  double got[HL * HE];
  int ok = 0, busy = 0;
  for (int n = 0; n < 3000; n++) {
    eplb_shm_stats_info_t info;
    eplb_status_t st = eplb_shm_read_stats(r, &info, got);
    if (st == EPLB_EBUSY) {
      busy++;
      continue;
    }
    ck_assert_int_eq(st, EPLB_OK);
    for (int k = 1; k < HL * HE; k++)
      ck_assert_double_eq(got[k], got[0]);
    if (info.sequence)
      ck_assert_double_eq(got[0], (double)info.step);
    ok++;
  }
  hammer_stop = 1;
  pthread_join(t, NULL);
  ck_assert_int_gt(ok, 0);
  eplb_shm_close(r);
  eplb_shm_close(w);
}
END_TEST

/* Any process of the user can truncate the segment while the daemon copies
 * from it. Before, the daemon's reads went through its mapping and died
 * of SIGBUS (check() runs each test in a child: a signal fails the test).
 * A thread here shrinks the segment to sizes cutting every region (header,
 * statistics, mailbox), regrows it and restores its bytes, through its own
 * descriptor, while this thread reads, posts and opens as the daemon does:
 * every call must return, OK or an error status. */
#define FL 4
#define FE 256 /* statistics of 8 KiB: a cut can fall inside them */
static volatile int flap_stop;
typedef struct {
  int fd;
  const uint8_t *image;
  size_t len;
  unsigned rounds;
} flap_t;

static void *flapper(void *arg) {
  flap_t *f = arg;
  const off_t cut[] = {0, 100, 300, 4096, 6000, 8448, 12000, (off_t)f->len - 8};
  while (!flap_stop) {
    ck_assert_int_eq(ftruncate(f->fd, cut[f->rounds % (sizeof cut / sizeof *cut)]), 0);
    ck_assert_int_eq(ftruncate(f->fd, (off_t)f->len), 0);
    ck_assert_int_eq(pwrite(f->fd, f->image, f->len, 0), (ssize_t)f->len);
    f->rounds++;
  }
  return NULL;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(truncated_segment_never_kills_readers) {
  eplb_shm_t *w, *r, *d;
  static double put[FL * FE], got[FL * FE];
  ck_assert_int_eq(eplb_shm_create(name, FL, FE, 16384, &w), EPLB_OK);
  for (int k = 0; k < FL * FE; k++)
    put[k] = k % 13;
  ck_assert_int_eq(eplb_shm_publish_stats(w, 5, 1, put), EPLB_OK);
  /* The creator works on its mapping and owns the segment: it stays out. */
  eplb_shm_close(w);
  ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ, &r), EPLB_OK);
  ck_assert_int_eq(eplb_shm_open(name, EPLB_SHM_READ_WRITE, &d), EPLB_OK);
  eplb_plan_t *plan = small_plan(FL, FE);
  ck_assert_int_eq(eplb_shm_post_plan(d, plan, 1), EPLB_OK);
  flap_t f = {shm_open(name, O_RDWR, 0), NULL, 0, 0};
  ck_assert_int_ge(f.fd, 0);
  struct stat sb;
  ck_assert_int_eq(fstat(f.fd, &sb), 0);
  f.len = (size_t)sb.st_size;
  uint8_t *image = malloc(f.len);
  ck_assert_ptr_nonnull(image);
  ck_assert_int_eq(pread(f.fd, image, f.len, 0), (ssize_t)f.len);
  f.image = image;
  pthread_t t;
  flap_stop = 0;
  ck_assert_int_eq(pthread_create(&t, NULL, flapper, &f), 0);
  const char *env = getenv("EPLB_SHM_FLAP_SECONDS");
  double secs = env ? atof(env) : 8, t0 = seconds();
  unsigned ok = 0, failed = 0, calls = 0;
  for (uint64_t epoch = 2; seconds() - t0 < secs; epoch++, calls++) {
    eplb_shm_stats_info_t info;
    eplb_plan_t *p = NULL;
    eplb_shm_t *o = NULL;
    uint64_t e = 0;
    eplb_status_t st;
    switch (calls % 5) {
    /* What a read returns while the bytes come and go is not checked: a
     * cut and its repair under one sequence number can pass unseen. */
    case 0: st = eplb_shm_read_stats(r, &info, got); break;
    case 1: st = eplb_shm_read_plan(r, &e, &p); break;
    case 2: st = eplb_shm_mailbox_epoch(r, &e); break;
    case 3: st = eplb_shm_post_plan(d, plan, epoch); break;
    default:
      st = eplb_shm_open(name, EPLB_SHM_READ, &o);
      if (st == EPLB_OK)
        st = eplb_shm_read_stats(o, &info, got);
      eplb_shm_close(o);
      break;
    }
    eplb_plan_destroy(p);
    ck_assert_int_le(st, EPLB_OK);
    ok += st == EPLB_OK;
    failed += st != EPLB_OK;
  }
  flap_stop = 1;
  pthread_join(t, NULL);
  /* Whole again: every call works as before. */
  ck_assert_int_eq(eplb_shm_read_stats(r, &(eplb_shm_stats_info_t){0}, got), EPLB_OK);
  ck_assert_mem_eq(got, put, sizeof put);
  printf("# %u calls during %u cuts: %u OK, %u errors\n", calls, f.rounds, ok, failed);
  fflush(stdout);
  ck_assert_uint_gt(f.rounds, 10);
  ck_assert_uint_gt(failed, 0);
  ck_assert_uint_gt(ok, 0);
  close(f.fd);
  free(image);
  eplb_plan_destroy(plan);
  eplb_shm_close(d);
  eplb_shm_close(r);
}
END_TEST

int main(void) {
  Suite *s = suite_create("shm");
  TCase *tc = tcase_create("shm");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, round_trip_and_mode);
  tcase_add_test(tc, mailbox_round_trip);
  tcase_add_test(tc, validation_rejects_bad_headers);
  tcase_add_test(tc, bad_names_and_shapes);
  tcase_add_test(tc, seqlock_readers_never_see_torn_updates);
  tcase_add_test(tc, truncated_segment_never_kills_readers);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}

/* Fuzz target for the shared-memory segment readers: the input is a whole
 * segment (header, statistics, mailbox). It is read the daemon's way
 * (eplb_shm_open: pread on a descriptor, read-only and read-write) and the
 * runtime's way (the creator's mapping, overwritten with the input as a
 * hostile peer would). Beyond "no crash, no leak, a status with a detail":
 * a plan taken from the mailbox posts back and reads back identical, and
 * statistics published through a handle read back. */
#include "tests/fuzz/fuzz_target.h"

#include "eplb/shm.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The creator's pass takes the input's shape only when it is this small. */
#define CREATOR_MAX_CELLS 4096u
#define CREATOR_MAX_MAILBOX (1u << 20)

static char name[64];

static const char *seg_name(void) {
  if (!name[0]) {
    snprintf(name, sizeof name, "/eplb-fuzz-%ld", (long)getpid());
    atexit(fuzz_target_cleanup); /* libFuzzer exits without calling it */
  }
  return name;
}

void fuzz_target_cleanup(void) {
  fuzz_util_print_stats();
  if (name[0])
    shm_unlink(name);
}

static void put_segment(const uint8_t *data, size_t size) {
  int fd = shm_open(seg_name(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0)
    abort();
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0)
      abort();
    done += (size_t)n;
  }
  close(fd);
}

static void same_plan(const eplb_plan_t *a, const eplb_plan_t *b) {
  uint32_t L = eplb_plan_num_layers(a), R = eplb_plan_num_slots(a), G = eplb_plan_num_gpus(a);
  fuzz_util_check(L == eplb_plan_num_layers(b) && R == eplb_plan_num_slots(b) &&
                      G == eplb_plan_num_gpus(b) &&
                      eplb_plan_num_experts(a) == eplb_plan_num_experts(b) &&
                      eplb_plan_num_nodes(a) == eplb_plan_num_nodes(b) &&
                      !memcmp(eplb_plan_slots_per_gpu(a), eplb_plan_slots_per_gpu(b), G * 4u),
                  "a posted plan reads back with its shape");
  for (uint32_t l = 0; l < L; l++)
    fuzz_util_check(!memcmp(eplb_plan_phy2log(a, l), eplb_plan_phy2log(b, l), R * 4u) &&
                        !memcmp(eplb_plan_share(a, l), eplb_plan_share(b, l), R * 8u),
                    "a posted plan reads back identical");
}

static void exercise(eplb_shm_t *shm, int writable) {
  size_t cells = (size_t)eplb_shm_num_layers(shm) * eplb_shm_num_experts(shm);
  double *counts = calloc(cells ? cells : 1, sizeof *counts);
  if (!counts)
    abort();
  eplb_shm_stats_info_t info;
  fuzz_util_begin();
  if (fuzz_util_status(eplb_shm_read_stats(shm, &info, counts), "shm_read_stats") == EPLB_OK)
    for (size_t i = 0; i < cells; i++)
      fuzz_util_check(isfinite(counts[i]) && counts[i] >= 0, "statistics are finite and >= 0");
  uint64_t epoch = 0, e2 = 0;
  fuzz_util_begin();
  fuzz_util_status(eplb_shm_mailbox_epoch(shm, &epoch), "shm_mailbox_epoch");
  eplb_plan_t *plan = NULL;
  fuzz_util_begin();
  eplb_status_t st = fuzz_util_status(eplb_shm_read_plan(shm, &e2, &plan), "shm_read_plan");
  fuzz_util_check(st == EPLB_OK || (!plan && !e2), "nothing is returned on error");
  fuzz_util_check(!plan || e2 > 0, "a plan comes with its epoch");
  if (writable) {
    fuzz_util_begin();
    fuzz_util_status(eplb_shm_ack_plan(shm, e2), "shm_ack_plan");
    fuzz_util_begin();
    if (fuzz_util_status(eplb_shm_publish_stats(shm, 7, 3, counts), "shm_publish_stats") ==
        EPLB_OK) {
      fuzz_util_begin();
      fuzz_util_check(fuzz_util_status(eplb_shm_read_stats(shm, &info, NULL), "shm_read_stats") ==
                              EPLB_OK &&
                          info.step == 7 && info.window_steps == 3 && info.applied_epoch == e2,
                      "published statistics read back");
    }
    if (plan && e2 < UINT64_MAX) {
      fuzz_util_begin();
      if (fuzz_util_status(eplb_shm_post_plan(shm, plan, e2 + 1), "shm_post_plan") == EPLB_OK) {
        eplb_plan_t *back = NULL;
        uint64_t e3 = 0;
        fuzz_util_begin();
        fuzz_util_check(fuzz_util_status(eplb_shm_read_plan(shm, &e3, &back), "shm_read_plan") ==
                                EPLB_OK &&
                            back && e3 == e2 + 1,
                        "a posted plan reads back");
        same_plan(plan, back);
        eplb_plan_destroy(back);
      }
    }
  }
  eplb_plan_destroy(plan);
  free(counts);
}

/* The runtime's handle: its own mapping, with a hostile peer's bytes. */
static void creator_pass(const uint8_t *data, size_t size) {
  eplb_shm_header_t h;
  memset(&h, 0, sizeof h);
  memcpy(&h, data, size < sizeof h ? size : sizeof h);
  uint32_t L = 2, E = 8;
  if (h.num_layers && h.num_experts &&
      (uint64_t)h.num_layers * h.num_experts <= CREATOR_MAX_CELLS) {
    L = h.num_layers;
    E = h.num_experts;
  }
  uint64_t moff = (EPLB_SHM_HEADER_BYTES + (uint64_t)L * E * 8 + 63) & ~(uint64_t)63;
  uint64_t mb = size > moff ? size - moff : 64;
  if (mb > CREATOR_MAX_MAILBOX)
    mb = CREATOR_MAX_MAILBOX;
  shm_unlink(seg_name());
  eplb_shm_t *shm = NULL;
  fuzz_util_begin();
  if (fuzz_util_status(eplb_shm_create(seg_name(), L, E, mb, &shm), "shm_create") != EPLB_OK)
    abort();
  int fd = shm_open(seg_name(), O_RDWR, 0);
  if (fd < 0)
    abort();
  off_t len = lseek(fd, 0, SEEK_END);
  size_t n = size < (size_t)len ? size : (size_t)len;
  if (pwrite(fd, data, n, 0) != (ssize_t)n)
    abort();
  close(fd);
  exercise(shm, 1);
  eplb_shm_close(shm);
}

/* Anyone may put a FIFO under a segment's name: opening it must fail at
 * once (reading it would wait for a writer for ever). Once per process. */
static void fifo_segment(void) {
  static int done;
  if (done++)
    return;
  char fifo[96], path[128];
  snprintf(fifo, sizeof fifo, "%s-fifo", seg_name());
  snprintf(path, sizeof path, "/dev/shm%s", fifo);
  if (mkfifo(path, 0600) != 0)
    return; /* no /dev/shm: nothing to check */
  for (int writable = 0; writable <= 1; writable++) {
    eplb_shm_t *shm = NULL;
    fuzz_util_begin();
    fuzz_util_check(
        fuzz_util_status(eplb_shm_open(fifo, writable ? EPLB_SHM_READ_WRITE : EPLB_SHM_READ, &shm),
                         "shm_open") != EPLB_OK,
        "a FIFO is no segment");
  }
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fifo_segment();
  put_segment(data, size);
  for (int writable = 0; writable <= 1; writable++) {
    eplb_shm_t *shm = NULL;
    fuzz_util_begin();
    eplb_status_t st = fuzz_util_status(
        eplb_shm_open(seg_name(), writable ? EPLB_SHM_READ_WRITE : EPLB_SHM_READ, &shm),
        "shm_open");
    fuzz_util_check((st == EPLB_OK) == (shm != NULL), "*out set exactly on success");
    if (shm)
      exercise(shm, writable);
    eplb_shm_close(shm);
  }
  creator_pass(data, size);
  shm_unlink(seg_name());
  return 0;
}

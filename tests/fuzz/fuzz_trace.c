/* Fuzz target for the native trace reader and recovery: the input is taken
 * as a whole .eplbt file. Invariants checked beyond "no crash, no leak": a
 * successful recovery always produces a file that opens strictly and reads
 * back completely. */
#include "tests/fuzz/fuzz_trace.h"

#include "eplb/trace.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char in_path[256], out_path[280];

/* A tmpfs keeps recovery's fsync cheap; TMPDIR otherwise. */
static void init_paths(void) {
  if (in_path[0])
    return;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(in_path, sizeof in_path, "%s/eplb-fuzz-XXXXXX", base && *base ? base : "/tmp");
  int fd = mkstemp(in_path);
  if (fd < 0)
    abort();
  close(fd);
  snprintf(out_path, sizeof out_path, "%s.rec", in_path);
}

static void put_file(const uint8_t *data, size_t size) {
  int fd = open(in_path, O_WRONLY | O_TRUNC);
  if (fd < 0)
    abort();
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0)
      abort();
    data += n;
    size -= (size_t)n;
  }
  close(fd);
}

void fuzz_trace_cleanup(void) {
  if (in_path[0]) {
    unlink(in_path);
    unlink(out_path);
  }
}

/* Reads every step three ways; returns the first error. */
static eplb_status_t exercise(eplb_trace_t *t) {
  eplb_trace_step_t st;
  eplb_status_t s;
  uint64_t n = 0, sink = 0;
  while ((s = eplb_trace_next(t, &st)) == EPLB_OK) {
    const eplb_trace_meta_t *m = eplb_trace_meta(t);
    if (st.index != n++)
      abort();
    /* Touch the ends of every array so that ASan sees out-of-bounds views. */
    size_t le = (size_t)m->num_layers * m->num_experts;
    sink += st.counts[0] + st.counts[le - 1];
    if (st.num_rows)
      sink += st.topk[(size_t)st.num_rows * m->num_layers * m->topk - 1] +
              (uint32_t)st.source_rank[st.num_rows - 1];
  }
  if (s != EPLB_EOF)
    return s;
  if (n != eplb_trace_num_steps(t))
    abort();
  if (n && (s = eplb_trace_read_step(t, n - 1, &st)) != EPLB_OK)
    return s;
  if (n && (s = eplb_trace_read_step(t, 0, &st)) != EPLB_OK)
    return s;
  const eplb_trace_meta_t *m = eplb_trace_meta(t);
  size_t le = (size_t)m->num_layers * m->num_experts;
  if (le <= (1u << 20)) {
    double *sum = malloc(le * sizeof *sum);
    if (!sum)
      abort();
    s = eplb_trace_window_sum(t, 0, UINT64_MAX, sum);
    free(sum);
    if (s != EPLB_OK)
      return s;
  }
  (void)sink;
  return eplb_trace_refresh(t, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init_paths();
  put_file(data, size);
  for (int torn = 0; torn <= 1; torn++) {
    eplb_trace_open_options_t o;
    eplb_trace_open_options_default(&o);
    o.allow_torn_tail = torn;
    eplb_trace_t *t = NULL;
    if (eplb_trace_open(in_path, &o, &t) == EPLB_OK)
      (void)exercise(t);
    eplb_trace_close(t);
  }
  eplb_trace_recover_report_t rep;
  if (eplb_trace_recover(in_path, out_path, &rep) == EPLB_OK) {
    eplb_trace_t *t = NULL;
    if (eplb_trace_open(out_path, NULL, &t) != EPLB_OK)
      abort();
    if (eplb_trace_num_steps(t) != rep.steps_recovered || exercise(t) != EPLB_OK)
      abort();
    eplb_trace_close(t);
    unlink(out_path);
  }
  return 0;
}

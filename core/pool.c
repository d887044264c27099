/* core/pool.c — independent items in parallel (core.h, eplb__pool_run): the
 * planner's layers and the split solver's multi-layer call. Workers take
 * the next item index from a shared counter, so an item's result cannot
 * depend on which worker ran it, and the error returned is the lowest
 * failing item's whatever the thread count or the order items finished. */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

typedef struct {
  eplb__pool_fn_t fn;
  void *arg;
  uint32_t n;
  void (*thread_done)(void);
  _Atomic uint32_t next;
  bool shared;          /* several workers: lock initialised and used */
  pthread_mutex_t lock; /* guards the fields below */
  uint32_t fail_item;
  eplb_status_t fail_status;
  char fail_detail[512];
} pool_t;

static void lock(pool_t *p) {
  if (p->shared)
    pthread_mutex_lock(&p->lock);
}

static void unlock(pool_t *p) {
  if (p->shared)
    pthread_mutex_unlock(&p->lock);
}

typedef struct {
  pool_t *pool;
  uint32_t index;
  pthread_t thread;
  bool started;
} worker_t;

static void run_worker(pool_t *p, uint32_t w) {
  for (;;) {
    uint32_t i = atomic_fetch_add(&p->next, 1);
    if (i >= p->n)
      return;
    lock(p);
    bool past_failure = i > p->fail_item;
    unlock(p);
    /* Items are handed out in increasing order, so every item below a
     * failure is already taken: the lowest failing item is still found. */
    if (past_failure)
      return;
    eplb_status_t st = p->fn(p->arg, w, i);
    if (st) {
      lock(p);
      if (i < p->fail_item) {
        p->fail_item = i;
        p->fail_status = st;
        snprintf(p->fail_detail, sizeof p->fail_detail, "%s", eplb_error_detail());
      }
      unlock(p);
    }
  }
}

static void *worker_main(void *arg) {
  worker_t *wk = arg;
  run_worker(wk->pool, wk->index);
  if (wk->pool->thread_done)
    wk->pool->thread_done();
  return NULL;
}

uint32_t eplb__pool_workers(uint32_t requested, uint32_t items, uint32_t max, int small) {
  uint32_t n = requested;
  if (!n) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = small || cores < 1 ? 1 : (unsigned long)cores > max ? max : (uint32_t)cores;
  }
  n = n < items ? n : items;
  return n ? n : 1;
}

eplb_status_t eplb__pool_run(uint32_t workers, uint32_t n, eplb__pool_fn_t fn, void *arg,
                             void (*thread_done)(void), uint32_t *failed) {
  uint32_t nw = workers < n ? workers : n;
  nw = nw ? nw : 1;
  pool_t p = {.fn = fn, .arg = arg, .n = n, .thread_done = thread_done, .fail_item = UINT32_MAX};
  atomic_init(&p.next, 0);
  eplb_status_t st = EPLB_OK;
  /* Without memory for the workers' table or a mutex the calling thread
   * does the job alone (the result is the same). */
  worker_t *wk = nw > 1 ? eplb__calloc(nw, sizeof *wk) : NULL;
  nw = wk ? nw : 1;
  if (nw > 1 && pthread_mutex_init(&p.lock, NULL)) {
    eplb__free(wk);
    wk = NULL, nw = 1;
  }
  p.shared = nw > 1;
  /* A thread that cannot be started is not an error: its items go to the
   * others (the calling thread, worker 0, always works). */
  for (uint32_t i = 1; i < nw; i++) {
    wk[i] = (worker_t){.pool = &p, .index = i};
    wk[i].started = pthread_create(&wk[i].thread, NULL, worker_main, &wk[i]) == 0;
  }
  run_worker(&p, 0);
  for (uint32_t i = 1; i < nw; i++)
    if (wk[i].started)
      pthread_join(wk[i].thread, NULL);
  if (nw > 1)
    pthread_mutex_destroy(&p.lock);
  eplb__free(wk);
  if (failed)
    *failed = p.fail_item;
  if (p.fail_item != UINT32_MAX)
    st = eplb__error(p.fail_status, "core", "%s", p.fail_detail);
  return st;
}

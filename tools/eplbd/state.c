/* tools/eplbd/state.c — the daemon's shared state (eplbd.h): the lock, the
 * installed sources, the clock and the stop flag. Its own file, below every
 * other: main.c installs the sources and calls the files that read them
 * (http.c, sources.c, step.c, publish.c), which must not call back into
 * main.c. */
#include "eplbd.h"

#include <time.h>

pthread_mutex_t eplbd_lock = PTHREAD_MUTEX_INITIALIZER;
eplbd_source_t *eplbd_sources;
uint32_t eplbd_num_sources;
double eplbd_start_time;

volatile sig_atomic_t eplbd_stop_requested;

double eplbd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

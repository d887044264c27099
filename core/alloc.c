#include "core/core.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static void *std_malloc(size_t size, void *user) {
  (void)user;
  return malloc(size);
}
static void *std_calloc(size_t n, size_t size, void *user) {
  (void)user;
  return calloc(n, size);
}
static void *std_realloc(void *p, size_t size, void *user) {
  (void)user;
  return realloc(p, size);
}
static void std_free(void *p, void *user) {
  (void)user;
  free(p);
}

static const eplb_allocator_t std_allocator = {std_malloc, std_calloc, std_realloc, std_free, NULL};

/* A pointer swap keeps the hooks consistent for threads already running. */
static _Atomic(const eplb_allocator_t *) current = &std_allocator;
static eplb_allocator_t user_copy;

eplb_status_t eplb_allocator_set(const eplb_allocator_t *a) {
  if (!a) {
    atomic_store(&current, &std_allocator);
    return EPLB_OK;
  }
  if (!a->malloc || !a->calloc || !a->realloc || !a->free)
    return eplb__error(EPLB_EINVAL, "core", "allocator: every hook must be set");
  user_copy = *a;
  atomic_store(&current, &user_copy);
  return EPLB_OK;
}

void *eplb__malloc(size_t size) {
  const eplb_allocator_t *a = atomic_load(&current);
  return a->malloc(size ? size : 1, a->user);
}

void *eplb__calloc(size_t n, size_t size) {
  const eplb_allocator_t *a = atomic_load(&current);
  if (n == 0 || size == 0)
    n = size = 1;
  return a->calloc(n, size, a->user);
}

void *eplb__realloc(void *ptr, size_t size) {
  const eplb_allocator_t *a = atomic_load(&current);
  return a->realloc(ptr, size ? size : 1, a->user);
}

void *eplb__malloc_array(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size)
    return NULL;
  return eplb__malloc(n * size);
}

void *eplb__realloc_array(void *ptr, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size)
    return NULL;
  return eplb__realloc(ptr, n * size);
}

void *eplb__room_for_one(void *v, size_t *cap, size_t n, size_t size, size_t first) {
  if (n < *cap)
    return v;
  size_t c = *cap ? 2 * *cap : first;
  void *p = c > *cap ? eplb__realloc_array(v, c, size) : NULL;
  if (p)
    *cap = c;
  return p;
}

void eplb__free(void *ptr) {
  if (!ptr)
    return;
  const eplb_allocator_t *a = atomic_load(&current);
  a->free(ptr, a->user);
}

char *eplb__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = eplb__malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

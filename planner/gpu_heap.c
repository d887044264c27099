/* planner/gpu_heap.c — GPUs in a binary min-heap on (load, index), with each
 * GPU's place in it. The placements fill the least-loaded GPU with a free
 * slot, first by index on a tie; the heap gives the GPU a linear scan for
 * the least load would, in O(log G) per replica instead of O(G), and a GPU
 * whose load rose or whose slots ran out moves or leaves in O(log G). The
 * order is total, so the GPU at the top does not depend on how the heap
 * was filled. */
#include "planner/planner.h"

bool eplb__gpu_heap_less(const double *load, uint32_t a, uint32_t b) {
  return load[a] < load[b] || (load[a] == load[b] && a < b);
}

static void put_at(eplb__gpu_heap_t *h, uint32_t i, uint32_t g) {
  h->heap[i] = g;
  h->pos[g] = i;
}

static void up(eplb__gpu_heap_t *h, uint32_t i) {
  uint32_t g = h->heap[i];
  while (i > 0 && eplb__gpu_heap_less(h->load, g, h->heap[(i - 1) / 2])) {
    put_at(h, i, h->heap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  put_at(h, i, g);
}

static void down(eplb__gpu_heap_t *h, uint32_t i) {
  uint32_t g = h->heap[i];
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= h->n)
      break;
    if (c + 1 < h->n && eplb__gpu_heap_less(h->load, h->heap[c + 1], h->heap[c]))
      c++;
    if (!eplb__gpu_heap_less(h->load, h->heap[c], g))
      break;
    put_at(h, i, h->heap[c]);
    i = c;
  }
  put_at(h, i, g);
}

void eplb__gpu_heap_init(eplb__gpu_heap_t *h, const double *load, uint32_t *heap, uint32_t *pos,
                         uint32_t ng) {
  *h = (eplb__gpu_heap_t){load, heap, pos, 0};
  for (uint32_t g = 0; g < ng; g++)
    pos[g] = UINT32_MAX;
}

void eplb__gpu_heap_push(eplb__gpu_heap_t *h, uint32_t g) {
  put_at(h, h->n, g);
  up(h, h->n++);
}

void eplb__gpu_heap_remove(eplb__gpu_heap_t *h, uint32_t g) {
  uint32_t i = h->pos[g];
  h->pos[g] = UINT32_MAX;
  if (--h->n == i)
    return;
  uint32_t moved = h->heap[h->n];
  put_at(h, i, moved);
  down(h, i);
  up(h, h->pos[moved]);
}

uint32_t eplb__gpu_heap_pop(eplb__gpu_heap_t *h) {
  uint32_t g = h->heap[0];
  eplb__gpu_heap_remove(h, g);
  return g;
}

void eplb__gpu_heap_raised(eplb__gpu_heap_t *h, uint32_t g) { down(h, h->pos[g]); }

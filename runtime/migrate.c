/* runtime/migrate.c — the migration diff (which old slot feeds each changed
 * slot) and its schedule in rounds under a staging budget. Both are pure
 * functions of the plans, so every rank computes the same schedule without
 * communicating. */
#include "runtime/runtime.h"

#include <string.h>

eplb_status_t eplb__diff_layer(uint32_t layer, uint32_t R, uint32_t S, uint32_t K,
                               const int32_t *old_p2l, const int32_t *new_p2l, eplb__move_t **moves,
                               size_t *n, size_t *cap) {
  eplb_status_t st = EPLB_OK;
  /* Spreading sends over equally close sources keeps one GPU's link from
   * carrying a whole hot expert's replication. */
  uint32_t *used = eplb__calloc(R, sizeof *used);
  if (!used)
    return eplb__error(EPLB_ENOMEM, "runtime", "diff of layer %u", layer);
  for (uint32_t dst = 0; dst < R; dst++) {
    if (old_p2l[dst] == new_p2l[dst])
      continue;
    uint32_t drank = dst / S, dnode = dst / (S * K);
    uint32_t best = UINT32_MAX, best_class = 3;
    for (uint32_t src = 0; src < R; src++) {
      if (old_p2l[src] != new_p2l[dst])
        continue;
      /* eplb_link_class_t: 0 same GPU, 1 same node, 2 across nodes */
      uint32_t cls = src / S == drank ? 0u : src / (S * K) == dnode ? 1u : 2u;
      if (cls < best_class || (cls == best_class && used[src] < used[best])) {
        best = src;
        best_class = cls;
      }
    }
    if (best == UINT32_MAX) {
      st = eplb__error(EPLB_EINVAL, "runtime",
                       "layer %u slot %u: expert %d is in no slot of the old plan", layer, dst,
                       new_p2l[dst]);
      goto done;
    }
    if (*n == *cap) {
      size_t nc = *cap ? 2 * *cap : 64;
      eplb__move_t *grown = eplb__realloc_array(*moves, nc, sizeof *grown);
      if (!grown) {
        st = eplb__error(EPLB_ENOMEM, "runtime", "%zu moves", nc);
        goto done;
      }
      *moves = grown;
      *cap = nc;
    }
    used[best]++;
    (*moves)[(*n)++] = (eplb__move_t){layer, dst, best, (uint8_t)best_class};
  }
done:
  eplb__free(used);
  return st;
}

uint32_t eplb__schedule_rounds(uint32_t nlayers, const size_t *off, const eplb__move_t *moves,
                               uint32_t S, uint32_t P, uint32_t layers_per_round,
                               uint64_t max_per_rank, uint32_t *round_of, uint64_t *work) {
  uint64_t *in_round = work, *in_layer = work + P;
  uint32_t round = 0, layers_in_round = 0;
  memset(in_round, 0, P * sizeof *in_round);
  for (uint32_t i = 0; i < nlayers; i++) {
    memset(in_layer, 0, P * sizeof *in_layer);
    /* Same-rank copies go through staging too: their source may be
     * overwritten by the same switch. */
    for (size_t m = off[i]; m < off[i + 1]; m++)
      in_layer[moves[m].dst_slot / S]++;
    bool fits = layers_in_round < layers_per_round;
    for (uint32_t p = 0; fits && p < P; p++)
      fits = in_round[p] + in_layer[p] <= max_per_rank;
    if (!fits && layers_in_round > 0) {
      round++;
      layers_in_round = 0;
      memset(in_round, 0, P * sizeof *in_round);
    }
    for (uint32_t p = 0; p < P; p++)
      in_round[p] += in_layer[p];
    round_of[i] = round;
    layers_in_round++;
  }
  return nlayers ? round + 1 : 0;
}

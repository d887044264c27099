/* kernels/alias_math.h — the construction of one expert's alias columns
 * (Vose's method) from replica shares, shared by the host's dispatch tables
 * (runtime/dispatch.c, eplb__dtab_build) and the device's table build
 * (kernels/split.cu, eplb__cuda_table_build) so that both write bit-identical
 * tables. C and CUDA; no allocation, no libc beyond what device code has.
 *
 * Bit-identity rests on every step being one IEEE double operation rounded
 * to nearest: additions, divisions and one multiplication, which is written
 * with __dmul_rn on the device because nvcc would otherwise be free to fuse
 * it with a later subtraction into an FMA (rounded once, not twice). The
 * host compiles C17, where GCC does not contract across statements. */
#ifndef EPLB_ALIAS_MATH_H
#define EPLB_ALIAS_MATH_H

#include "kernels/dispatch_math.h"

#include <stddef.h>
#include <stdint.h>

/* a * b rounded once, never contracted into an FMA. */
static inline EPLB__HD double eplb__alias_mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/* A column probability q (>= 0) in 2^-32 units; >= 1 keeps always. The
 * multiplication by 2^32 is exact (what ldexp(q, 32) computes). */
static inline EPLB__HD uint32_t eplb__alias_prob(double q) {
  return q >= 1 ? UINT32_MAX : (uint32_t)eplb__alias_mul(q, 4294967296.0);
}

/* Buckets slots [R] by their expert (phy2log[r] < E, checked by the caller):
 * expert e's slots, in slot order, are list[start[e] .. start[e+1]). */
static inline EPLB__HD void eplb__alias_bucket(uint32_t E, uint32_t R, const int32_t *phy2log,
                                               uint32_t *start, uint32_t *list) {
  for (uint32_t e = 0; e <= E; e++)
    start[e] = 0;
  for (uint32_t r = 0; r < R; r++)
    start[(uint32_t)phy2log[r]]++;
  for (uint32_t e = 1; e < E; e++) /* start[e]: the end of e's list */
    start[e] += start[e - 1];
  start[E] = R;
  /* From the back, so that start[e] ends at its list's beginning and each
   * list comes out in slot order. */
  for (uint32_t r = R; r-- > 0;)
    list[--start[(uint32_t)phy2log[r]]] = r;
}

/* Writes an expert's candidates among its n slots list[0 .. n) — those with
 * share > 0, and on `node` (slot / per_node) when node_only — to slot[] with
 * their renormalised shares in weight[], in slot order. Returns how many. */
static inline EPLB__HD uint32_t eplb__alias_candidates(const uint32_t *list, uint32_t n,
                                                       const double *share, uint32_t per_node,
                                                       uint32_t node, int node_only, int32_t *slot,
                                                       double *weight) {
  double total = 0;
  for (uint32_t i = 0; i < n; i++)
    if (share[list[i]] > 0 && (!node_only || list[i] / per_node == node))
      total += share[list[i]];
  if (!(total > 0))
    return 0;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = list[i];
    if (!(share[r] > 0) || (node_only && r / per_node != node))
      continue;
    slot[k] = (int32_t)r;
    weight[k] = share[r] / total;
    k++;
  }
  return k;
}

/* Vose's construction of the alias columns [a, b) from slot[] and weight[]
 * (summing to 1 over the columns): writes prob[] and alias[]. Scratch: q
 * [b] (indexed like the columns), work [2 (b - a)]. */
static inline EPLB__HD void eplb__alias_build(uint32_t a, uint32_t b, const int32_t *slot,
                                              const double *weight, double *q, uint32_t *work,
                                              uint32_t *prob, int32_t *alias) {
  uint32_t n = b - a, ns = 0, nl = 0;
  uint32_t *small = work, *large = work + n;
  for (uint32_t j = a; j < b; j++) {
    q[j] = eplb__alias_mul(weight[j], (double)n);
    if (q[j] < 1)
      small[ns++] = j;
    else
      large[nl++] = j;
  }
  while (ns && nl) {
    uint32_t s = small[--ns], l = large[nl - 1];
    prob[s] = eplb__alias_prob(q[s]);
    alias[s] = slot[l];
    q[l] -= 1 - q[s];
    if (q[l] < 1) {
      nl--;
      small[ns++] = l;
    }
  }
  /* What is left has (up to rounding) probability 1. */
  while (nl) {
    uint32_t l = large[--nl];
    prob[l] = UINT32_MAX, alias[l] = slot[l];
  }
  while (ns) {
    uint32_t s = small[--ns];
    prob[s] = UINT32_MAX, alias[s] = slot[s];
  }
}

/* Bytes of eplb__alias_table's scratch for E experts and R slots; with mem
 * (8-byte aligned) not NULL, also points the arrays into it. */
static inline EPLB__HD size_t eplb__alias_ws_layout(uint32_t E, uint32_t R, unsigned char *mem,
                                                    uint32_t **start, uint32_t **list,
                                                    double **weight, double **q, uint32_t **work) {
  size_t sizes[5] = {(size_t)R * 8, (size_t)R * 8, ((size_t)E + 1) * 4, (size_t)R * 4,
                     (size_t)R * 8};
  size_t at[5], off = 0;
  for (int i = 0; i < 5; i++) {
    at[i] = off;
    off += (sizes[i] + 7) & ~(size_t)7;
  }
  if (mem) {
    *weight = (double *)(void *)(mem + at[0]);
    *q = (double *)(void *)(mem + at[1]);
    *start = (uint32_t *)(void *)(mem + at[2]);
    *list = (uint32_t *)(void *)(mem + at[3]);
    *work = (uint32_t *)(void *)(mem + at[4]); /* 2R uint32 */
  }
  return off;
}

/* The global-shares table (eplb__dtab_build with no node shares and no
 * local-first) of E experts over R slots into off [E+1] and slot, alias,
 * prob [R] (columns 0 .. off[E] written). An expert with one slot that has
 * a share gets that slot as its only column; an expert whose slots all have
 * share <= 0 gets none. Scratch: start [E+1], list [R], weight, q [R], work
 * [2R]. phy2log[r] < E (checked by the caller). */
static inline EPLB__HD void eplb__alias_table(uint32_t E, uint32_t R, const int32_t *phy2log,
                                              const double *share, uint32_t *off, int32_t *slot,
                                              int32_t *alias, uint32_t *prob, uint32_t *start,
                                              uint32_t *list, double *weight, double *q,
                                              uint32_t *work) {
  eplb__alias_bucket(E, R, phy2log, start, list);
  uint32_t pos = 0;
  for (uint32_t e = 0; e < E; e++) {
    off[e] = pos;
    uint32_t n = start[e + 1] - start[e];
    if (n == 1 && share[list[start[e]]] > 0) {
      uint32_t r = list[start[e]];
      slot[pos] = alias[pos] = (int32_t)r;
      weight[pos] = 1.0;
      prob[pos] = UINT32_MAX;
      pos++;
      continue;
    }
    uint32_t end =
        pos + eplb__alias_candidates(list + start[e], n, share, 1, 0, 0, slot + pos, weight + pos);
    eplb__alias_build(pos, end, slot, weight, q, work, prob, alias);
    pos = end;
  }
  off[E] = pos;
}

#endif

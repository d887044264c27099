/* lp/split_write.c — a solve's flow written out: each replicated expert's
 * amounts per GPU from the flow's pairs, split over its replicas there, as
 * shares, amounts and GPU loads (or the loads alone). */
#include "lp/lp.h"

#include <math.h>

#define NONE UINT32_MAX

/* Splits `amount` over `c` replicas: equal parts, or whole tokens with the
 * remainder on the first ones. */
static double part(double amount, uint32_t c, uint32_t j, bool integer) {
  if (c == 1)
    return amount;
  if (!integer)
    return amount / c;
  double q = floor(amount / c), rem = amount - q * c;
  return q + (j < rem ? 1.0 : 0.0);
}

/* Each expert's amounts over its replicas (experts on one GPU split evenly,
 * the others by the flow per GPU), as shares and GPU loads. The arrays are
 * read through locals: through `out` and `s`, every double stored would
 * reload the pointers. An expert on one slot (most of them) takes the short
 * way, bit for bit the general loop's: its amount is its load w, its share
 * w / (0 + w) = 1, or 1 / 1 when w is 0. Without out->share the amounts
 * go straight to the GPU loads, in the order the shares' pass adds them. */
static void write_shares(const eplb_split_t *s, const double *loads, bool integer,
                         eplb_split_result_t *out) {
  const uint32_t *rep_start = s->rep_start, *rep_list = s->rep_list, *rep_pair = s->rep_pair;
  const uint32_t *gpu_of = s->gpu_of, *pair_cnt = s->pair_cnt;
  const double *pamt = s->pamt;
  double *share = out->share, *amount = out->amount, *gpu_load = out->gpu_load;
  for (uint32_t g = 0; g < s->G; g++)
    gpu_load[g] = 0.0;
  for (uint32_t e = 0; e < s->E; e++) {
    uint32_t b = rep_start[e], end = rep_start[e + 1];
    double w = loads[e];
    if (end - b == 1) {
      uint32_t r = rep_list[b];
      if (amount)
        amount[r] = w;
      gpu_load[gpu_of[r]] += w;
      if (share)
        share[r] = 1.0;
      continue;
    }
    double total = 0.0;
    for (uint32_t i = b, j = 0; i < end; i++) {
      uint32_t r = rep_list[i], q = rep_pair[r];
      if (i > b && q != rep_pair[rep_list[i - 1]])
        j = 0;
      double x =
          q == NONE ? part(w, end - b, i - b, integer) : part(pamt[q], pair_cnt[q], j, integer);
      j++;
      if (!share) { /* loads only: the same amounts, added in the same order */
        if (amount)
          amount[r] = x;
        gpu_load[gpu_of[r]] += x;
        continue;
      }
      share[r] = x;
      total += x;
    }
    if (!share)
      continue;
    for (uint32_t i = b; i < end; i++) {
      uint32_t r = rep_list[i];
      double x = share[r];
      if (amount)
        amount[r] = x;
      gpu_load[gpu_of[r]] += x;
      share[r] = total > 0 ? x / total : 1.0 / (end - b);
    }
  }
  double mx = 0.0;
  for (uint32_t g = 0; g < s->G; g++)
    if (gpu_load[g] > mx)
      mx = gpu_load[g];
  out->max_load = mx;
}

void eplb__split_write(eplb_split_t *s, const double *loads, bool integer,
                       eplb_split_result_t *out) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M;
  for (uint32_t g = 0; g < s->G; g++)
    s->gin[g] = s->base[g];
  for (uint32_t q = 0; q < s->P; q++) {
    s->pamt[q] = f->res[2 * (M + q) + 1];
    s->gin[s->pair_gpu[q]] += s->pamt[q];
  }
  /* Whatever rounding left unrouted (tiny) goes where the most room is. */
  for (uint32_t k = 0; k < M; k++) {
    double sum = 0.0;
    for (uint32_t q = s->pair_start[k]; q < s->pair_start[k + 1]; q++)
      sum += s->pamt[q];
    double d = loads[s->multi[k]] - sum;
    if (d > 0 && !integer) {
      uint32_t best = s->pair_start[k];
      for (uint32_t q = best + 1; q < s->pair_start[k + 1]; q++)
        if (s->gin[s->pair_gpu[q]] < s->gin[s->pair_gpu[best]])
          best = q;
      s->pamt[best] += d;
      s->gin[s->pair_gpu[best]] += d;
    }
  }
  write_shares(s, loads, integer, out);
}

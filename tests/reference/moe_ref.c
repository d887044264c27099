/* tests/reference/moe_ref.c — CPU reference (fp32, small sizes) of the
 * reference MoE decode layer that the GPU check times (moe_ref.cu). */
#include "tests/reference/reference.h"

#include <math.h>

static float dot(const float *a, const float *b, uint32_t n) {
  float s = 0;
  for (uint32_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

void eplb_test_moe_ref(const eplb_test_moe_shape_t *sh, const float *x, const float *wr,
                       const float *w1, const float *w3, const float *w2, float *y,
                       int32_t *topk_out) {
  uint32_t H = sh->hidden, F = sh->ffn, E = sh->experts, K = sh->topk;
  enum { MAXK = 64 };
  for (uint32_t t = 0; t < sh->batch; t++) {
    const float *xt = x + (size_t)t * H;
    float *yt = y + (size_t)t * H;
    int32_t sel[MAXK];
    float sc[MAXK];
    uint32_t k = K < MAXK ? K : MAXK;
    /* Top-k by insertion: a strictly higher score displaces, so equal
     * scores keep the lower id. */
    for (uint32_t j = 0; j < k; j++)
      sel[j] = -1, sc[j] = -INFINITY;
    for (uint32_t e = 0; e < E; e++) {
      float s = dot(xt, wr + (size_t)e * H, H);
      if (sel[k - 1] >= 0 && !(s > sc[k - 1]))
        continue;
      uint32_t p = k - 1;
      while (p > 0 && (sel[p - 1] < 0 || s > sc[p - 1])) {
        sel[p] = sel[p - 1], sc[p] = sc[p - 1];
        p--;
      }
      sel[p] = (int32_t)e, sc[p] = s;
    }
    float wsum = 0, w[MAXK];
    for (uint32_t j = 0; j < k; j++)
      wsum += w[j] = expf(sc[j] - sc[0]);
    for (uint32_t i = 0; i < H; i++)
      yt[i] = 0;
    for (uint32_t j = 0; j < k; j++) {
      if (topk_out)
        topk_out[(size_t)t * K + j] = sel[j];
      size_t e = (size_t)sel[j];
      for (uint32_t h = 0; h < H; h++) {
        float acc = 0;
        for (uint32_t f = 0; f < F; f++) {
          float g = dot(xt, w1 + (e * F + f) * H, H), u = dot(xt, w3 + (e * F + f) * H, H);
          acc += w2[(e * H + h) * F + f] * (g / (1 + expf(-g)) * u);
        }
        yt[h] += w[j] / wsum * acc;
      }
    }
  }
}

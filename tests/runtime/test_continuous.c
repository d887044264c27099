/* tests/runtime/test_continuous.c — continuous re-placement in one process:
 * the configs it refuses, and a standalone rank of a larger world (every
 * all-reduce the identity) whose slots follow a changing mix, every token
 * mapped to a slot in service holding its expert, before and after. */
#include "tests/support.h"

#include "eplb/runtime.h"

#include <math.h>
#include <string.h>

enum { L = 3, E = 8, K = 2, S = 4, P = 4, TOK = 64 };

static void cfg(eplb_runtime_config_t *c) {
  eplb_runtime_config_default(c);
  c->num_layers = L, c->num_experts = E, c->topk = K, c->slots_per_rank = S;
  c->world_size = P, c->ranks_per_node = 2; /* comm NONE: a standalone rank */
  c->split_per_batch = 1;
  c->continuous_window = 1;
}

START_TEST(refused_configs) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  /* Each refusal names what the config needs. */
  const char *need[] = {"per-batch split", "window_steps", "continuous_lag",
                        "interval_steps",  "device",       "continuous_in_place",
                        "in place",        "move_weight",  "slots_per_gpu"};
  for (int i = 0; i < 9; i++) {
    cfg(&c);
    switch (i) {
    case 0: c.split_per_batch = 0; break;
    case 1: c.continuous_window = c.policy.window_steps + 1; break;
    case 2: c.continuous_lag = 2; break;
    case 3: c.policy.interval_steps = 4; break;
    case 4: c.device.kind = EPLB_DEVICE_EMULATED, c.continuous_in_place = 1; break;
    case 5: c.continuous_in_place = 2; break;
    case 6: c.continuous_in_place = 1, c.split_whole_tokens = 1; break;
    case 7: c.continuous.move_weight = NAN; break;
    default: c.continuous.slots_per_gpu = 5000; break;
    }
    ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
    ck_assert_ptr_null(rt);
    ck_assert_ptr_nonnull(strstr(eplb_error_detail(), need[i]));
  }
}
END_TEST

/* Hot experts that change every 5 steps. */
static void tokens(uint32_t step, uint32_t l, int32_t *ids) {
  uint64_t st = 0x51ed + step * 131 + l;
  uint32_t hot = (step / 5 * 3 + l) % E;
  for (uint32_t t = 0; t < TOK; t++) {
    uint32_t a = eplb_test_xorshift(&st) % 4 ? hot : (uint32_t)(eplb_test_xorshift(&st) % E);
    ids[t * K] = (int32_t)a;
    ids[t * K + 1] = (int32_t)((a + 1 + eplb_test_xorshift(&st) % (E - 1)) % E);
  }
}

/* One step's balancedness (mean over layers of mean / max GPU tokens) of
 * routing the mix through rt, every token on a replica of its expert. */
static double route_step(eplb_runtime_t *rt, uint32_t step) {
  int32_t ids[TOK * K], slots[TOK * K];
  double bal = 0;
  for (uint32_t l = 0; l < L; l++) {
    tokens(step, l, ids);
    ck_assert_int_eq(eplb_runtime_route(rt, l, ids, TOK, step * TOK, slots), EPLB_OK);
    const int32_t *p2l;
    const double *share; /* the shares that routed the call: in service only */
    ck_assert_int_eq(eplb_runtime_layer_plan(rt, l, &p2l, NULL), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_layer_split(rt, l, &share, NULL, NULL), EPLB_OK);
    double gpu[P] = {0}, max = 0;
    for (uint32_t i = 0; i < TOK * K; i++) {
      ck_assert_int_eq(p2l[slots[i]], ids[i]);
      ck_assert(share[slots[i]] > 0);
      gpu[slots[i] / S] += 1;
    }
    for (uint32_t g = 0; g < P; g++)
      max = gpu[g] > max ? gpu[g] : max;
    bal += TOK * K / (double)P / max / L;
  }
  return bal;
}

START_TEST(standalone_rank_follows_the_mix) {
  for (int in_place = 0; in_place < 2; in_place++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL, *fixed = NULL;
    cfg(&c);
    c.continuous_in_place = in_place;
    ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
    c.continuous_window = 0;
    ck_assert_int_eq(eplb_runtime_create(&c, NULL, &fixed), EPLB_OK);
    double moving = 0, kept = 0;
    for (uint32_t step = 0; step < 40; step++) {
      moving += route_step(rt, step) / 40;
      kept += route_step(fixed, step) / 40;
      ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
      ck_assert_int_eq(eplb_runtime_step_end(fixed), EPLB_OK);
    }
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert_uint_gt(m.continuous_moves, 5);
    ck_assert_uint_eq(m.continuous_failed, 0);
    ck_assert_msg(moving > kept + 0.02, "continuous %.4f, kept plan %.4f", moving, kept);
    eplb_runtime_destroy(rt);
    eplb_runtime_destroy(fixed);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("runtime-continuous");
  TCase *tc = tcase_create("continuous");
  tcase_add_test(tc, refused_configs);
  tcase_add_test(tc, standalone_rank_follows_the_mix);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}

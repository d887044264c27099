/* The size rule of the public option structs (eplb/common.h, "Struct
 * sizes"): a caller built against an older header passes a shorter struct,
 * a newer one a longer struct. Buffers of exactly the caller's size come
 * from malloc, so that under ASan any byte read or written past them fails
 * the test; canary bytes after them catch writes without ASan. */
#include "core/core.h"
#include "eplb/eplb.h"
#include "eplb/model.h"
#include "tests/support.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* Every sized struct: its name, its size in this build and its init and
 * default through wrappers of one type, for the table-driven tests. */
#define SIZED(name)                                                                                \
  static eplb_status_t init_##name(void *p, size_t n) { return eplb_##name##_init(p, n); }         \
  static void default_##name(void *p) { eplb_##name##_default(p); }
#define SIZED_PLAN_ARRAYS                                                                          \
  static eplb_status_t init_plan_arrays(void *p, size_t n) { return eplb_plan_arrays_init(p, n); } \
  static void default_plan_arrays(void *p) {                                                       \
    *(eplb_plan_arrays_t *)p = eplb_plan_arrays_default();                                         \
  }

SIZED(plan_options)
SIZED(plan_diff_options)
SIZED(plan_switch_options)
SIZED(plan_step_options)
SIZED(plan_resplit_options)
SIZED(runtime_config)
SIZED(cost_model)
SIZED(sim_options)
SIZED(split_options)
SIZED(trace_meta)
SIZED(trace_open_options)
SIZED(trace_stats_options)
SIZED(trace_writer_options)
SIZED(trace_convert_options)
SIZED(synth_options)
SIZED(decode_split_options)
SIZED_PLAN_ARRAYS

#define ROW(name)                                                                                  \
  { "eplb_" #name "_t", sizeof(eplb_##name##_t), init_##name, default_##name }
static const struct {
  const char *name;
  size_t size;
  eplb_status_t (*init)(void *p, size_t n);
  void (*dflt)(void *p);
} sized[] = {
    ROW(plan_options),        ROW(plan_arrays),          ROW(plan_diff_options),
    ROW(plan_switch_options), ROW(plan_step_options),    ROW(plan_resplit_options),
    ROW(runtime_config),      ROW(cost_model),           ROW(sim_options),
    ROW(split_options),       ROW(trace_meta),           ROW(trace_open_options),
    ROW(trace_stats_options), ROW(trace_writer_options), ROW(trace_convert_options),
    ROW(synth_options),       ROW(decode_split_options),
};
#define NSIZED (sizeof sized / sizeof sized[0])

enum { CANARY = 64 };

static uint32_t size_field(const void *p) {
  uint32_t s;
  memcpy(&s, p, sizeof s);
  return s;
}

/* A struct of exactly n bytes, its other bytes garbage (what a caller's
 * stack holds); free with free(). */
static void *caller_struct(size_t n) {
  unsigned char *p = malloc(n);
  ck_assert_ptr_nonnull(p);
  memset(p, 0xA5, n);
  return p;
}

START_TEST(every_init_writes_exactly_the_size_asked) {
  for (size_t i = 0; i < NSIZED; i++) {
    size_t S = sized[i].size;
    /* Zeroed: a struct returned by value need not carry its padding. */
    unsigned char *full = calloc(1, S);
    ck_assert_ptr_nonnull(full);
    sized[i].dflt(full);
    ck_assert_uint_eq(size_field(full), S);
    size_t sizes[] = {4, 8, S / 2, S - 1, S, S + 24};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      /* Exactly n bytes for ASan, then the same with a canary after them. */
      unsigned char *p = caller_struct(n);
      ck_assert_msg(sized[i].init(p, n) == EPLB_OK, "%s size %zu", sized[i].name, n);
      ck_assert_uint_eq(size_field(p), n);
      size_t m = n < S ? n : S;
      ck_assert_msg(!memcmp(p + 4, full + 4, m - 4), "%s size %zu: not the defaults", sized[i].name,
                    n);
      for (size_t b = S; b < n; b++)
        ck_assert_msg(!p[b], "%s size %zu: byte %zu past the library's is not 0", sized[i].name, n,
                      b);
      free(p);
      unsigned char *c = caller_struct(n + CANARY);
      ck_assert_int_eq(sized[i].init(c, n), EPLB_OK);
      for (size_t b = n; b < n + CANARY; b++)
        ck_assert_msg(c[b] == 0xA5, "%s size %zu wrote byte %zu", sized[i].name, n, b);
      free(c);
    }
    free(full);
    /* Sizes no caller has; NULL. */
    unsigned char buf[8];
    ck_assert_int_eq(sized[i].init(buf, 0), EPLB_EINVAL);
    ck_assert_int_eq(sized[i].init(buf, 3), EPLB_EINVAL);
    ck_assert_int_eq(sized[i].init(buf, EPLB_STRUCT_SIZE_MAX + 1), EPLB_EINVAL);
    ck_assert_int_eq(sized[i].init(NULL, S), EPLB_EINVAL);
  }
}
END_TEST

/* The helper itself on a struct of two versions: v1 {size, a}, v2 adds b. */
typedef struct v2 {
  uint32_t struct_size;
  uint32_t a;
  uint64_t b;
} v2_t;

START_TEST(take_fills_a_short_tail_and_refuses_unknown_fields) {
  v2_t dst = {sizeof dst, 7, 9};
  /* An older caller: its 8 bytes are read, b keeps the default. */
  uint32_t *old = caller_struct(8);
  old[0] = 8;
  old[1] = 3;
  ck_assert_int_eq(eplb__opts_take(&dst, old, sizeof dst, "v2_t", "core"), EPLB_OK);
  ck_assert_uint_eq(dst.struct_size, sizeof dst);
  ck_assert_uint_eq(dst.a, 3);
  ck_assert_uint_eq(dst.b, 9);
  free(old);
  /* A newer caller: 8 more bytes, accepted while they are zero. */
  unsigned char *nw = caller_struct(sizeof(v2_t) + 8);
  memset(nw, 0, sizeof(v2_t) + 8);
  v2_t src = {sizeof(v2_t) + 8, 4, 5};
  memcpy(nw, &src, sizeof src);
  ck_assert_int_eq(eplb__opts_take(&dst, nw, sizeof dst, "v2_t", "core"), EPLB_OK);
  ck_assert_uint_eq(dst.a, 4);
  ck_assert_uint_eq(dst.b, 5);
  ck_assert_uint_eq(dst.struct_size, sizeof dst);
  nw[sizeof(v2_t) + 5] = 1;
  ck_assert_int_eq(eplb__opts_take(&dst, nw, sizeof dst, "v2_t", "core"), EPLB_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "v2_t"));
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "byte 21"));
  free(nw);
  /* Sizes no caller has. */
  v2_t bad = {0, 1, 1};
  ck_assert_int_eq(eplb__opts_take(&dst, &bad, sizeof dst, "v2_t", "core"), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "struct_size 0"));
  bad.struct_size = 2;
  ck_assert_int_eq(eplb__opts_take(&dst, &bad, sizeof dst, "v2_t", "core"), EPLB_EINVAL);
  bad.struct_size = EPLB_STRUCT_SIZE_MAX + 1;
  ck_assert_int_eq(eplb__opts_take(&dst, &bad, sizeof dst, "v2_t", "core"), EPLB_EINVAL);
  /* NULL: the defaults stay. */
  ck_assert_int_eq(eplb__opts_take(&dst, NULL, sizeof dst, "v2_t", "core"), EPLB_OK);
  /* Give: at most the caller's bytes. */
  uint32_t *out = caller_struct(8);
  out[0] = 8;
  v2_t from = {sizeof from, 11, 12};
  ck_assert_int_eq(eplb__opts_give(out, &from, sizeof from, "v2_t", "core"), EPLB_OK);
  ck_assert_uint_eq(out[0], 8);
  ck_assert_uint_eq(out[1], 11);
  free(out);
}
END_TEST

/* A plan of loads [1 layer][8 experts] on 2 GPUs, 10 slots. */
static eplb_plan_t *plan_with(const eplb_plan_options_t *o, eplb_status_t want) {
  eplb_loads_t *loads = NULL;
  ck_assert_int_eq(eplb_loads_create(1, 8, &loads), EPLB_OK);
  for (uint32_t e = 0; e < 8; e++)
    loads->values[e] = 10.0 + 7.0 * e;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(loads, o, &p), want);
  eplb_loads_destroy(loads);
  return p;
}

START_TEST(older_plan_options_take_the_defaults_of_their_tail) {
  eplb_plan_options_t full;
  eplb_plan_options_default(&full);
  full.num_gpus = 2;
  full.num_replicas = 10;
  eplb_plan_t *want = plan_with(&full, EPLB_OK);
  /* A caller from before `threads` and everything appended after it. */
  size_t old = offsetof(eplb_plan_options_t, threads);
  eplb_plan_options_t *o = caller_struct(old);
  ck_assert_int_eq(eplb_plan_options_init(o, old), EPLB_OK);
  o->num_gpus = 2;
  o->num_replicas = 10;
  ck_assert_int_eq(eplb_plan_options_check(o), EPLB_OK);
  eplb_plan_t *got = plan_with(o, EPLB_OK);
  for (uint32_t r = 0; r < 10; r++)
    ck_assert_int_eq(eplb_plan_phy2log(got, 0)[r], eplb_plan_phy2log(want, 0)[r]);
  eplb_plan_destroy(got);
  eplb_plan_destroy(want);
  free(o);
}
END_TEST

START_TEST(newer_plan_options_need_zero_unknown_fields) {
  size_t S = sizeof(eplb_plan_options_t), n = S + 16;
  unsigned char *buf = caller_struct(n);
  ck_assert_int_eq(eplb_plan_options_init((eplb_plan_options_t *)buf, n), EPLB_OK);
  eplb_plan_options_t *o = (eplb_plan_options_t *)buf;
  o->num_gpus = 2;
  o->num_replicas = 10;
  eplb_plan_destroy(plan_with(o, EPLB_OK));
  ck_assert_int_eq(eplb_plan_options_check(o), EPLB_OK);
  buf[S + 3] = 1; /* a field this library does not know, set */
  plan_with(o, EPLB_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "eplb_plan_options_t"));
  ck_assert_int_eq(eplb_plan_options_check(o), EPLB_EUNSUPPORTED);
  o->struct_size = 0; /* a literal or memset: no size */
  plan_with(o, EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "struct_size 0"));
  free(buf);
}
END_TEST

START_TEST(trace_and_split_options_of_any_size) {
  const char *path = eplb_test_tmp("opts.eplbt");
  eplb_synth_options_t *so = caller_struct(offsetof(eplb_synth_options_t, rank_affinity));
  ck_assert_int_eq(eplb_synth_options_init(so, offsetof(eplb_synth_options_t, rank_affinity)),
                   EPLB_OK);
  so->num_steps = 4;
  ck_assert_int_eq(eplb_synth_generate(path, so), EPLB_OK);
  free(so);
  /* Open options of the size member alone: allow_torn_tail defaults to 0. */
  eplb_trace_open_options_t *oo = caller_struct(4);
  ck_assert_int_eq(eplb_trace_open_options_init(oo, 4), EPLB_OK);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(path, oo, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 4);
  eplb_trace_close(t);
  oo->struct_size = 0;
  ck_assert_int_eq(eplb_trace_open(path, oo, &t), EPLB_EINVAL);
  free(oo);
  /* Split options: older without threads, newer with a set unknown byte. */
  size_t old = offsetof(eplb_split_options_t, threads);
  eplb_split_options_t *sp = caller_struct(old);
  ck_assert_int_eq(eplb_split_options_init(sp, old), EPLB_OK);
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(sp, &s), EPLB_OK);
  eplb_split_destroy(s);
  free(sp);
  size_t n = sizeof(eplb_split_options_t) + 8;
  unsigned char *nw = caller_struct(n);
  ck_assert_int_eq(eplb_split_options_init((eplb_split_options_t *)nw, n), EPLB_OK);
  ck_assert_int_eq(eplb_split_create((eplb_split_options_t *)nw, &s), EPLB_OK);
  eplb_split_destroy(s);
  nw[n - 1] = 0xff;
  ck_assert_int_eq(eplb_split_create((eplb_split_options_t *)nw, &s), EPLB_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "eplb_split_options_t"));
  free(nw);
}
END_TEST

START_TEST(fillers_write_no_more_than_the_callers_size) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  ck_assert_int_eq(eplb_model_preset("deepseek-v2-lite", &m), EPLB_OK);
  ck_assert_int_eq(eplb_gpu_preset("h20", &g), EPLB_OK);
  eplb_cost_model_t full;
  eplb_cost_model_default(&full);
  ck_assert_int_eq(eplb_cost_model_from_desc(&m, &g, &full), EPLB_OK);
  /* A caller from before the link bandwidths. */
  size_t old = offsetof(eplb_cost_model_t, intra_node_gbps);
  unsigned char *c = caller_struct(old + CANARY);
  ck_assert_int_eq(eplb_cost_model_init((eplb_cost_model_t *)c, old), EPLB_OK);
  ck_assert_int_eq(eplb_cost_model_from_desc(&m, &g, (eplb_cost_model_t *)c), EPLB_OK);
  ck_assert(!memcmp(c + 4, (unsigned char *)&full + 4, old - 4));
  for (size_t b = old; b < old + CANARY; b++)
    ck_assert_uint_eq(c[b], 0xA5);
  /* Its reader takes the tail's defaults and gets the same times. */
  ck_assert_int_eq(eplb_cost_model_check((eplb_cost_model_t *)c), EPLB_OK);
  ck_assert_double_eq(eplb_cost_model_expert_time((eplb_cost_model_t *)c, 300),
                      eplb_cost_model_expert_time(&full, 300));
  free(c);
  size_t dold = offsetof(eplb_decode_split_options_t, max_moves);
  eplb_decode_split_options_t *d = caller_struct(dold);
  ck_assert_int_eq(eplb_decode_split_options_init(d, dold), EPLB_OK);
  ck_assert_int_eq(eplb_decode_split_options_for(&m, &g, 8, 8, d), EPLB_OK);
  ck_assert_double_eq(d->launch_us, g.launch_us);
  d->struct_size = 0;
  ck_assert_int_eq(eplb_decode_split_options_for(&m, &g, 8, 8, d), EPLB_EINVAL);
  free(d);
}
END_TEST

START_TEST(older_runtime_config_and_sim_options) {
  /* A config from before the fields "added later" (sample_rows onwards). */
  size_t old = offsetof(eplb_runtime_config_t, sample_rows);
  eplb_runtime_config_t *c = caller_struct(old);
  ck_assert_int_eq(eplb_runtime_config_init(c, old), EPLB_OK);
  c->num_layers = 2;
  c->num_experts = 8;
  c->topk = 2;
  c->slots_per_rank = 10;
  eplb_runtime_t *rt = NULL;
  ck_assert_int_eq(eplb_runtime_create(c, NULL, &rt), EPLB_OK);
  eplb_runtime_destroy(rt);
  c->struct_size = 2;
  ck_assert_int_eq(eplb_runtime_create(c, NULL, &rt), EPLB_EINVAL);
  free(c);
  /* Sim options up to the embedded plan options: those take the defaults. */
  size_t sold = offsetof(eplb_sim_options_t, plan);
  eplb_sim_options_t *s = caller_struct(sold);
  ck_assert_int_eq(eplb_sim_options_init(s, sold), EPLB_OK);
  ck_assert_int_eq(eplb_sim_options_check(s), EPLB_OK);
  uint64_t plan_steps[2], scored[2];
  ck_assert_int_eq(eplb_sim_steps(s, 10, 0, plan_steps, scored), EPLB_OK);
  free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core-opts");
  TCase *tc = tcase_create("opts");
  tcase_add_test(tc, every_init_writes_exactly_the_size_asked);
  tcase_add_test(tc, take_fills_a_short_tail_and_refuses_unknown_fields);
  tcase_add_test(tc, older_plan_options_take_the_defaults_of_their_tail);
  tcase_add_test(tc, newer_plan_options_need_zero_unknown_fields);
  tcase_add_test(tc, trace_and_split_options_of_any_size);
  tcase_add_test(tc, fillers_write_no_more_than_the_callers_size);
  tcase_add_test(tc, older_runtime_config_and_sim_options);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}

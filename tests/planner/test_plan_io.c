/* Planner suite, files: plan JSON round trip, minimal plans, exports, and
 * the eplb plan CLI (exit codes, no partial output). argv[1] = eplb binary. */
#include "eplb/plan.h"
#include "tests/planner/fixtures.h"
#include "tests/support.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *eplb_bin;

static eplb_plan_t *sample_plan(eplb_loads_t *loads, double *w, uint32_t L, uint32_t E,
                                eplb_plan_policy_t pol) {
  uint64_t seed = 11;
  double *r = fx_random_loads(&seed, L, E, 1);
  memcpy(w, r, (size_t)L * E * sizeof *w);
  free(r);
  *loads = (eplb_loads_t){L, E, w};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = 4;
  o.num_nodes = 2;
  o.num_replicas = 24;
  o.num_groups = 4;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(loads, &o, &p), EPLB_OK);
  return p;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(plan_file_round_trip) {
  double w[3 * 16];
  eplb_loads_t loads;
  eplb_plan_t *p = sample_plan(&loads, w, 3, 16, EPLB_POLICY_BALANCED), *q = NULL;
  const char *path = eplb_test_path(eplb_test_tmpdir(), "plan.json");
  ck_assert_int_eq(eplb_plan_write(p, path), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(path, &q), EPLB_OK);
  ck_assert_uint_eq(eplb_plan_num_layers(q), 3);
  ck_assert_uint_eq(eplb_plan_num_slots(q), 24);
  ck_assert_int_eq(eplb_plan_policy(q), EPLB_POLICY_BALANCED);
  ck_assert_int_eq(eplb_plan_evaluate(q, &loads), EPLB_OK);
  fx_check_plan(q, &loads, 1);
  for (uint32_t l = 0; l < 3; l++) {
    ck_assert_mem_eq(eplb_plan_phy2log(p, l), eplb_plan_phy2log(q, l), 24 * sizeof(int32_t));
    eplb_plan_layer_metrics_t a, b;
    eplb_plan_layer_metrics(p, l, &a);
    eplb_plan_layer_metrics(q, l, &b);
    ck_assert_double_eq_tol(a.max_load, b.max_load, 1e-9 * a.max_load);
    ck_assert_double_eq_tol(a.lower_bound, b.lower_bound, 1e-9 * a.lower_bound);
  }
  /* Evaluating on loads of another shape fails with both shapes named. */
  eplb_loads_t other = {2, 16, w};
  ck_assert_int_eq(eplb_plan_evaluate(q, &other), EPLB_ESHAPE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "3 layers"));
  eplb_plan_destroy(p);
  eplb_plan_destroy(q);
}
END_TEST

/* A minimal plan (its required keys only) with `extra` keys at the top. */
#define MIN_PLAN(extra)                                                                            \
  "{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"         \
  " \"layers\": [{\"phy2log\": [0, 1, 2, 0]}]" extra "}"

START_TEST(minimal_and_bad_plan_files) {
  const char *dir = eplb_test_tmpdir();
  const char *path = eplb_test_path(dir, "min.json");
  write_text(path, "{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2,"
                   " \"slots_per_gpu\": 2, \"layers\": [{\"phy2log\": [0, 1, 2, 0],"
                   " \"max_load\": 12345}]}");
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_read(path, &p), EPLB_OK);
  double w[3] = {10, 4, 6};
  eplb_loads_t loads = {1, 3, w};
  ck_assert_int_eq(eplb_plan_evaluate(p, &loads), EPLB_OK);
  const double *gl = eplb_plan_gpu_load(p, 0);
  ck_assert_double_eq_tol(gl[0], 5 + 4, 1e-12); /* uniform shares: expert 0 split in two */
  ck_assert_double_eq_tol(gl[1], 6 + 5, 1e-12);
  eplb_plan_destroy(p);
  struct {
    const char *text;
    eplb_status_t st;
    const char *needle;
  } bad[] = {
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 1, 0]}]}",
       EPLB_EFORMAT, "expert 2 has no replica"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 7, 0]}]}",
       EPLB_ERANGE, "phy2log[2]"},
      {"{\"num_layers\": 2, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0]}]}",
       EPLB_EFORMAT, "layers"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": [2],"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0]}]}",
       EPLB_EFORMAT, "slots_per_gpu"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0], \"share\": [0.5, 1, 1, 0.4]}]}",
       EPLB_EFORMAT, "shares of expert 0"},
      {"{\"num_layers\": 1,", EPLB_EFORMAT, "line"},
      {"{\"format\": \"other\"}", EPLB_EFORMAT, "format"},
      /* Strict (issue 33, N8): a wrong type, an unknown key or a missing
       * required key is refused naming it, never read as a default. */
      {MIN_PLAN(", \"policy\": 7"), EPLB_EFORMAT, "\"policy\": expected a string"},
      {MIN_PLAN(", \"policy\": \"balance\""), EPLB_EFORMAT, "\"balance\" is not a policy"},
      {MIN_PLAN(", \"keep_groups_on_nodes\": \"yes\""), EPLB_EFORMAT,
       "\"keep_groups_on_nodes\": expected a boolean"},
      {MIN_PLAN(", \"num_nodes\": 1.0"), EPLB_EFORMAT, "\"num_nodes\": expected an integer"},
      {MIN_PLAN(", \"max_load\": 12345"), EPLB_EFORMAT, "unknown key \"max_load\""},
      {MIN_PLAN(", \"summary\": {\"lower_bound_kind\": 1}"), EPLB_EFORMAT,
       "\"summary\": \"lower_bound_kind\": expected a string"},
      {MIN_PLAN(", \"summary\": {\"kind\": \"x\"}"), EPLB_EFORMAT,
       "\"summary\": unknown key \"kind\""},
      {MIN_PLAN(", \"summary\": {\"lower_bound_kind\": \"exact\"}"), EPLB_EFORMAT,
       "\"exact\" is not"},
      {MIN_PLAN(", \"summary\": []"), EPLB_EFORMAT, "\"summary\": expected an object"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0], \"shares\": [1, 1, 1, 1]}]}",
       EPLB_EFORMAT, "layer 0: unknown key \"shares\""},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0], \"gpu_load\": [1, \"x\"]}]}",
       EPLB_EFORMAT, "layer 0: gpu_load[1]"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"share\": [1, 1, 1, 1]}]}",
       EPLB_EFORMAT, "layer 0: \"phy2log\" missing"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"num_gpus\": 2, \"slots_per_gpu\": 2,"
       " \"layers\": [7]}",
       EPLB_EFORMAT, "layer 0: expected an object"},
      {"{\"num_layers\": 1, \"num_logical_experts\": 3, \"slots_per_gpu\": 2,"
       " \"layers\": [{\"phy2log\": [0, 1, 2, 0]}]}",
       EPLB_EFORMAT, "\"num_gpus\" missing"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_text(path, bad[i].text);
    p = (eplb_plan_t *)1;
    ck_assert_int_eq(eplb_plan_read(path, &p), bad[i].st);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(eplb_error_detail(), bad[i].needle), "%zu: %s", i, eplb_error_detail());
  }
  ck_assert_int_eq(eplb_plan_read(eplb_test_path(dir, "missing.json"), &p), EPLB_EIO);
}
END_TEST

START_TEST(exports_parse_back) {
  double w[2 * 16];
  eplb_loads_t loads;
  eplb_plan_t *p = sample_plan(&loads, w, 2, 16, EPLB_POLICY_DEEPSEEK);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", eplb_test_path(eplb_test_tmpdir(), "export"));
  mkdir(dir, 0777);
  ck_assert_int_eq(eplb_plan_export(p, EPLB_EXPORT_DEEPSEEK_CSV, dir), EPLB_OK);
  ck_assert_int_eq(eplb_plan_export(p, EPLB_EXPORT_SGLANG, dir), EPLB_OK);
  ck_assert_int_eq(eplb_plan_export(p, EPLB_EXPORT_TRTLLM, dir), EPLB_OK);
  /* eplb_plan_export_files names what each format wrote, and nothing else. */
  static const eplb_plan_export_format_t fmts[3] = {EPLB_EXPORT_DEEPSEEK_CSV, EPLB_EXPORT_SGLANG,
                                                    EPLB_EXPORT_TRTLLM};
  size_t listed = 0;
  for (int k = 0; k < 3; k++)
    for (const char *const *f = eplb_plan_export_files(fmts[k]); *f; f++, listed++)
      ck_assert_msg(access(eplb_test_path(dir, *f), F_OK) == 0, "%s", *f);
  ck_assert_uint_eq(listed, 5);
  ck_assert_str_eq(eplb_plan_export_files(EPLB_EXPORT_SGLANG)[0], "expert_location.json");
  ck_assert_ptr_null(eplb_plan_export_files((eplb_plan_export_format_t)7));
  DIR *d = opendir(dir);
  size_t found = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    found += e->d_name[0] != '.';
  closedir(d);
  ck_assert_uint_eq(found, listed);
  uint32_t r, c, cnt[16];
  double *p2l = fx_read_matrix(eplb_test_path(dir, "phy2log.csv"), &r, &c);
  ck_assert_uint_eq(r, 2);
  ck_assert_uint_eq(c, 24);
  double *lc = fx_read_matrix(eplb_test_path(dir, "logcnt.csv"), &r, &c);
  ck_assert_uint_eq(c, 16);
  double *l2p = fx_read_matrix(eplb_test_path(dir, "log2phy.csv"), &r, &c);
  ck_assert_uint_eq(c % 16, 0);
  uint32_t maxcnt = c / 16;
  json_error_t err;
  json_t *sg = json_load_file(eplb_test_path(dir, "expert_location.json"), 0, &err);
  ck_assert_ptr_nonnull(sg);
  json_t *map = json_object_get(sg, "physical_to_logical_map");
  ck_assert_uint_eq(json_array_size(map), 2);
  FILE *f = fopen(eplb_test_path(dir, "moe_load_balancer.yaml"), "r");
  ck_assert_ptr_nonnull(f);
  char line[4096];
  uint32_t layers = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned layer;
    int n;
    if (sscanf(line, "  %u: [%n", &layer, &n) != 1)
      continue;
    ck_assert_uint_eq(layer, layers);
    const int32_t *ref = eplb_plan_phy2log(p, layer);
    char *s = line + n;
    for (uint32_t k = 0; k < 24; k++) {
      ck_assert_int_eq((int)strtol(s, &s, 10), ref[k]);
      s += strspn(s, ", ");
    }
    layers++;
  }
  fclose(f);
  ck_assert_uint_eq(layers, 2);
  for (uint32_t l = 0; l < 2; l++) {
    const int32_t *ref = eplb_plan_phy2log(p, l);
    eplb_plan_logcnt(p, l, cnt);
    for (uint32_t k = 0; k < 24; k++) {
      ck_assert_int_eq((int)p2l[l * 24 + k], ref[k]);
      ck_assert_int_eq((int)json_integer_value(json_array_get(json_array_get(map, l), k)), ref[k]);
    }
    for (uint32_t e = 0; e < 16; e++) {
      ck_assert_uint_eq((uint32_t)lc[l * 16 + e], cnt[e]);
      for (uint32_t k = 0; k < maxcnt; k++) {
        double slot = l2p[(size_t)l * c + e * maxcnt + k];
        if (k < cnt[e])
          ck_assert_int_eq(ref[(int)slot], (int)e);
        else
          ck_assert_double_eq(slot, -1);
      }
    }
  }
  json_decref(sg);
  free(p2l);
  free(lc);
  free(l2p);
  eplb_plan_destroy(p);
}
END_TEST

/* Runs the eplb binary with args (NULL-terminated); stdout/stderr to files. */
static int run_eplb(const char *const *args) { return eplb_test_run_cli(eplb_bin, args); }

START_TEST(cli_plan_exit_codes) {
  if (!eplb_bin)
    return;
  const char *dir = eplb_test_tmpdir();
  char loads[1024], out[1024], plan[1024];
  snprintf(loads, sizeof loads, "%s/eplb-reference/v_small_loads.csv", eplb_test_samples());
  snprintf(out, sizeof out, "%s", eplb_test_path(dir, "cli-bad.json"));
  snprintf(plan, sizeof plan, "%s", eplb_test_path(dir, "cli-plan.json"));
  const char *ok[] = {"plan", "--loads",  loads, "--gpus", "4",  "--nodes", "2", "--replicas",
                      "24",   "--groups", "4",   "-o",     plan, "--json",  NULL};
  ck_assert_int_eq(run_eplb(ok), 0);
  json_error_t err;
  json_t *sum = json_load_file(eplb_test_cli_out(), 0, &err);
  ck_assert_ptr_nonnull(sum);
  ck_assert_str_eq(json_string_value(json_object_get(sum, "policy")), "balanced");
  ck_assert(json_real_value(json_object_get(sum, "mean_max_over_lower_bound")) >= 1);
  json_decref(sum);
  const char *eval[] = {"plan", "eval", "--plan", plan, "--loads", loads, "--json", NULL};
  ck_assert_int_eq(run_eplb(eval), 0);
  char neg[1024], ragged[1024], wide[1024];
  snprintf(neg, sizeof neg, "%s", eplb_test_path(dir, "neg.csv"));
  snprintf(ragged, sizeof ragged, "%s", eplb_test_path(dir, "ragged.csv"));
  snprintf(wide, sizeof wide, "%s", eplb_test_path(dir, "wide.csv"));
  write_text(neg, "1,2,-3,4\n");
  write_text(ragged, "1,2,3,4\n1,2\n");
  write_text(wide, "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18\n");
  struct {
    const char *args[20];
  } bad[] = {
      {{"plan", "--loads", loads, "--gpus", "4", "--replicas", "8", "-o", out, NULL}},
      {{"plan", "--loads", loads, "--gpus", "5", "--replicas", "24", "-o", out, NULL}},
      {{"plan", "--loads", loads, "--gpus", "4", "--nodes", "3", "--replicas", "24", "-o", out,
        NULL}},
      {{"plan", "--loads", loads, "--gpus", "4", "--replicas", "24", "--groups", "5",
        "--keep-groups-on-nodes", "-o", out, NULL}},
      {{"plan", "--loads", neg, "--gpus", "2", "--replicas", "4", "-o", out, NULL}},
      {{"plan", "--loads", ragged, "--gpus", "2", "--replicas", "4", "-o", out, NULL}},
      {{"plan", "--loads", loads, "--gpus", "4", "--replicas", "24", "--policy", "deepseek",
        "--slots-per-gpu", "5,6,6,7", "-o", out, NULL}},
      {{"plan", "--loads", loads, "--gpus", "4", "--replicas", "24", "--policy", "magic", "-o", out,
        NULL}},
      {{"plan", "--loads", loads, "--gpus", "x", "--replicas", "24", "-o", out, NULL}},
      {{"plan", "--gpus", "4", "--replicas", "24", "-o", out, NULL}},
      {{"plan", "eval", "--plan", plan, "--loads", wide, NULL}},
      {{"plan", "eval", "--plan", loads, "--loads", loads, NULL}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(run_eplb(bad[i].args) == 2, "case %zu", i);
    ck_assert_msg(!eplb_test_exists(out), "case %zu left %s", i, out);
    FILE *f = fopen(eplb_test_cli_err(), "r");
    char line[1024] = {0}, more[8];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_msg(!strncmp(line, "eplb: ", 6), "case %zu: %s", i, line);
    ck_assert_msg(!fgets(more, sizeof more, f), "case %zu: more than one line", i);
    fclose(f);
  }
  /* An all-zero layer gets a valid plan; uneven slots work for balanced. */
  char zero[1024];
  snprintf(zero, sizeof zero, "%s", eplb_test_path(dir, "zero.csv"));
  write_text(zero, "0,0,0,0\n5,1,0,2\n");
  const char *z[] = {
      "plan", "--loads", zero, "--gpus",   "2",      "--replicas", "5", "--slots-per-gpu",
      "2,3",  "-o",      out,  "--export", "sglang", dir,          NULL};
  ck_assert_int_eq(run_eplb(z), 0);
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_read(out, &p), EPLB_OK);
  eplb_plan_destroy(p);
  ck_assert(eplb_test_exists(eplb_test_path(dir, "expert_location.json")));
}
END_TEST

int main(int argc, char **argv) {
  eplb_bin = argc > 1 ? argv[1] : NULL;
  Suite *s = suite_create("planner-io");
  TCase *tc = tcase_create("planner-io");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, plan_file_round_trip);
  tcase_add_test(tc, minimal_and_bad_plan_files);
  tcase_add_test(tc, exports_parse_back);
  tcase_add_test(tc, cli_plan_exit_codes);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}

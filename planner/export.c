/* planner/export.c — plan exports for serving stacks (DeepSeek EPLB arrays,
 * SGLang --init-expert-location, TRT-LLM MoE load balancer). */
#include "planner/planner.h"

#include <string.h>

const char *eplb_plan_export_format_str(eplb_plan_export_format_t format) {
  switch (format) {
  case EPLB_EXPORT_DEEPSEEK_CSV: return "deepseek-csv";
  case EPLB_EXPORT_SGLANG: return "sglang";
  case EPLB_EXPORT_TRTLLM: return "trtllm";
  }
  return NULL;
}

eplb_status_t eplb_plan_export_format_parse(const char *name, eplb_plan_export_format_t *out) {
  for (int f = EPLB_EXPORT_DEEPSEEK_CSV; f <= EPLB_EXPORT_TRTLLM; f++)
    if (name && out && !strcmp(name, eplb_plan_export_format_str((eplb_plan_export_format_t)f))) {
      *out = (eplb_plan_export_format_t)f;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "planner",
                     "unknown export format '%s' (deepseek-csv, sglang, trtllm)", name ? name : "");
}

typedef enum { PHY2LOG, LOGCNT, LOG2PHY, SGLANG, TRTLLM } what_t;

/* Writes one file of the export; `what` selects the content. */
static eplb_status_t write_one(const eplb_plan_t *p, const char *dir, const char *name,
                               what_t what) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = eplb__malloc(n);
  uint32_t *cnt = eplb__calloc(p->num_experts, sizeof *cnt);
  eplb_status_t st = EPLB_OK;
  eplb__outfile_t of;
  if (!path || !cnt) {
    st = eplb__error(EPLB_ENOMEM, "planner", "export: out of memory");
    goto done;
  }
  snprintf(path, n, "%s/%s", dir, name);
  if ((st = eplb__outfile_open(path, &of)))
    goto done;
  FILE *f = of.f;
  uint32_t L = p->num_layers, E = p->num_experts, R = p->num_slots, maxcnt = 0;
  for (uint32_t l = 0; l < L; l++) {
    memset(cnt, 0, E * sizeof *cnt);
    for (uint32_t r = 0; r < R; r++)
      if (++cnt[p->phy2log[(size_t)l * R + r]] > maxcnt)
        maxcnt = cnt[p->phy2log[(size_t)l * R + r]];
  }
  bool ok = true;
  if (what == SGLANG)
    ok = fputs("{\"physical_to_logical_map\": [", f) >= 0;
  else if (what == TRTLLM)
    ok = fprintf(f,
                 "# eplb plan: TensorRT-LLM MoE load balancer (per-layer slot assignment)\n"
                 "num_slots: %u\ninitial_global_assignments:\n",
                 R) > 0;
  for (uint32_t l = 0; l < L && ok; l++) {
    const int32_t *p2l = p->phy2log + (size_t)l * R;
    if (what == SGLANG)
      ok = fputs(l ? ",\n[" : "\n[", f) >= 0;
    else if (what == TRTLLM)
      ok = fprintf(f, "  %u: [", l) > 0;
    if (what == PHY2LOG || what == SGLANG || what == TRTLLM) {
      for (uint32_t r = 0; r < R; r++)
        fprintf(f, r ? (what == PHY2LOG ? ",%d" : ", %d") : "%d", p2l[r]);
    } else {
      memset(cnt, 0, E * sizeof *cnt);
      for (uint32_t r = 0; r < R; r++)
        cnt[p2l[r]]++;
      if (what == LOGCNT) {
        for (uint32_t e = 0; e < E; e++)
          fprintf(f, e ? ",%u" : "%u", cnt[e]);
      } else {
        /* log2phy[e][k]: the k-th slot holding e, -1 padded to maxcnt. */
        for (uint32_t e = 0; e < E; e++) {
          uint32_t k = 0;
          for (uint32_t r = 0; r < R; r++)
            if ((uint32_t)p2l[r] == e)
              fprintf(f, e || k ? ",%u" : "%u", r), k++;
          for (; k < maxcnt; k++)
            fputs(e || k ? ",-1" : "-1", f);
        }
      }
    }
    if (what == SGLANG)
      ok = fputc(']', f) >= 0;
    else if (what == TRTLLM)
      ok = fputs("]\n", f) >= 0;
    else
      ok = fputc('\n', f) >= 0;
  }
  if (ok && what == SGLANG)
    ok = fputs("\n]}\n", f) >= 0;
  if (ok) {
    st = eplb__outfile_commit(&of);
  } else {
    eplb__outfile_abort(&of);
    st = eplb__error(EPLB_EIO, "planner", "%s: write failed", path);
  }
done:
  eplb__free(path);
  eplb__free(cnt);
  return st;
}

const char *const *eplb_plan_export_files(eplb_plan_export_format_t format) {
  static const char *const deepseek[] = {"phy2log.csv", "log2phy.csv", "logcnt.csv", NULL};
  static const char *const sglang[] = {"expert_location.json", NULL};
  static const char *const trtllm[] = {"moe_load_balancer.yaml", NULL};
  switch (format) {
  case EPLB_EXPORT_DEEPSEEK_CSV: return deepseek;
  case EPLB_EXPORT_SGLANG: return sglang;
  case EPLB_EXPORT_TRTLLM: return trtllm;
  }
  return NULL;
}

eplb_status_t eplb_plan_export(const eplb_plan_t *plan, eplb_plan_export_format_t format,
                               const char *dir) {
  if (!plan || !dir)
    return eplb__error(EPLB_EINVAL, "planner", "export: NULL argument");
  /* The names are eplb_plan_export_files', so the list cannot drift. */
  const char *const *f = eplb_plan_export_files(format);
  switch (format) {
  case EPLB_EXPORT_DEEPSEEK_CSV: {
    eplb_status_t st = write_one(plan, dir, f[0], PHY2LOG);
    if (!st)
      st = write_one(plan, dir, f[1], LOG2PHY);
    if (!st)
      st = write_one(plan, dir, f[2], LOGCNT);
    return st;
  }
  case EPLB_EXPORT_SGLANG: return write_one(plan, dir, f[0], SGLANG);
  case EPLB_EXPORT_TRTLLM: return write_one(plan, dir, f[0], TRTLLM);
  }
  return eplb__error(EPLB_EINVAL, "planner", "export: unknown format %d", (int)format);
}

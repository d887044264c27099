/* sim/csv.c — the file of `eplb sim --csv` (eplb_sim_csv_*): its header and
 * rows are the texts of eplb_sim_csv_header and eplb_sim_step_csv, written
 * here so that a caller streams a run's steps into a file without making
 * each text itself. */
#include "sim/sim.h"
#include "eplb/sim_tooling.h"

#include <stdio.h>
#include <string.h>

struct eplb_sim_csv {
  eplb__outfile_t of;
  int policy_column;
  eplb_status_t st; /* the first failure */
  char detail[512]; /* its detail, for eplb_sim_csv_finish */
  char *line;       /* the text of a header or row */
  size_t cap;
};

/* Keeps the first failure with its detail; returns st. */
static eplb_status_t fail(eplb_sim_csv_t *c, eplb_status_t st) {
  if (st != EPLB_OK && c->st == EPLB_OK) {
    c->st = st;
    snprintf(c->detail, sizeof c->detail, "%s", eplb_error_detail());
  }
  return st;
}

/* One line: the header (step NULL, for G GPUs) or a step's row, after
 * `policy` and a comma when the file has that column. */
static eplb_status_t put_line(eplb_sim_csv_t *c, const char *policy, const eplb_sim_step_t *step,
                              uint32_t G) {
  size_t n = 0;
  eplb_status_t st =
      step ? eplb_sim_step_csv(step, NULL, 0, &n) : eplb_sim_csv_header(G, NULL, 0, &n);
  if (st == EPLB_OK && n + 1 > c->cap) {
    char *p = eplb__realloc(c->line, n + 1);
    if (!p)
      return fail(c, eplb__error(EPLB_ENOMEM, "sim", "sim csv: out of memory"));
    c->line = p;
    c->cap = n + 1;
  }
  if (st == EPLB_OK)
    st = step ? eplb_sim_step_csv(step, c->line, c->cap, NULL)
              : eplb_sim_csv_header(G, c->line, c->cap, NULL);
  if (st != EPLB_OK)
    return fail(c, st);
  int column = c->policy_column;
  if (fprintf(c->of.f, "%s%s%s\n", column ? policy : "", column ? "," : "", c->line) < 0)
    return fail(c, eplb__error(EPLB_EIO, "sim", "%s: cannot write", c->of.path));
  return EPLB_OK;
}

eplb_status_t eplb_sim_csv_create(const char *path, uint32_t num_gpus, int policy_column,
                                  eplb_sim_csv_t **out) {
  if (out)
    *out = NULL;
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "sim", "sim csv: NULL argument");
  eplb_sim_csv_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "sim", "sim csv: out of memory");
  c->policy_column = policy_column;
  eplb_status_t st = eplb__outfile_open(path, &c->of);
  if (st == EPLB_OK)
    st = put_line(c, "policy", NULL, num_gpus);
  if (st != EPLB_OK) {
    eplb_sim_csv_destroy(c);
    return st;
  }
  *out = c;
  return EPLB_OK;
}

eplb_status_t eplb_sim_csv_append(eplb_sim_csv_t *csv, const char *policy,
                                  const eplb_sim_step_t *step) {
  if (!csv || !step || (csv->policy_column && !policy))
    return csv ? fail(csv, eplb__error(EPLB_EINVAL, "sim", "sim csv: NULL argument"))
               : eplb__error(EPLB_EINVAL, "sim", "sim csv: NULL argument");
  return put_line(csv, policy, step, 0);
}

eplb_status_t eplb_sim_csv_finish(eplb_sim_csv_t *csv) {
  if (!csv)
    return eplb__error(EPLB_EINVAL, "sim", "sim csv: NULL argument");
  eplb_status_t st = csv->st;
  if (st != EPLB_OK)
    eplb__error(st, "sim", "%s", csv->detail);
  else
    st = eplb__outfile_commit(&csv->of);
  eplb_sim_csv_destroy(csv);
  return st;
}

void eplb_sim_csv_destroy(eplb_sim_csv_t *csv) {
  if (!csv)
    return;
  eplb__outfile_abort(&csv->of);
  eplb__free(csv->line);
  eplb__free(csv);
}

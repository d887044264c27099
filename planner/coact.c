/* planner/coact.c — co-activation of a trace's top-k rows: pair counts and
 * per-(source node, expert) picks, the locality policy's input. */
#include "planner/planner.h"

#include <string.h>

/* E*E*L cells at most (dense pairs; DeepSeek-V3's 58 x 256^2 is 3.8M). */
#define MAX_PAIR_CELLS (1ull << 27)

void eplb_coact_destroy(eplb_coact_t *c) {
  if (!c)
    return;
  eplb__free(c->pairs);
  eplb__free(c->node_tokens);
  eplb__free(c);
}

uint32_t eplb_coact_num_layers(const eplb_coact_t *c) { return c ? c->num_layers : 0; }
uint32_t eplb_coact_num_experts(const eplb_coact_t *c) { return c ? c->num_experts : 0; }
uint32_t eplb_coact_num_nodes(const eplb_coact_t *c) { return c ? c->num_nodes : 0; }
uint64_t eplb_coact_num_rows(const eplb_coact_t *c) { return c ? c->num_rows : 0; }

const double *eplb_coact_pairs(const eplb_coact_t *c, uint32_t layer) {
  return c && layer < c->num_layers ? c->pairs + (size_t)layer * c->num_experts * c->num_experts
                                    : NULL;
}

const double *eplb_coact_node_tokens(const eplb_coact_t *c, uint32_t layer) {
  return c && layer < c->num_layers ? c->node_tokens + (size_t)layer * c->num_nodes * c->num_experts
                                    : NULL;
}

eplb_status_t eplb_coact_node_loads(const eplb_coact_t *c, const eplb_cluster_t *cl, uint32_t layer,
                                    const double *loads, double *out) {
  if (!c || !cl || !loads || !out || layer >= c->num_layers ||
      eplb_cluster_num_nodes(cl) != c->num_nodes)
    return eplb__error(EPLB_EINVAL, "planner",
                       "coact_node_loads: NULL argument, layer %u of %u or a cluster of %u nodes "
                       "for %u",
                       layer, c ? c->num_layers : 0, cl ? eplb_cluster_num_nodes(cl) : 0,
                       c ? c->num_nodes : 0);
  uint32_t E = c->num_experts, N = c->num_nodes, G = eplb_cluster_num_gpus(cl);
  const double *nt = c->node_tokens + (size_t)layer * N * E;
  uint32_t *count = eplb__calloc(N, sizeof *count);
  if (!count)
    return eplb__error(EPLB_ENOMEM, "planner", "coact_node_loads: out of memory");
  for (uint32_t g = 0; g < G; g++)
    count[eplb_cluster_node_of(cl, g)]++;
  for (uint32_t e = 0; e < E; e++) {
    double sum = 0, w = loads[e];
    for (uint32_t n = 0; n < N; n++)
      sum += nt[(size_t)n * E + e];
    for (uint32_t n = 0; n < N; n++)
      out[(size_t)n * E + e] = sum > 0 ? w * nt[(size_t)n * E + e] / sum : w * (double)count[n] / G;
  }
  eplb__free(count);
  return EPLB_OK;
}

static void count_row(eplb_coact_t *c, const uint16_t *ids, uint32_t k, uint32_t layer,
                      uint32_t node) {
  uint32_t E = c->num_experts;
  double *pairs = c->pairs + (size_t)layer * E * E;
  double *nt = c->node_tokens + ((size_t)layer * c->num_nodes + node) * E;
  for (uint32_t a = 0; a < k; a++) {
    if (ids[a] >= E)
      continue;
    nt[ids[a]] += 1;
    for (uint32_t b = a + 1; b < k; b++)
      if (ids[b] < E && ids[b] != ids[a]) {
        pairs[(size_t)ids[a] * E + ids[b]] += 1;
        pairs[(size_t)ids[b] * E + ids[a]] += 1;
      }
  }
}

eplb_status_t eplb_coact_from_trace(eplb_trace_t *trace, uint64_t begin, uint64_t end,
                                    const eplb_cluster_t *cluster, eplb_coact_t **out) {
  if (!trace || !cluster || !out)
    return eplb__error(EPLB_EINVAL, "planner", "coact: NULL argument");
  *out = NULL;
  const eplb_trace_meta_t *m = eplb_trace_meta(trace);
  uint64_t steps = eplb_trace_num_steps(trace);
  end = end < steps ? end : steps;
  uint32_t G = eplb_cluster_num_gpus(cluster), N = eplb_cluster_num_nodes(cluster);
  if (begin >= end)
    return eplb__error(EPLB_EINVAL, "planner", "coact: empty step range [%llu, %llu)",
                       (unsigned long long)begin, (unsigned long long)end);
  if (!G || !N)
    return eplb__error(EPLB_EINVAL, "planner", "coact: cluster has no GPUs");
  if (!m->topk)
    return eplb__error(EPLB_EINVAL, "planner",
                       "locality needs top-k rows (the trace does not record k)");
  uint64_t L = m->num_layers, E = m->num_experts;
  if (E * E * L > MAX_PAIR_CELLS)
    return eplb__error(EPLB_ERANGE, "planner", "coact: %llu layers x %llu^2 expert pairs: too many",
                       (unsigned long long)L, (unsigned long long)E);
  eplb_status_t st = EPLB_OK;
  uint32_t *gnode = eplb__malloc_array(G, sizeof *gnode);
  eplb_coact_t *c = eplb__calloc(1, sizeof *c);
  if (!gnode || !c) {
    st = eplb__error(EPLB_ENOMEM, "planner", "coact: out of memory");
    goto fail;
  }
  c->num_layers = (uint32_t)L;
  c->num_experts = (uint32_t)E;
  c->num_nodes = N;
  c->pairs = eplb__calloc((size_t)(L * E * E), sizeof *c->pairs);
  c->node_tokens = eplb__calloc((size_t)(L * N * E), sizeof *c->node_tokens);
  if (!c->pairs || !c->node_tokens) {
    st = eplb__error(EPLB_ENOMEM, "planner", "coact: out of memory");
    goto fail;
  }
  for (uint32_t g = 0; g < G; g++)
    gnode[g] = eplb_cluster_node_of(cluster, g);
  for (uint64_t t = begin; t < end; t++) {
    eplb_trace_step_t s;
    if ((st = eplb_trace_read_step(trace, t, &s)))
      goto fail;
    if (!s.topk)
      continue;
    for (uint32_t i = 0; i < s.num_rows; i++) {
      int32_t sr = s.source_rank ? s.source_rank[i] : -1;
      uint32_t src = sr >= 0 && (uint32_t)sr < G ? (uint32_t)sr : i % G;
      for (uint32_t l = 0; l < L; l++)
        count_row(c, s.topk + ((size_t)i * L + l) * m->topk, m->topk, l, gnode[src]);
    }
    c->num_rows += s.num_rows;
  }
  if (!c->num_rows) {
    st = eplb__error(EPLB_EINVAL, "planner",
                     "locality needs top-k rows (none in steps %llu..%llu of the trace)",
                     (unsigned long long)begin, (unsigned long long)end - 1);
    goto fail;
  }
  eplb__free(gnode);
  *out = c;
  return EPLB_OK;
fail:
  eplb__free(gnode);
  eplb_coact_destroy(c);
  return st;
}

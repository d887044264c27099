/* planner/partition.c — exact min-max partitioning of items into bins of
 * fixed cardinality (the mip policy's layers without spare slots). Bin
 * completion (Korf): a sequence of decision searches "every bin sum <= C",
 * each C just below the incumbent, until one fails (the incumbent is then
 * optimal) or time runs out. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint32_t n;        /* items */
  const double *w;   /* [n] weights sorted descending */
  uint8_t *used;     /* [n] */
  uint8_t *mark;     /* [n] scratch of the dominance test */
  uint32_t *avail;   /* [nb][n] per level: unused items but the largest */
  double *pre;       /* [nb][n+1] prefix sums of avail's weights */
  uint32_t *items;   /* [n] items of the bins filled so far, level after level */
  uint32_t *chosen;  /* [n] the same as positions in the level's avail */
  uint32_t *off;     /* [nb+1] level d's items are items[off[d] .. off[d+1]) */
  uint32_t *lvl_cls; /* [nb] class of the bin filled at level d */
  uint32_t nclass;   /* distinct non-zero cardinalities */
  uint32_t *ccard;   /* [nclass] ascending */
  uint32_t *ccnt;    /* [nclass] empty bins left of each */
  uint32_t left;     /* empty bins left */
  double rem;        /* total weight of the unused items */
  double cap;        /* C */
  double tol;        /* rounding slack of the lower limits (0 for integral loads) */
  uint64_t nodes;
  double deadline; /* eplb__now() limit, or 0 for none */
  bool timed_out;
} search_t;

static int fill(search_t *s, uint32_t d);

static bool out_of_time(search_t *s) {
  if (s->timed_out)
    return true;
  if (s->deadline > 0 && (++s->nodes & 4095) == 0 && eplb__now() > s->deadline)
    s->timed_out = true;
  return s->timed_out;
}

/* A completion is dominated when one of its items can be exchanged for a
 * heavier unused one without exceeding the capacity: a solution through it
 * becomes one through the heavier set by swapping the two items between
 * bins (the other bin gets lighter, every count stays). Following such
 * exchanges strictly raises the sum, so it ends on an undominated set that
 * the enumeration visits: only undominated completions are searched. */
static bool dominated(search_t *s, const uint32_t *av, const uint32_t *ch, uint32_t m, double sum,
                      double hi) {
  bool dom = false;
  for (uint32_t i = 0; i < m; i++)
    s->mark[ch[i]] = 1;
  for (uint32_t i = 0; i < m && !dom; i++) {
    double wp = s->w[av[ch[i]]];
    /* avail is sorted descending: the nearest unchosen heavier item is the
     * lightest one heavier than ch[i]. */
    for (uint32_t q = ch[i]; q-- > 0;) {
      double wq = s->w[av[q]];
      if (s->mark[q] || wq == wp)
        continue;
      dom = sum - wp + wq <= hi;
      break;
    }
  }
  for (uint32_t i = 0; i < m; i++)
    s->mark[ch[i]] = 0;
  return dom;
}

/* Chooses `need` more items of level d's avail from position p on, with
 * final sum in [lo, hi]; then fills the next bin. Returns 1 when a full
 * solution was found. */
static int complete(search_t *s, uint32_t d, uint32_t na, uint32_t p, uint32_t need, uint32_t k,
                    double sum, double lo, double hi) {
  if (out_of_time(s))
    return 0;
  const uint32_t *av = s->avail + (size_t)d * s->n;
  const double *pre = s->pre + (size_t)d * (s->n + 1);
  uint32_t *ch = s->chosen + s->off[d] + 1;
  if (need == 0) {
    uint32_t m = s->off[d + 1] - s->off[d] - 1, c = s->lvl_cls[d];
    if (sum < lo || sum > hi || dominated(s, av, ch, m, sum, hi))
      return 0;
    double bin = s->w[s->items[s->off[d]]] + sum;
    for (uint32_t i = 0; i < m; i++) {
      s->items[s->off[d] + 1 + i] = av[ch[i]];
      s->used[av[ch[i]]] = 1;
    }
    s->ccnt[c]--, s->left--, s->rem -= bin;
    int r = fill(s, d + 1);
    s->ccnt[c]++, s->left++, s->rem += bin;
    for (uint32_t i = 0; i < m; i++)
      s->used[av[ch[i]]] = 0;
    return r;
  }
  /* The lightest need - 1 items of the suffix are the last ones. */
  double light = pre[na] - pre[na - (need - 1)];
  for (uint32_t j = p; j + need <= na; j++) {
    double wj = s->w[av[j]];
    if (j > p && wj == s->w[av[j - 1]])
      continue; /* equal weights: the same completions as j - 1 */
    if (sum + wj + light > hi)
      continue; /* lighter items may still fit */
    if (sum + (pre[j + need] - pre[j]) < lo)
      break; /* the heaviest choice from j on falls short, later ones too */
    ch[k] = j;
    if (complete(s, d, na, j + 1, need - 1, k + 1, sum + wj, lo, hi))
      return 1;
    if (s->timed_out)
      return 0;
  }
  return 0;
}

/* Fills the bin of the largest unused item (level d), trying each class of
 * empty bins (empty bins of one cardinality are interchangeable). */
static int fill(search_t *s, uint32_t d) {
  if (s->left == 0)
    return 1;
  if (out_of_time(s))
    return 0;
  uint32_t n = s->n, i0 = 0;
  while (s->used[i0])
    i0++;
  double w0 = s->w[i0], cap = s->cap;
  /* The other empty bins take at most C each: this bin takes the rest
   * (less a rounding slack: the last bin must take exactly what is left). */
  double need_sum = s->rem - cap * (double)(s->left - 1) - s->tol;
  if (w0 > cap || need_sum > cap)
    return 0;
  uint32_t *av = s->avail + (size_t)d * n, na = 0;
  double *pre = s->pre + (size_t)d * (n + 1);
  for (uint32_t i = i0 + 1; i < n; i++)
    if (!s->used[i])
      av[na++] = i;
  pre[0] = 0;
  for (uint32_t i = 0; i < na; i++)
    pre[i + 1] = pre[i] + s->w[av[i]];
  s->used[i0] = 1;
  s->items[s->off[d]] = i0;
  int found = 0;
  for (uint32_t c = 0; c < s->nclass && !found && !s->timed_out; c++) {
    uint32_t m = s->ccard[c] - 1;
    if (!s->ccnt[c] || m > na)
      continue;
    /* Sharper with counts: another bin of k items takes at most the k
     * heaviest unused ones (what keeps unequal counts tractable). */
    double other = 0;
    for (uint32_t c2 = 0; c2 < s->nclass; c2++) {
      uint32_t k = s->ccard[c2] < na ? s->ccard[c2] : na;
      other += (double)(s->ccnt[c2] - (c2 == c)) * (pre[k] < cap ? pre[k] : cap);
    }
    double lo = s->rem - other - s->tol;
    lo = lo > need_sum ? lo : need_sum;
    if (lo > cap)
      continue;
    s->lvl_cls[d] = c;
    s->off[d + 1] = s->off[d] + m + 1;
    found = complete(s, d, na, 0, m, 0, 0, lo - w0, cap - w0);
  }
  s->used[i0] = 0;
  return found;
}

/* Max bin sum of an assignment (bins in order, card[g] items each). */
static double max_bin(const double *w, uint32_t G, const uint32_t *card, const int32_t *assign) {
  double mx = 0;
  for (uint32_t g = 0, r = 0; g < G; g++) {
    double sum = 0;
    for (uint32_t k = 0; k < card[g]; k++, r++)
      sum += w[assign[r]];
    mx = sum > mx ? sum : mx;
  }
  return mx;
}

/* Writes the search's solution as assign: the j-th bin filled of a class
 * goes to the j-th GPU (in index order) of that cardinality. */
static void write_solution(const search_t *s, const eplb__ranked_t *it, uint32_t G,
                           const uint32_t *card, const uint32_t *first, uint32_t *next,
                           int32_t *assign) {
  for (uint32_t c = 0; c < s->nclass; c++)
    next[c] = 0;
  uint32_t levels = 0;
  for (uint32_t g = 0; g < G; g++)
    levels += card[g] > 0;
  for (uint32_t d = 0; d < levels; d++) {
    uint32_t c = s->lvl_cls[d], g = 0;
    for (uint32_t seen = 0;; g++)
      if (card[g] == s->ccard[c] && seen++ == next[c])
        break;
    next[c]++;
    for (uint32_t k = s->off[d]; k < s->off[d + 1]; k++)
      assign[first[g] + (k - s->off[d])] = (int32_t)it[s->items[k]].i;
  }
}

/* Classes of non-zero cardinality, ascending (smaller bins first suit the
 * heaviest items); returns the bins with a non-zero cardinality. */
static uint32_t make_classes(search_t *s, const uint32_t *card, uint32_t G) {
  uint32_t bins = 0;
  for (uint32_t g = 0; g < G; g++) {
    if (!card[g])
      continue;
    bins++;
    uint32_t c = 0;
    while (c < s->nclass && s->ccard[c] < card[g])
      c++;
    if (c < s->nclass && s->ccard[c] == card[g]) {
      s->ccnt[c]++;
      continue;
    }
    memmove(s->ccard + c + 1, s->ccard + c, (s->nclass - c) * sizeof *s->ccard);
    memmove(s->ccnt + c + 1, s->ccnt + c, (s->nclass - c) * sizeof *s->ccnt);
    s->ccard[c] = card[g], s->ccnt[c] = 1, s->nclass++;
  }
  return bins;
}

/* Lower bound: the smallest C with sum_g min(C, top_g) >= total, top_g the
 * sum of the card[g] heaviest items (the mean when counts allow it), and
 * the bin of the heaviest item, which also holds at least its class's count
 * - 1 of the lightest others. Integral loads make every bin sum integral.
 * s->w: the loads in descending order. */
static double lower_bound(const search_t *s, uint32_t bins, double total, bool integral) {
  const double *ws = s->w;
  uint32_t E = s->n;
  double lb = 0, heavy = -1, below = 0, top = 0;
  for (uint32_t c = 0, k = 0, done_bins = 0; c < s->nclass; c++) {
    for (; k < s->ccard[c]; k++)
      top += ws[k];
    /* C in [top of the previous class, top of this one]. */
    double v = (total - below) / (double)(bins - done_bins);
    if (v <= top) {
      lb = v;
      break;
    }
    below += top * s->ccnt[c], done_bins += s->ccnt[c];
  }
  for (uint32_t c = 0; c < s->nclass; c++) {
    double v = ws[0];
    for (uint32_t k = 1; k < s->ccard[c]; k++)
      v += ws[E - k];
    heavy = heavy < 0 || v < heavy ? v : heavy;
  }
  lb = heavy > lb ? heavy : lb;
  if (integral)
    lb = ceil(lb * (1 - 1e-12)); /* the division may round up a hair */
  return lb;
}

eplb_status_t eplb__partition_exact(const double *w, uint32_t E, uint32_t G, const uint32_t *card,
                                    double time_limit_s, int32_t *assign, double *best_max,
                                    bool *proven) {
  *proven = false;
  double t0 = eplb__now();
  uint64_t sum_card = 0;
  for (uint32_t g = 0; g < G; g++)
    sum_card += card[g];
  if (sum_card != E || E == 0)
    return eplb__error(EPLB_EINVAL, "planner", "partition: %llu slots for %u experts",
                       (unsigned long long)sum_card, E);
  eplb_status_t st = EPLB_OK;
  search_t s = {.n = E};
  eplb__ranked_t *it = eplb__malloc_array(E, sizeof *it);
  double *ws = eplb__malloc_array(E, sizeof *ws);
  uint32_t *first = eplb__malloc_array((size_t)G + 1, sizeof *first);
  uint32_t *next = eplb__calloc(G, sizeof *next);
  int32_t *trial = eplb__malloc_array(E, sizeof *trial);
  s.used = eplb__calloc(E, 1);
  s.mark = eplb__calloc(E, 1);
  s.avail = eplb__malloc_array((size_t)G * E, sizeof *s.avail);
  s.pre = eplb__malloc_array((size_t)G * (E + 1), sizeof *s.pre);
  s.items = eplb__malloc_array(E, sizeof *s.items);
  s.chosen = eplb__malloc_array(E, sizeof *s.chosen);
  s.off = eplb__calloc((size_t)G + 1, sizeof *s.off);
  s.lvl_cls = eplb__calloc(G, sizeof *s.lvl_cls);
  s.ccard = eplb__malloc_array(G, sizeof *s.ccard);
  s.ccnt = eplb__malloc_array(G, sizeof *s.ccnt);
  if (!it || !ws || !first || !next || !trial || !s.used || !s.mark || !s.avail || !s.pre ||
      !s.items || !s.chosen || !s.off || !s.lvl_cls || !s.ccard || !s.ccnt) {
    st = eplb__error(EPLB_ENOMEM, "planner", "partition: out of memory");
    goto done;
  }
  /* The incumbent must place every item exactly once. */
  for (uint32_t r = 0; r < E; r++) {
    if (assign[r] < 0 || (uint32_t)assign[r] >= E || s.used[assign[r]]) {
      st = eplb__error(EPLB_EINVAL, "planner", "partition: slot %u: expert %d", r, assign[r]);
      goto done;
    }
    s.used[assign[r]] = 1;
  }
  memset(s.used, 0, E);
  first[0] = 0;
  for (uint32_t g = 0; g < G; g++)
    first[g + 1] = first[g] + card[g];
  bool integral = true;
  double total = 0;
  for (uint32_t e = 0; e < E; e++) {
    it[e] = (eplb__ranked_t){w[e], e};
    integral &= w[e] == floor(w[e]);
    total += w[e];
  }
  integral &= total < 0x1p40; /* sums stay exact: C = U - 1 is sound */
  qsort(it, E, sizeof *it, eplb__ranked_desc);
  for (uint32_t e = 0; e < E; e++)
    ws[e] = it[e].v;
  s.w = ws;
  uint32_t bins = make_classes(&s, card, G);
  double lb = lower_bound(&s, bins, total, integral);
  double best = max_bin(w, G, card, assign);
  s.deadline = time_limit_s > 0 ? t0 + time_limit_s : 0;
  for (;;) {
    if (best <= lb * (1 + 1e-12) || best <= 0) {
      *proven = true;
      break;
    }
    /* Just below the incumbent: the next integer, or a relative hair (a
     * better plan closer than that is not worth the search). */
    s.cap = integral ? best - 1 : best * (1 - 1e-9);
    s.tol = integral ? 0 : 1e-12 * total;
    s.rem = total;
    s.left = bins;
    s.off[0] = 0;
    s.nodes = 0;
    if (fill(&s, 0)) {
      write_solution(&s, it, G, card, first, next, trial);
      double mx = max_bin(w, G, card, trial);
      if (!(mx < best))
        break; /* rounding: no progress, nothing proven */
      memcpy(assign, trial, E * sizeof *assign);
      best = mx;
      continue;
    }
    *proven = !s.timed_out;
    break;
  }
  *best_max = best;
done:
  eplb__free(it);
  eplb__free(ws);
  eplb__free(first);
  eplb__free(next);
  eplb__free(trial);
  eplb__free(s.used);
  eplb__free(s.mark);
  eplb__free(s.avail);
  eplb__free(s.pre);
  eplb__free(s.items);
  eplb__free(s.chosen);
  eplb__free(s.off);
  eplb__free(s.lvl_cls);
  eplb__free(s.ccard);
  eplb__free(s.ccnt);
  return st;
}

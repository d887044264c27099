/* planner/model.c — model and GPU descriptions (presets, files) and the
 * modelled time of one expert replica (eplb/model.h; sources of the preset
 * numbers in docs/costmodel.md). */
#include "planner/planner.h"

#include "eplb/model.h"

#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Hugging Face config.json of each model (docs/costmodel.md). */
static const eplb_model_desc_t model_presets[] = {
    {"deepseek-v2-lite", 2048, 1408, 64, 6, 2, 2, 26},
    {"deepseek-v3", 7168, 2048, 256, 8, 1, 1, 58},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8, 0, 2, 94},
    {"kimi-k2", 7168, 2048, 384, 8, 1, 1, 60},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0, 2, 32},
};

/* Datasheet bandwidths and peaks; the efficiencies are fitted to DeepGEMM's
 * H800 tables, the usable NVLink and RDMA rates and the all-to-all latency to
 * DeepEP's H800 tables (docs/costmodel.md): no tables exist for the others, so
 * they share Hopper's fractions (NVLink: 132 of H800's 200 GB/s per direction,
 * so 297 of 450) and the same 400 Gb/s NIC. */
static const eplb_gpu_desc_t gpu_presets[] = {
    {"h100", 3350, 1979, 989, 297, 42.5, 2, 0.76, 0.59, 23},
    {"h200", 4800, 1979, 989, 297, 42.5, 2, 0.76, 0.59, 23},
    {"h800", 3350, 1979, 989, 132, 42.5, 2, 0.76, 0.59, 23},
    {"h20", 4000, 296, 148, 297, 42.5, 2, 0.76, 0.59, 23},
};

#define NMODELS (sizeof model_presets / sizeof model_presets[0])
#define NGPUS (sizeof gpu_presets / sizeof gpu_presets[0])

typedef struct field {
  const char *key;
  size_t off;
  int may_be_zero; /* shared_experts */
  int fraction;    /* efficiencies: (0, 1] */
} field_t;

static const field_t model_fields[] = {
    {"hidden_size", offsetof(eplb_model_desc_t, hidden_size), 0, 0},
    {"moe_intermediate_size", offsetof(eplb_model_desc_t, moe_intermediate_size), 0, 0},
    {"num_experts", offsetof(eplb_model_desc_t, num_experts), 0, 0},
    {"topk", offsetof(eplb_model_desc_t, topk), 0, 0},
    {"shared_experts", offsetof(eplb_model_desc_t, shared_experts), 1, 0},
    {"weight_bytes", offsetof(eplb_model_desc_t, weight_bytes), 0, 0},
    {"moe_layers", offsetof(eplb_model_desc_t, moe_layers), 0, 0},
};

static const field_t gpu_fields[] = {
    {"hbm_gbps", offsetof(eplb_gpu_desc_t, hbm_gbps), 0, 0},
    {"fp8_tflops", offsetof(eplb_gpu_desc_t, fp8_tflops), 0, 0},
    {"bf16_tflops", offsetof(eplb_gpu_desc_t, bf16_tflops), 0, 0},
    {"nvlink_gbps", offsetof(eplb_gpu_desc_t, nvlink_gbps), 0, 0},
    {"rdma_gbps", offsetof(eplb_gpu_desc_t, rdma_gbps), 0, 0},
    {"launch_us", offsetof(eplb_gpu_desc_t, launch_us), 0, 0},
    {"hbm_efficiency", offsetof(eplb_gpu_desc_t, hbm_efficiency), 0, 1},
    {"mma_efficiency", offsetof(eplb_gpu_desc_t, mma_efficiency), 0, 1},
    {"a2a_latency_us", offsetof(eplb_gpu_desc_t, a2a_latency_us), 0, 0},
};

#define NMF (sizeof model_fields / sizeof model_fields[0])
#define NGF (sizeof gpu_fields / sizeof gpu_fields[0])

static double *at(void *obj, const field_t *f) { return (double *)((char *)obj + f->off); }

static int field_ok(const field_t *f, double v) {
  if (!isfinite(v) || v < 0 || (v == 0 && !f->may_be_zero))
    return 0;
  return !f->fraction || v <= 1;
}

static const char *field_rule(const field_t *f) {
  return f->fraction ? "a number in (0, 1]" : f->may_be_zero ? "a number >= 0" : "a number > 0";
}

/* Lower-case copy of the part after the last '/', without a -chat,
 * -instruct, -base or -esft suffix: "deepseek-ai/DeepSeek-V2-Lite-Chat"
 * names the preset "deepseek-v2-lite", and so does "DeepSeek-V2-Lite-ESFT"
 * (expert-specialised fine-tuning keeps the architecture). */
static void normalise(const char *name, char *out, size_t n) {
  const char *s = strrchr(name, '/');
  s = s ? s + 1 : name;
  size_t i = 0;
  for (; s[i] && i + 1 < n; i++)
    out[i] = (char)tolower((unsigned char)s[i]);
  out[i] = 0;
  static const char *suffix[] = {"-chat", "-instruct", "-base", "-esft"};
  for (size_t k = 0; k < sizeof suffix / sizeof suffix[0]; k++) {
    size_t ls = strlen(suffix[k]);
    if (i > ls && !strcmp(out + i - ls, suffix[k]))
      out[i - ls] = 0;
  }
}

static void list_names(char *buf, size_t n, int gpus) {
  size_t count = gpus ? NGPUS : NMODELS, len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < count; i++) {
    const char *name = gpus ? gpu_presets[i].name : model_presets[i].name;
    size_t k = strlen(name);
    if (len + k + 3 >= n)
      break;
    if (i) {
      memcpy(buf + len, ", ", 2);
      len += 2;
    }
    memcpy(buf + len, name, k + 1);
    len += k;
  }
}

/* The index of the model (gpus 0) or GPU preset named `name` (case and
 * separators folded), or -1 with an error naming the presets. */
static long find_preset(const char *name, int gpus) {
  char key[64], known[256];
  normalise(name, key, sizeof key);
  size_t count = gpus ? NGPUS : NMODELS;
  for (size_t i = 0; i < count; i++)
    if (!strcmp(key, gpus ? gpu_presets[i].name : model_presets[i].name))
      return (long)i;
  list_names(known, sizeof known, gpus);
  eplb__error(EPLB_EINVAL, "planner", "no %s preset '%s' (presets: %s)", gpus ? "GPU" : "model",
              name, known);
  return -1;
}

eplb_status_t eplb_model_preset(const char *name, eplb_model_desc_t *out) {
  if (!name || !out)
    return eplb__error(EPLB_EINVAL, "planner", "model preset: NULL argument");
  long i = find_preset(name, 0);
  if (i < 0)
    return EPLB_EINVAL;
  *out = model_presets[i];
  return EPLB_OK;
}

eplb_status_t eplb_gpu_preset(const char *name, eplb_gpu_desc_t *out) {
  if (!name || !out)
    return eplb__error(EPLB_EINVAL, "planner", "GPU preset: NULL argument");
  long i = find_preset(name, 1);
  if (i < 0)
    return EPLB_EINVAL;
  *out = gpu_presets[i];
  return EPLB_OK;
}

const char *eplb_model_preset_name(uint32_t i) {
  return i < NMODELS ? model_presets[i].name : NULL;
}
const char *eplb_gpu_preset_name(uint32_t i) { return i < NGPUS ? gpu_presets[i].name : NULL; }

static eplb_status_t check_fields(const void *obj, const field_t *f, size_t n, const char *what) {
  if (!obj)
    return eplb__error(EPLB_EINVAL, "planner", "%s: NULL", what);
  for (size_t i = 0; i < n; i++) {
    double v = *at((void *)obj, &f[i]);
    if (!field_ok(&f[i], v))
      return eplb__error(EPLB_EINVAL, "planner", "%s: %s = %g: expected %s", what, f[i].key, v,
                         field_rule(&f[i]));
  }
  return EPLB_OK;
}

eplb_status_t eplb_model_check(const eplb_model_desc_t *m) {
  return check_fields(m, model_fields, NMF, "model");
}

eplb_status_t eplb_gpu_check(const eplb_gpu_desc_t *g) {
  return check_fields(g, gpu_fields, NGF, "GPU");
}

/* The file name's stem names a description that does not name itself. */
static void stem(const char *path, char *out, size_t n) {
  const char *s = strrchr(path, '/');
  s = s ? s + 1 : path;
  snprintf(out, n, "%s", s);
  char *dot = strrchr(out, '.');
  if (dot && dot != out)
    *dot = 0;
}

/* Reads a description file into obj (fields f[n], name[64] first). */
static eplb_status_t read_desc(const char *path, const char *format, const field_t *f, size_t n,
                               void *obj, char *name) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  eplb_status_t st = EPLB_OK;
  uint8_t seen[16] = {0};
  if (!root)
    return jerr.line < 0
               ? eplb__error(EPLB_EIO, "planner", "%s: cannot read: %s", path, jerr.text)
               : eplb__error(EPLB_EFORMAT, "planner", "%s:%d: %s", path, jerr.line, jerr.text);
  if (!json_is_object(root)) {
    st = eplb__error(EPLB_EFORMAT, "planner", "%s: expected a JSON object", path);
    goto done;
  }
  stem(path, name, 64);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "format")) {
      if (!json_is_string(v) || strcmp(json_string_value(v), format)) {
        st = eplb__error(EPLB_EFORMAT, "planner", "%s: format: expected \"%s\"", path, format);
        goto done;
      }
      continue;
    }
    if (!strcmp(key, "name")) {
      if (!json_is_string(v) || !json_string_value(v)[0] || strlen(json_string_value(v)) > 63) {
        st = eplb__error(EPLB_EFORMAT, "planner", "%s: name: expected 1..63 characters", path);
        goto done;
      }
      snprintf(name, 64, "%s", json_string_value(v));
      continue;
    }
    size_t i = 0;
    while (i < n && strcmp(key, f[i].key))
      i++;
    if (i == n) {
      st = eplb__error(EPLB_EFORMAT, "planner", "%s: unknown key '%s'", path, key);
      goto done;
    }
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!field_ok(&f[i], d)) {
      st =
          eplb__error(EPLB_EFORMAT, "planner", "%s: %s: expected %s", path, key, field_rule(&f[i]));
      goto done;
    }
    *at(obj, &f[i]) = d;
    seen[i] = 1;
  }
  for (size_t i = 0; i < n; i++)
    if (!seen[i]) {
      st = eplb__error(EPLB_EFORMAT, "planner", "%s: missing field %s", path, f[i].key);
      goto done;
    }
done:
  json_decref(root);
  return st;
}

eplb_status_t eplb_model_read(const char *path, eplb_model_desc_t *out) {
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "planner", "model file: NULL argument");
  eplb_model_desc_t m;
  memset(&m, 0, sizeof m);
  eplb_status_t st = read_desc(path, "eplb-model", model_fields, NMF, &m, m.name);
  if (st == EPLB_OK)
    *out = m;
  return st;
}

eplb_status_t eplb_gpu_read(const char *path, eplb_gpu_desc_t *out) {
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "planner", "GPU file: NULL argument");
  eplb_gpu_desc_t g;
  memset(&g, 0, sizeof g);
  eplb_status_t st = read_desc(path, "eplb-gpu", gpu_fields, NGF, &g, g.name);
  if (st == EPLB_OK)
    *out = g;
  return st;
}

/* A path, by its look: a '/' or a .json suffix; a name that is no preset
 * is a path too when such a file exists (model.h). */
static int looks_like_file(const char *s) {
  size_t n = strlen(s);
  return strchr(s, '/') || (n > 5 && !strcmp(s + n - 5, ".json"));
}

eplb_status_t eplb_model_load(const char *s, eplb_model_desc_t *out) {
  if (!s || !out)
    return eplb__error(EPLB_EINVAL, "planner", "model: NULL argument");
  if (looks_like_file(s))
    return eplb_model_read(s, out);
  eplb_status_t st = eplb_model_preset(s, out); /* its detail lists the presets */
  return st != EPLB_OK && access(s, R_OK) == 0 ? eplb_model_read(s, out) : st;
}

eplb_status_t eplb_gpu_load(const char *s, eplb_gpu_desc_t *out) {
  if (!s || !out)
    return eplb__error(EPLB_EINVAL, "planner", "GPU: NULL argument");
  if (looks_like_file(s))
    return eplb_gpu_read(s, out);
  eplb_status_t st = eplb_gpu_preset(s, out);
  return st != EPLB_OK && access(s, R_OK) == 0 ? eplb_gpu_read(s, out) : st;
}

double eplb_model_expert_bytes(const eplb_model_desc_t *m) {
  return m ? 3 * m->hidden_size * m->moe_intermediate_size * m->weight_bytes : 0;
}

/* FP8 with one float scale per 128 values (DeepEP's dispatch). */
double eplb_model_dispatch_bytes(const eplb_model_desc_t *m) {
  return m ? m->hidden_size + ceil(m->hidden_size / 128) * 4 : 0;
}

double eplb_model_combine_bytes(const eplb_model_desc_t *m) { return m ? m->hidden_size * 2 : 0; }

double eplb_model_memory_us(const eplb_model_desc_t *m, const eplb_gpu_desc_t *g) {
  if (!m || !g || !(g->hbm_gbps * g->hbm_efficiency > 0))
    return 0;
  return eplb_model_expert_bytes(m) / (g->hbm_gbps * g->hbm_efficiency * 1e3);
}

double eplb_model_us_per_token(const eplb_model_desc_t *m, const eplb_gpu_desc_t *g) {
  if (!m || !g)
    return 0;
  double peak = (m->weight_bytes <= 1 ? g->fp8_tflops : g->bf16_tflops) * g->mma_efficiency;
  return peak > 0 ? 6 * m->hidden_size * m->moe_intermediate_size / (peak * 1e6) : 0;
}

double eplb_model_expert_time(const eplb_model_desc_t *m, const eplb_gpu_desc_t *g, double x) {
  if (!(x > 0))
    return 0;
  double mem = eplb_model_memory_us(m, g), comp = eplb_model_us_per_token(m, g) * x;
  return sqrt(mem * mem + comp * comp);
}

double eplb_model_a2a_us_per_token(const eplb_model_desc_t *m, const eplb_gpu_desc_t *g, uint32_t G,
                                   uint32_t gpn) {
  if (!m || !g || G == 0 || gpn == 0 || gpn > G || !(g->nvlink_gbps > 0) || !(g->rdma_gbps > 0))
    return 0;
  double bytes = eplb_model_dispatch_bytes(m) + eplb_model_combine_bytes(m);
  double intra = (double)(gpn - 1) / G / (g->nvlink_gbps * 1e3);
  double inter = (double)(G - gpn) / G / (g->rdma_gbps * 1e3);
  return bytes * (intra > inter ? intra : inter); /* both links at once (model.h) */
}

double eplb_gpu_a2a_time_us(const eplb_gpu_desc_t *g, double nvl, double rdma) {
  if (!g || !(g->nvlink_gbps > 0) || !(g->rdma_gbps > 0))
    return 0;
  double a = nvl > 0 ? nvl / (g->nvlink_gbps * 1e3) : 0;
  double b = rdma > 0 ? rdma / (g->rdma_gbps * 1e3) : 0;
  double lat = g->a2a_latency_us > 0 ? g->a2a_latency_us : 0;
  return lat + (a > b ? a : b); /* the links run at once (model.h) */
}

/* A load's failure named by the caller's label, as a tool prints a status
 * with what it concerns: the detail alone when it already starts with
 * "<label>:". */
static eplb_status_t labelled(eplb_status_t st, const char *label) {
  char detail[8448];
  snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  size_t n = strlen(label);
  if (!detail[0])
    return eplb__error(st, "planner", "%s: %s", label, eplb_status_str(st));
  if (!strncmp(detail, label, n) && detail[n] == ':')
    return st;
  return eplb__error(st, "planner", "%s: %s", label, detail);
}

/* s with control characters written as \n, \r, \t or \xNN, as a tool prints
 * what it quotes from input: a trace's path or model name stays one line
 * and reads as it was (eplb__error would turn each into '?'). */
static const char *quoted(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (; *s && k + 5 < n; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '\n' || ch == '\r' || ch == '\t')
      k += (size_t)snprintf(out + k, n - k, "\\%c", ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't');
    else if (ch < 0x20 || ch == 0x7f)
      k += (size_t)snprintf(out + k, n - k, "\\x%02x", ch);
    else
      out[k++] = (char)ch;
  }
  out[k] = '\0';
  return out;
}

eplb_status_t eplb_deployment_resolve(const eplb_deployment_request_t *req,
                                      eplb_model_desc_t *model, eplb_gpu_desc_t *gpu, int *have) {
  if (have)
    *have = 0;
  if (!req || !req->source || !model || !gpu || !have)
    return eplb__error(EPLB_EINVAL, "planner", "deployment: NULL argument");
  const char *mlabel = req->model_label ? req->model_label : "model";
  const char *data = req->data_model && req->data_model[0] ? req->data_model : NULL;
  char src[4200], name[260]; /* quoted for details */
  eplb_status_t st;
  if (req->model) {
    if ((st = eplb_model_load(req->model, model)) != EPLB_OK)
      return labelled(st, mlabel);
  } else if (!data || eplb_model_preset(data, model) != EPLB_OK) {
    if (!req->required && !req->gpu)
      return EPLB_OK; /* nothing asked for: the caller's cost model stands */
    char known[256];
    list_names(known, sizeof known, 0);
    quoted(req->source, src, sizeof src);
    if (data)
      return eplb__error(EPLB_EINVAL, "planner",
                         "%s: model '%s' has no preset: give %s NAME|FILE (%s, or a model file)",
                         src, quoted(data, name, sizeof name), mlabel, known);
    return eplb__error(EPLB_EINVAL, "planner", "%s names no model: give %s NAME|FILE", src, mlabel);
  }
  if ((st = eplb_gpu_load(req->gpu ? req->gpu : "h800", gpu)) != EPLB_OK)
    return labelled(st, req->gpu_label ? req->gpu_label : "gpu");
  if (model->num_experts != req->num_experts)
    return eplb__error(EPLB_ESHAPE, "planner", "%s %s has %.0f experts per layer, %s has %" PRIu32,
                       mlabel, quoted(model->name, name, sizeof name), model->num_experts,
                       quoted(req->source, src, sizeof src), req->num_experts);
  *have = 1;
  return EPLB_OK;
}

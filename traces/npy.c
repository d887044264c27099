#include "traces/traces.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6u
/* numpy itself refuses headers over 10 kB by default; this leaves room. */
#define MAX_HEADER_LEN (1u << 20)

typedef struct parser {
  const char *p, *end;
  const char *path;
} parser_t;

static void skip_ws(parser_t *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static eplb_status_t bad(const parser_t *ps, const char *what) {
  return eplb__error(EPLB_EFORMAT, "traces", "%s: NPY header: %s", ps->path, what);
}

/* A Python string literal; the content is copied (at most cap-1 bytes). */
static eplb_status_t parse_string(parser_t *ps, char *buf, size_t cap) {
  if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
    return bad(ps, "expected a quoted string");
  char q = *ps->p++;
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != q) {
    if (*ps->p == '\\' || n + 1 >= cap)
      return bad(ps, "string too long or escaped");
    buf[n++] = *ps->p++;
  }
  if (ps->p >= ps->end)
    return bad(ps, "unterminated string");
  ps->p++;
  buf[n] = '\0';
  return EPLB_OK;
}

static eplb_status_t parse_shape(parser_t *ps, eplb__npy_t *npy) {
  if (ps->p >= ps->end || *ps->p != '(')
    return bad(ps, "'shape' must be a tuple");
  ps->p++;
  npy->ndim = 0;
  for (;;) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ')') {
      ps->p++;
      return EPLB_OK;
    }
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
      return bad(ps, "'shape' must hold non-negative integers");
    uint64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      unsigned d = (unsigned)(*ps->p++ - '0');
      if (v > (UINT64_MAX - d) / 10)
        return bad(ps, "shape dimension overflows");
      v = v * 10 + d;
    }
    if (ps->p < ps->end && *ps->p == 'L') /* Python 2 long */
      ps->p++;
    if (npy->ndim >= EPLB__NPY_MAX_DIMS)
      return bad(ps, "too many dimensions");
    npy->shape[npy->ndim++] = v;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',')
      ps->p++;
    else if (ps->p >= ps->end || *ps->p != ')')
      return bad(ps, "malformed 'shape' tuple");
  }
}

static eplb_status_t parse_descr(const parser_t *ps, const char *d, eplb__npy_t *npy) {
  size_t n = strlen(d);
  char order = d[0];
  if (n == 3 && (order == '<' || order == '>' || order == '|') && (d[1] == 'u' || d[1] == 'i') &&
      (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8')) {
    npy->itemsize = (unsigned)(d[2] - '0');
    if (order == '|' && npy->itemsize != 1)
      goto unsupported;
    npy->is_signed = d[1] == 'i';
    npy->big_endian = order == '>';
    memcpy(npy->descr, d, 4);
    return EPLB_OK;
  }
unsupported:
  return eplb__error(EPLB_EFORMAT, "traces",
                     "%s: NPY dtype '%s' is not supported (need an integer dtype: |u1 <u2 <u4 "
                     "<u8 |i1 <i2 <i4 <i8, either byte order)",
                     ps->path, d);
}

static eplb_status_t parse_header(parser_t *ps, eplb__npy_t *npy) {
  eplb_status_t st;
  int seen_descr = 0, seen_order = 0, seen_shape = 0;
  skip_ws(ps);
  if (ps->p >= ps->end || *ps->p != '{')
    return bad(ps, "expected a dict");
  ps->p++;
  for (;;) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
      ps->p++;
      break;
    }
    char key[32];
    if ((st = parse_string(ps, key, sizeof key)) != EPLB_OK)
      return st;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':')
      return bad(ps, "expected ':'");
    ps->p++;
    skip_ws(ps);
    if (strcmp(key, "descr") == 0 && !seen_descr) {
      char d[64];
      if (ps->p < ps->end && *ps->p == '[')
        return bad(ps, "structured dtypes are not supported");
      if ((st = parse_string(ps, d, sizeof d)) != EPLB_OK)
        return st;
      if ((st = parse_descr(ps, d, npy)) != EPLB_OK)
        return st;
      seen_descr = 1;
    } else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
      if ((size_t)(ps->end - ps->p) >= 5 && memcmp(ps->p, "False", 5) == 0) {
        ps->p += 5;
      } else if ((size_t)(ps->end - ps->p) >= 4 && memcmp(ps->p, "True", 4) == 0) {
        return eplb__error(EPLB_EFORMAT, "traces",
                           "%s: NPY array is in Fortran order (save it C-contiguous)", ps->path);
      } else {
        return bad(ps, "'fortran_order' must be True or False");
      }
      seen_order = 1;
    } else if (strcmp(key, "shape") == 0 && !seen_shape) {
      if ((st = parse_shape(ps, npy)) != EPLB_OK)
        return st;
      seen_shape = 1;
    } else {
      return eplb__error(EPLB_EFORMAT, "traces", "%s: NPY header: unexpected key '%s'", ps->path,
                         key);
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',')
      ps->p++;
    else if (ps->p >= ps->end || *ps->p != '}')
      return bad(ps, "expected ',' or '}'");
  }
  skip_ws(ps);
  if (ps->p != ps->end)
    return bad(ps, "trailing characters after the dict");
  if (!seen_descr || !seen_order || !seen_shape)
    return bad(ps, "needs the keys 'descr', 'fortran_order' and 'shape'");
  return EPLB_OK;
}

eplb_status_t eplb__npy_open(const char *path, eplb__npy_t *npy) {
  eplb_status_t st = EPLB_OK;
  char *header = NULL;
  memset(npy, 0, sizeof *npy);
  npy->path = path;
  if ((st = eplb__check_input(path, "traces")))
    return st;
  npy->f = fopen(path, "rb");
  if (!npy->f)
    return eplb__error(EPLB_EIO, "traces", "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(npy->f), &sb) != 0) {
    st = eplb__error(EPLB_EIO, "traces", "%s: cannot stat: %s", path, strerror(errno));
    goto fail;
  }
  uint64_t size = (uint64_t)sb.st_size;
  unsigned char pre[12];
  size_t got = fread(pre, 1, sizeof pre, npy->f);
  if (got == 0) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: empty file", path);
    goto fail;
  }
  if (memcmp(pre, MAGIC, got < MAGIC_LEN ? got : MAGIC_LEN) != 0) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: not an NPY file (bad magic)", path);
    goto fail;
  }
  if (got < 10) {
    st = eplb__error(EPLB_ETRUNCATED, "traces", "%s: NPY file cut short in its preamble", path);
    goto fail;
  }
  unsigned major = pre[6];
  uint64_t hlen, hstart;
  if (major == 1) {
    hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12) {
      st = eplb__error(EPLB_ETRUNCATED, "traces", "%s: NPY file cut short in its preamble", path);
      goto fail;
    }
    hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
           (uint64_t)pre[11] << 24;
    hstart = 12;
  } else {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: NPY version %u.%u is not supported", path, major,
                     pre[7]);
    goto fail;
  }
  if (hlen > MAX_HEADER_LEN) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: NPY header length %" PRIu64 " is too large", path,
                     hlen);
    goto fail;
  }
  if (size < hstart + hlen) {
    st = eplb__error(EPLB_ETRUNCATED, "traces", "%s: NPY file cut short in its header", path);
    goto fail;
  }
  header = eplb__malloc((size_t)hlen);
  if (!header) {
    st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
    goto fail;
  }
  if (fseek(npy->f, (long)hstart, SEEK_SET) != 0 ||
      fread(header, 1, (size_t)hlen, npy->f) != (size_t)hlen) {
    st = eplb__error(EPLB_EIO, "traces", "%s: read failed", path);
    goto fail;
  }
  parser_t ps = {header, header + hlen, path};
  if ((st = parse_header(&ps, npy)) != EPLB_OK)
    goto fail;
  uint64_t count = 1;
  for (uint32_t i = 0; i < npy->ndim; i++) {
    if (npy->shape[i] && count > UINT64_MAX / npy->shape[i]) {
      st = eplb__error(EPLB_EFORMAT, "traces", "%s: NPY shape is too large", path);
      goto fail;
    }
    count *= npy->shape[i];
  }
  npy->count = count;
  npy->data_offset = hstart + hlen;
  if (count > (UINT64_MAX - npy->data_offset) / npy->itemsize) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: NPY shape is too large", path);
    goto fail;
  }
  uint64_t want = npy->data_offset + count * npy->itemsize;
  if (size < want) {
    st = eplb__error(EPLB_ETRUNCATED, "traces",
                     "%s: NPY data cut short: file has %" PRIu64 " bytes, shape needs %" PRIu64,
                     path, size, want);
    goto fail;
  }
  if (size > want) {
    st = eplb__error(EPLB_EFORMAT, "traces",
                     "%s: NPY file has %" PRIu64 " bytes after its data (shape mismatch)", path,
                     size - want);
    goto fail;
  }
  eplb__free(header);
  return EPLB_OK;
fail:
  eplb__free(header);
  fclose(npy->f);
  npy->f = NULL;
  return st;
}

eplb_status_t eplb__npy_seek(eplb__npy_t *npy, uint64_t index) {
  if (index > npy->count)
    return eplb__error(EPLB_EINVAL, "traces", "%s: seek past the end", npy->path);
  uint64_t off = npy->data_offset + index * npy->itemsize;
  if (off > (uint64_t)INT64_MAX || fseeko(npy->f, (off_t)off, SEEK_SET) != 0)
    return eplb__error(EPLB_EIO, "traces", "%s: seek failed: %s", npy->path, strerror(errno));
  npy->next = index;
  return EPLB_OK;
}

eplb_status_t eplb__npy_read(eplb__npy_t *npy, size_t n, int64_t *out) {
  unsigned char buf[8192];
  size_t per = sizeof buf / npy->itemsize;
  if (n > npy->count - npy->next)
    return eplb__error(EPLB_EINVAL, "traces", "%s: read past the end", npy->path);
  while (n) {
    size_t m = n < per ? n : per;
    if (fread(buf, npy->itemsize, m, npy->f) != m)
      return eplb__error(EPLB_EIO, "traces", "%s: read failed", npy->path);
    for (size_t i = 0; i < m; i++) {
      const unsigned char *b = buf + i * npy->itemsize;
      uint64_t v = 0;
      for (unsigned j = 0; j < npy->itemsize; j++) {
        unsigned sh = npy->big_endian ? 8 * (npy->itemsize - 1 - j) : 8 * j;
        v |= (uint64_t)b[j] << sh;
      }
      if (npy->is_signed) {
        unsigned bits = 8 * npy->itemsize;
        if (bits < 64 && (v >> (bits - 1)) & 1)
          v |= ~(uint64_t)0 << bits;
        memcpy(&out[i], &v, sizeof v); /* two's complement reinterpretation */
      } else {
        if (v > (uint64_t)INT64_MAX)
          return eplb__error(EPLB_ERANGE, "traces", "%s: element %" PRIu64 " is too large",
                             npy->path, npy->next + i);
        out[i] = (int64_t)v;
      }
    }
    out += m;
    n -= m;
    npy->next += m;
  }
  return EPLB_OK;
}

void eplb__npy_close(eplb__npy_t *npy) {
  if (npy->f)
    fclose(npy->f);
  npy->f = NULL;
}

eplb_status_t eplb__npy_write_header(FILE *f, const char *path, const char *descr, uint32_t ndim,
                                     const uint64_t *shape) {
  /* Dimensions are at most 20 digits; 32 of them fit with room to spare. */
  char dict[1024];
  int len =
      snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (uint32_t i = 0; i < ndim && len > 0 && (size_t)len < sizeof dict; i++)
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%" PRIu64 "%s", shape[i],
                    ndim == 1      ? ","
                    : i + 1 < ndim ? ", "
                                   : "");
  if (len > 0 && (size_t)len < sizeof dict)
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  if (len <= 0 || (size_t)len + 64 >= sizeof dict)
    return eplb__error(EPLB_EINVAL, "traces", "%s: NPY shape too long", path);
  /* Preamble + dict + padding + '\n' is a multiple of 64 bytes. */
  size_t total = 10 + (size_t)len + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)len + pad + 1;
  unsigned char pre[10] = {0x93,
                           'N',
                           'U',
                           'M',
                           'P',
                           'Y',
                           1,
                           0,
                           (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  memset(dict + len, ' ', pad);
  dict[(size_t)len + pad] = '\n';
  if (fwrite(pre, 1, sizeof pre, f) != sizeof pre || fwrite(dict, 1, hlen, f) != hlen)
    return eplb__error(EPLB_EIO, "traces", "%s: write failed: %s", path, strerror(errno));
  return EPLB_OK;
}

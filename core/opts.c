/* core/opts.c — the size rule of the public option structs (eplb/common.h,
 * "Struct sizes"), written once: every sized init and every function that
 * takes or fills such a struct goes through these, so that a caller built
 * against an older or newer header than this library never has bytes read
 * or written past its struct. */
#include "core/core.h"

#include <string.h>

/* The member every sized struct starts with. */
static uint32_t size_of(const void *s) {
  uint32_t size;
  memcpy(&size, s, sizeof size);
  return size;
}

static eplb_status_t check_size(size_t size, const char *name, const char *module) {
  if (size < EPLB_STRUCT_SIZE_MIN)
    return eplb__error(EPLB_EINVAL, module,
                       "%s: struct_size %zu is too small (at least %u): initialise the struct "
                       "with its _default()",
                       name, size, EPLB_STRUCT_SIZE_MIN);
  /* A garbage size must not make the library scan megabytes past the struct. */
  if (size > EPLB_STRUCT_SIZE_MAX)
    return eplb__error(EPLB_EINVAL, module,
                       "%s: struct_size %zu is too large (at most %u): initialise the struct "
                       "with its _default()",
                       name, size, EPLB_STRUCT_SIZE_MAX);
  return EPLB_OK;
}

eplb_status_t eplb__opts_init(void *o, size_t size, const void *defaults, size_t lib_size,
                              const char *name) {
  if (!o)
    return eplb__error(EPLB_EINVAL, "core", "%s: NULL struct", name);
  eplb_status_t st = check_size(size, name, "core");
  if (st != EPLB_OK)
    return st;
  size_t n = size < lib_size ? size : lib_size;
  memcpy(o, defaults, n);
  /* Fields of a newer header than this library's start at zero: "not used". */
  if (size > n)
    memset((char *)o + n, 0, size - n);
  uint32_t s32 = (uint32_t)size;
  memcpy(o, &s32, sizeof s32);
  return EPLB_OK;
}

eplb_status_t eplb__opts_take(void *dst, const void *src, size_t lib_size, const char *name,
                              const char *module) {
  if (!src)
    return EPLB_OK;
  size_t size = size_of(src);
  eplb_status_t st = check_size(size, name, module);
  if (st != EPLB_OK)
    return st;
  /* openat2's rule: a newer caller is served only when it leaves every field
   * this library does not know at zero, its "not used" value. */
  for (size_t i = lib_size; i < size; i++)
    if (((const unsigned char *)src)[i])
      return eplb__error(EPLB_EUNSUPPORTED, module,
                         "%s: the caller's struct (%zu bytes) sets a field this library "
                         "(eplb %s, %zu bytes) does not know: byte %zu is not zero",
                         name, size, eplb_version(), lib_size, i);
  memcpy(dst, src, size < lib_size ? size : lib_size);
  uint32_t s32 = (uint32_t)lib_size;
  memcpy(dst, &s32, sizeof s32);
  return EPLB_OK;
}

eplb_status_t eplb__opts_give(void *dst, const void *src, size_t lib_size, const char *name,
                              const char *module) {
  if (!dst)
    return eplb__error(EPLB_EINVAL, module, "%s: NULL struct", name);
  size_t size = size_of(dst);
  eplb_status_t st = check_size(size, name, module);
  if (st != EPLB_OK)
    return st;
  /* Past the library's fields the caller's bytes (its defaults) stay. */
  size_t n = size < lib_size ? size : lib_size;
  memcpy((char *)dst + sizeof(uint32_t), (const char *)src + sizeof(uint32_t),
         n - sizeof(uint32_t));
  return EPLB_OK;
}

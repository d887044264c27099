/* eplb/abi.h — for bindings that mirror the public structs (ctypes):
 * their sizes as this library was built, to compare layouts at load time. */
#ifndef EPLB_ABI_H
#define EPLB_ABI_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size in bytes of the public struct `name` ("eplb_plan_options" for
 * struct eplb_plan_options), or 0 for an unknown name. For bindings that
 * mirror the structs (ctypes): compare layouts at load time. Here because
 * runtime/ implements it: the table needs every public struct. */
EPLB_API size_t eplb_abi_struct_size(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_ABI_H */

#include "core/core.h"

const char *eplb_status_str(eplb_status_t status) {
  switch (status) {
  case EPLB_OK: return "success";
  case EPLB_EINVAL: return "invalid argument";
  case EPLB_ENOMEM: return "out of memory";
  case EPLB_EIO: return "input/output error";
  case EPLB_EFORMAT: return "malformed input";
  case EPLB_ECORRUPT: return "checksum mismatch (corrupt data)";
  case EPLB_ETRUNCATED: return "input truncated";
  case EPLB_ERANGE: return "value out of range";
  case EPLB_ESHAPE: return "shape mismatch";
  case EPLB_EUNSUPPORTED: return "not supported in this build";
  case EPLB_ENODEVICE: return "no GPU device";
  case EPLB_ESOLVER: return "solver failure";
  case EPLB_ETIMEOUT: return "time limit reached";
  case EPLB_EINFEASIBLE: return "problem is infeasible";
  case EPLB_ECOMM: return "communication failure";
  case EPLB_ESTATE: return "invalid state for this call";
  case EPLB_EBUSY: return "resource busy";
  case EPLB_EOF: return "end of stream";
  case EPLB_EDEVICE: return "GPU runtime error";
  }
  return "unknown status";
}

const char *eplb_status_name(eplb_status_t status) {
  switch (status) {
#define N(x)                                                                                       \
  case x: return #x
    N(EPLB_OK);
    N(EPLB_EINVAL);
    N(EPLB_ENOMEM);
    N(EPLB_EIO);
    N(EPLB_EFORMAT);
    N(EPLB_ECORRUPT);
    N(EPLB_ETRUNCATED);
    N(EPLB_ERANGE);
    N(EPLB_ESHAPE);
    N(EPLB_EUNSUPPORTED);
    N(EPLB_ENODEVICE);
    N(EPLB_ESOLVER);
    N(EPLB_ETIMEOUT);
    N(EPLB_EINFEASIBLE);
    N(EPLB_ECOMM);
    N(EPLB_ESTATE);
    N(EPLB_EBUSY);
    N(EPLB_EOF);
    N(EPLB_EDEVICE);
#undef N
  }
  return "EPLB_UNKNOWN";
}

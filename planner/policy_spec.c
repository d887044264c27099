/* planner/policy_spec.c — "policy[:shares]" specifications, as `eplb sim
 * --policy/--compare` and a library user name a planned run. */
#include "planner/planner.h"

#include <string.h>

eplb_status_t eplb_plan_policy_spec_parse(const char *spec, eplb_plan_policy_t *policy,
                                          eplb_plan_shares_t *shares) {
  if (!spec || !policy || !shares)
    return eplb__error(EPLB_EINVAL, "planner", "policy spec: NULL argument");
  /* The policy part as a string of its own; names are short, a longer one
   * is cut and then unknown. */
  char name[64];
  const char *colon = strchr(spec, ':');
  size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
  if (n >= sizeof name)
    n = sizeof name - 1;
  memcpy(name, spec, n);
  name[n] = 0;
  eplb_status_t st = eplb_plan_policy_parse(name, policy);
  if (!st && colon)
    st = eplb_plan_shares_parse(colon + 1, shares);
  return st;
}

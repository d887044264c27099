/* eplb/runtime_testing.h — test hooks of the runtime: injected transfer
 * failures, damaged copies, stalls and device faults, with which the tests
 * and `eplb replay --inject-stall` show that serving goes on. Not
 * installed: a serving stack has no use for them. */
#ifndef EPLB_RUNTIME_TESTING_H
#define EPLB_RUNTIME_TESTING_H

#include "eplb/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Testing: the next migration of `layer` fails on this rank as if a receive
 * had failed (the layer keeps its plan on every rank, step_end reports
 * EPLB_ECOMM). EPLB_ERANGE for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_inject_transfer_failure(eplb_runtime_t *rt, uint32_t layer);

/* Testing: the next copy of `layer` that continuous re-placement brings to
 * this rank from another rank arrives with one byte changed, as a damaged
 * transfer would. Every copy between ranks is checked against a CRC-32 of
 * its source taken when the move starts; this one fails the check, so its
 * move is dropped (staged: the layer keeps its old experts; in place: the
 * slot stays out of service, is copied again once, then abandoned) and
 * step_end reports EPLB_ECOMM. EPLB_ERANGE for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_inject_transfer_corruption(eplb_runtime_t *rt, uint32_t layer);

/* Testing: the next migration round in which this rank sends to another rank
 * posts its sends ms milliseconds late (its receives on time), as a stalled
 * peer would. With ms above cfg.transfer_timeout_ms the peers' receives time
 * out: the round's layers keep their plan everywhere and step_end returns
 * EPLB_ETIMEOUT. 0 disarms. EPLB_EINVAL for a NULL runtime. */
EPLB_API eplb_status_t eplb_runtime_inject_transfer_stall(eplb_runtime_t *rt, uint32_t ms);

/* Testing, emulated device only (EPLB_ESTATE otherwise): every event
 * recorded from now on completes once the device has answered
 * `event_delay` queries "still running" after its record, whichever event
 * they asked about (time passes with queries; a wait completes it at
 * once); the next `upload_failures` table uploads and the next
 * `launch_failures` kernel launches (count, map, ring step, flip) fail
 * with EPLB_EDEVICE. */
EPLB_API eplb_status_t eplb_runtime_device_inject(eplb_runtime_t *rt, uint32_t event_delay,
                                                  uint32_t upload_failures,
                                                  uint32_t launch_failures);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_RUNTIME_TESTING_H */

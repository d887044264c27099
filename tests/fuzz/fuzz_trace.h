/* tests/fuzz/fuzz_trace.h — the trace fuzz target, shared by libFuzzer and
 * the replay driver. */
#ifndef EPLB_FUZZ_TRACE_H
#define EPLB_FUZZ_TRACE_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Removes the target's temporary files. */
void fuzz_trace_cleanup(void);

#endif

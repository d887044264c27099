/* tests/fuzz/fuzz_target.h — what every parser fuzz target (fuzz_<parser>.c)
 * provides to libFuzzer and to the corpus replay driver, and the temporary
 * file helpers they share (fuzz_util.c). */
#ifndef EPLB_FUZZ_TARGET_H
#define EPLB_FUZZ_TARGET_H

#include "eplb/common.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Removes the target's temporary files (and directory). */
void fuzz_target_cleanup(void);

/* Path of `name` inside this process's private temporary directory, made on
 * first use (under /dev/shm when writable: parsers stat and reopen the file
 * on every input, and a tmpfs keeps that cheap). The string lives until
 * fuzz_util_cleanup. */
const char *fuzz_util_path(const char *name);

/* Replaces the file at path with exactly these bytes. */
void fuzz_util_put(const char *path, const uint8_t *data, size_t size);

/* Removes every file made through fuzz_util_path, then the directory. */
void fuzz_util_cleanup(void);

/* Aborts (a finding) when `ok` is false: invariants of a target. */
void fuzz_util_check(int ok, const char *what);

/* Clears the error detail, so that fuzz_util_status sees this call's. */
void fuzz_util_begin(void);

/* The library's contract on every path: a known status, and an error always
 * comes with a one-line detail. Aborts otherwise. Returns st. */
eplb_status_t fuzz_util_status(eplb_status_t st, const char *call);

/* With FUZZ_STATS set in the environment, prints how often each call
 * succeeded and failed (fuzz_util_cleanup does it too). */
void fuzz_util_print_stats(void);

#endif

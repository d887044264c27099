/* tests/support.h — helpers shared by the check suites. */
#ifndef EPLB_TEST_SUPPORT_H
#define EPLB_TEST_SUPPORT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

/* Runs the suite with TAP output on stdout (meson's 'tap' protocol) and
 * returns the process exit status. Nothing else may print to stdout. */
int eplb_test_run(Suite *suite);

/* Directory of the bundled sample data (traces/samples), from the
 * EPLB_SAMPLES environment variable that meson sets. */
const char *eplb_test_samples(void);

/* A fresh private temporary directory for this test process (removed by
 * nobody: it lives under the build directory's tmp/ or /tmp). */
const char *eplb_test_tmpdir(void);

/* Joins dir and name into a static buffer (one of 8 rotating buffers). */
const char *eplb_test_path(const char *dir, const char *name);
/* eplb_test_path(eplb_test_tmpdir(), name): copy it if it must outlive the
 * next 7 calls. */
const char *eplb_test_tmp(const char *name);

/* xorshift64 step of *state (nonzero): the random instances of the solver
 * tests, a fixed sequence per seed. */
uint64_t eplb_test_xorshift(uint64_t *state);

/* The whole file (malloc'd with one NUL byte past its end: free() it), its
 * size in *len. Fails the test when the file cannot be read. */
void *eplb_test_read_file(const char *path, size_t *len);
/* The bundled ESFT routing (traces/samples/esft-dsv2lite/topk_ids.npy:
 * uint8 expert ids [tokens][26 layers][top 6]): malloc'd (free() it), the
 * token count in *tokens. Fails the test when it cannot be read. */
unsigned char *eplb_test_load_esft(size_t *tokens);
/* Creates or truncates path with len bytes of data; fails the test on error. */
void eplb_test_write_file(const char *path, const void *data, size_t len);
bool eplb_test_exists(const char *path);

/* Runs program `bin` with args (NULL-terminated, at most 62) in a child
 * process whose stdout and stderr go to the files eplb_test_cli_out() and
 * eplb_test_cli_err() in this process's temporary directory. Returns its exit
 * status, or -1 when it did not exit normally. */
int eplb_test_run_cli(const char *bin, const char *const *args);
const char *eplb_test_cli_out(void);
const char *eplb_test_cli_err(void);

/* Failing allocator: after eplb_test_alloc_fail_after(n), the n-th next
 * allocation through libeplb's hooks (0-based) and all later ones return
 * NULL, until eplb_test_alloc_reset(). eplb_test_alloc_count() reports
 * allocations made since the last reset. */
void eplb_test_alloc_install(void);
void eplb_test_alloc_fail_after(long n);
void eplb_test_alloc_reset(void);
long eplb_test_alloc_count(void);

#endif

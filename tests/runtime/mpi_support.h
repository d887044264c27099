/* tests/runtime/mpi_support.h — what the MPI suites share: start-up (MPI,
 * a runtime for verdicts, stdout only on rank 0) and verdicts agreed by all
 * ranks, so that every rank passes or fails each assertion together and
 * they stay in step. */
#ifndef EPLB_TEST_MPI_SUPPORT_H
#define EPLB_TEST_MPI_SUPPORT_H

#include "eplb/runtime.h"

#include <check.h>
#include <stdint.h>

extern uint32_t g_rank, g_size;
extern eplb_runtime_t *g_verdict; /* a runtime used only for reductions */

/* MPI up with a world size among sizes[0..n) (else a message naming `who`),
 * the verdict runtime made, stdout closed on ranks other than 0. Returns 0
 * or 1 (the process's exit status). */
int mpi_test_init(int *argc, char ***argv, const char *who, const uint32_t *sizes, int n);
/* Runs the suite, then frees the verdict runtime and finalises MPI. */
int mpi_test_run(Suite *s);
/* 1 when ok holds on every rank. */
int all_ok(int ok);
/* 1 when h is the same on every rank. */
int all_same(uint64_t h);

#endif

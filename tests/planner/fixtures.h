/* tests/planner/fixtures.h — helpers of the planner suite: reading the
 * reference CSV matrices and making random instances. */
#ifndef EPLB_TEST_PLANNER_FIXTURES_H
#define EPLB_TEST_PLANNER_FIXTURES_H

#include "eplb/plan.h"

#include <stdint.h>

/* Reads a numeric CSV matrix (rows of equal length). Returns a malloc'ed
 * row-major array and its shape, or NULL. */
double *fx_read_matrix(const char *path, uint32_t *rows, uint32_t *cols);

/* Deterministic PRNG (splitmix64). */
uint64_t fx_rand(uint64_t *state);
double fx_uniform(uint64_t *state);

/* Zipf-ish random loads [L][E] (malloc'ed), some zeros when zeros != 0. */
double *fx_random_loads(uint64_t *state, uint32_t L, uint32_t E, int zeros);

/* Plan checks shared by the tests: every expert has a replica, its shares
 * sum to 1, metrics consistent (max_load >= lower_bound). no_dup 1: no GPU
 * holds two replicas of one expert when that is avoidable; 2: the same
 * within each node (groups kept on nodes). */
void fx_check_plan(const eplb_plan_t *plan, const eplb_loads_t *loads, int no_dup);

#endif

/* tools/eplb/cli.h — shared helpers of the eplb command-line tool. The tool
 * uses the public API only (include/eplb). */
#ifndef EPLB_CLI_H
#define EPLB_CLI_H

#include <eplb/eplb.h>

#include <jansson.h>

#include <stdint.h>

/* Exit codes: 0 success, 1 failure of the system or the tool, 2 bad input
 * (usage, malformed or inconsistent files, values out of range). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_BADINPUT = 2 };

/* Prints "eplb: <message>" on stderr and returns CLI_BADINPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "eplb: <what>: out of memory" on stderr and returns CLI_FAIL (a
 * failure, not bad input). */
int cli_out_of_memory(const char *what);

/* Prints "eplb: <what>: <library detail or status text>" on stderr and
 * returns the exit code for the status: 2 for bad-input statuses, 1 else. */
int cli_status_error(eplb_status_t status, const char *what);

/* Maps a status to an exit code without printing. */
int cli_exit_code(eplb_status_t status);

/* Strict number parsing: the whole string must be a number in range. Return 0
 * on success, -1 (and print the usage error naming `opt`) otherwise. */
int cli_parse_u32(const char *opt, const char *s, uint32_t *out);
int cli_parse_u64(const char *opt, const char *s, uint64_t *out);
int cli_parse_double(const char *opt, const char *s, double *out);
/* "A:B" -> [A, B); "A:" -> [A, end); ":B" -> [0, B). */
int cli_parse_range(const char *opt, const char *s, uint64_t *begin, uint64_t *end);
/* Comma-separated u32 list; *out is malloc'ed (caller frees). */
int cli_parse_u32_list(const char *opt, const char *s, uint32_t **out, uint32_t *n);

/* Prints j (indented, reals to 10 significant digits) and a newline on
 * stdout and releases it; CLI_OK, or CLI_FAIL (after a line on stderr) when
 * j is NULL (out of memory) or cannot be written. */
int cli_print_json(json_t *j);
/* cli_print_json with json_dumpf flags of the caller's (e.g. more digits). */
int cli_print_json_flags(json_t *j, size_t flags);

/* eplb_loads_read, printing the library's detail on failure; returns the
 * exit code (CLI_OK on success). */
int cli_read_loads(const char *path, uint64_t step_begin, uint64_t step_end, eplb_loads_t **out);

/* Subcommands: argv[0] is the subcommand's name. */
int cli_trace(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_split(int argc, char **argv);
int cli_topo(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_replay(int argc, char **argv);
int cli_bench(int argc, char **argv);

/* Benchmarks, dispatched by cli_bench. */
int cli_bench_trace(int argc, char **argv);
int cli_bench_plan(int argc, char **argv);
int cli_bench_split(int argc, char **argv);
int cli_bench_runtime(int argc, char **argv);

#endif

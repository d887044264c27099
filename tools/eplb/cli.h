/* tools/eplb/cli.h — shared helpers of the eplb command-line tool. The tool
 * uses the public API only (include/eplb). */
#ifndef EPLB_CLI_H
#define EPLB_CLI_H

#include <eplb/common_tooling.h>
#include <eplb/eplb.h>
#include <eplb/plan_tooling.h>
#include <eplb/sim_tooling.h>
#include <eplb/trace_tooling.h>

#include <jansson.h>

#include <stdint.h>
#include <stdlib.h>

/* Exit codes: 0 success, 1 failure of the system or the tool, 2 bad input
 * (usage, malformed or inconsistent files, values out of range). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_BADINPUT = 2 };

/* Prints "eplb: <message>" on stderr as one line (control characters
 * escaped). */
void cli_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* cli_message, then returns CLI_BADINPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "eplb: <what>: out of memory" on stderr and returns CLI_FAIL (a
 * failure, not bad input). */
int cli_out_of_memory(const char *what);

/* Prints "eplb: <what>: <library detail or status text>" on stderr (just
 * the detail when it already starts with "<what>:", or what is NULL) and
 * returns the exit code for the status: 2 for bad-input statuses, 1 else. */
int cli_status_error(eplb_status_t status, const char *what);

/* Prints the library's detail on a bad option value (eplb_plan_options_check,
 * eplb_sim_options_check, eplb_synth_options_check, eplb_trace_stats), which
 * starts with the field's name ("threads 2000: must be ..."), with each field
 * it names replaced by the CLI option that sets it ("eplb: --threads 2000:
 * must be ..."); a detail that starts with no known field is printed as
 * cli_status_error(status, what) does. Returns the exit code for the status. */
int cli_option_error(eplb_status_t status, const char *what);

/* Maps a status to an exit code without printing. */
int cli_exit_code(eplb_status_t status);

/* Strict number parsing: the whole string must be a number in range. Return 0
 * on success, -1 (and print the usage error naming `opt`) otherwise. */
int cli_parse_u32(const char *opt, const char *s, uint32_t *out);
int cli_parse_double(const char *opt, const char *s, double *out);
/* Comma-separated u32 list; *out is malloc'ed (caller frees). */
int cli_parse_u32_list(const char *opt, const char *s, uint32_t **out, uint32_t *n);

/* An option of a command for cli_getopt: its long name, what it takes and
 * where it goes. CLI_U32, CLI_U64, CLI_DOUBLE: a number (strict, as
 * cli_parse_*) into *field (uint32_t, uint64_t, double), and 1 into
 * *(int *)given when given is not NULL; CLI_RANGE: "A:B" -> [A, B), "A:" ->
 * [A, end), ":B" -> [0, B) into *field and *given (uint64_t each); CLI_STR: the argument into
 * *(const char **)field; CLI_FLAG: 1 into *(int *)field. CLI_ARG (with an argument, optarg) and
 * CLI_NOARG are the caller's: cli_getopt returns their val. val: the short
 * option that is the same option, or 0. */
typedef enum {
  CLI_U32,
  CLI_U64,
  CLI_DOUBLE,
  CLI_RANGE,
  CLI_STR,
  CLI_FLAG,
  CLI_ARG,
  CLI_NOARG
} cli_kind_t;
typedef struct cli_opt {
  const char *name;
  cli_kind_t kind;
  void *field, *given;
  int val;
} cli_opt_t;

/* getopt_long over opts (at most 48, ending with a NULL name) and the short
 * options `shorts`: fills the fields of the options it handles and returns
 * the val of the next option that is the caller's, -1 after the last option,
 * or '?' after one line on stderr (an unknown option, a bad value). The
 * caller sets optind = 1 before the first call. */
int cli_getopt(int argc, char **argv, const char *shorts, const cli_opt_t *opts);

/* json_real(v), or (when v is NaN or infinite, or memory runs out) null and
 * a mark that makes the next cli_print_json fail instead of printing a
 * document with a figure missing. */
json_t *cli_real(double v);
/* j, or null and that mark when j is NULL (a json_pack that failed). */
json_t *cli_json_checked(json_t *j);

/* Prints j (indented, reals to 10 significant digits) and a newline on
 * stdout and releases it; CLI_OK, or CLI_FAIL (after a line on stderr) when
 * j is NULL (out of memory), a value was marked (cli_real) or it cannot be
 * written. */
int cli_print_json(json_t *j);
/* cli_print_json with json_dumpf flags of the caller's (e.g. more digits). */
int cli_print_json_flags(json_t *j, size_t flags);

/* eplb_loads_read, printing the library's detail on failure; returns the
 * exit code (CLI_OK on success). */
int cli_read_loads(const char *path, uint64_t step_begin, uint64_t step_end, eplb_loads_t **out);

/* CLI_OK when `plan` has the layers and experts (L x E) of the data at
 * data_path; else one line ("<data_path>: L layers x E experts, but the plan
 * <plan_path> has ...") and CLI_BADINPUT. */
int cli_check_plan_shape(const char *data_path, uint32_t L, uint32_t E, const eplb_plan_t *plan,
                         const char *plan_path);

/* Flushes stdout: CLI_OK, or CLI_FAIL after "cannot write the summary".
 * cli_summary_commit: when rc is CLI_OK, that flush and then
 * cli_outputs_commit; returns the exit code (rc when it is not CLI_OK). */
int cli_flush_summary(void);
int cli_summary_commit(int rc);

/* Outputs of a command are committed together at its end, so that a command
 * that fails writes none of them (README: exit status).
 * cli_check_output: the path is not a directory (or, is_dir, not a file)
 * and its directory exists and is writable; else one line, CLI_BADINPUT.
 * cli_output_stage: checks, then creates the temporary to write instead
 * ("<path>.tmp.<pid>.XXXXXX", a directory when is_dir) and returns its
 * name (valid until the commit), or NULL after printing why.
 * cli_output_expect: a file the caller is about to write into a staged
 * directory (so that a signal removes it).
 * cli_outputs_commit: renames every staged output into place (a staged
 * directory's files into an existing directory); CLI_OK or the exit code
 * after a line. Removes what is left either way.
 * cli_outputs_remove: removes every temporary (not in a signal handler).
 * All are eplb_outputs_* (common.h) on one set, with the CLI's messages. */
int cli_check_output(const char *opt, const char *path, int is_dir);
const char *cli_output_stage(const char *opt, const char *path, int is_dir);
void cli_output_expect(const char *tmp, const char *name);
int cli_outputs_commit(void);
void cli_outputs_remove(void);
/* SIGINT, SIGTERM, SIGHUP: remove the library's and the staged temporaries,
 * then die of the signal. */
void cli_install_signal_handlers(void);

/* Subcommands: argv[0] is the subcommand's name. */
int cli_trace(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_split(int argc, char **argv);
int cli_topo(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_replay(int argc, char **argv);
int cli_bench(int argc, char **argv);

#endif

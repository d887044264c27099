#include "cli.h"

/* Placeholder until the plan issue lands: the command exists and says so. */
int cli_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_usage_error("plan: not available in this build yet");
}

int cli_bench_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_usage_error("bench plan: not available in this build yet");
}

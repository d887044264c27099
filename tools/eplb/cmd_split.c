#include "cli.h"

/* Placeholder until the split issue lands: the command exists and says so. */
int cli_split(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_usage_error("split: not available in this build yet");
}

int cli_bench_split(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_usage_error("bench split: not available in this build yet");
}

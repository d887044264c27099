#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cli_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs("usage: eplb bench trace|plan|split|runtime [options]\n", argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_BADINPUT : CLI_OK;
  }
  if (!strcmp(argv[1], "trace"))
    return cli_bench_trace(argc - 1, argv + 1);
  if (!strcmp(argv[1], "plan"))
    return cli_bench_plan(argc - 1, argv + 1);
  if (!strcmp(argv[1], "split"))
    return cli_bench_split(argc - 1, argv + 1);
  if (!strcmp(argv[1], "runtime"))
    return cli_bench_runtime(argc - 1, argv + 1);
  return cli_usage_error("bench: unknown benchmark '%s' (trace, plan, split, runtime)", argv[1]);
}

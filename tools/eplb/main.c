/* eplb — command-line front end of libeplb. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
  fputs("usage: eplb <command> [options]\n"
        "\n"
        "commands:\n"
        "  trace   gen | info | stats | convert | recover   recorded router decisions\n"
        "  plan    make a placement; plan eval | plan diff\n"
        "  split   re-split a plan's token shares for new loads\n"
        "  topo    show                                      the cluster model\n"
        "  sim     replay a trace: balance, traffic, step time\n"
        "  replay  test harness: drive the embedded runtime with a trace (under mpirun)\n"
        "  bench   trace | plan | split | runtime            benchmarks\n"
        "  version print the library version and features\n"
        "\n"
        "'eplb <command> --help' describes a command.\n",
        f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_BADINPUT;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("eplb %s (cuda %s, nccl %s, mpi %s)\n", eplb_version(),
           eplb_feature_enabled(EPLB_FEATURE_CUDA) ? "yes" : "no",
           eplb_feature_enabled(EPLB_FEATURE_NCCL) ? "yes" : "no",
           eplb_feature_enabled(EPLB_FEATURE_MPI) ? "yes" : "no");
    return CLI_OK;
  }
  cli_install_signal_handlers();
  if (!strcmp(cmd, "trace"))
    return cli_trace(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan"))
    return cli_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "split"))
    return cli_split(argc - 1, argv + 1);
  if (!strcmp(cmd, "topo"))
    return cli_topo(argc - 1, argv + 1);
  if (!strcmp(cmd, "sim"))
    return cli_sim(argc - 1, argv + 1);
  if (!strcmp(cmd, "replay"))
    return cli_replay(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench"))
    return cli_bench(argc - 1, argv + 1);
  cli_message("unknown command '%s' (see 'eplb --help')", cmd);
  return CLI_BADINPUT;
}

#include "cli.h"
int cli_bench_trace(int argc, char **argv) { (void)argc; (void)argv; return CLI_FAIL; }

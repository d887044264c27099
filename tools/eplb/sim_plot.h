/* tools/eplb/sim_plot.h — what `eplb sim` keeps of each run for its outputs,
 * and its --plot (gnuplot), kept apart from the command's options. */
#ifndef EPLB_TOOLS_SIM_PLOT_H
#define EPLB_TOOLS_SIM_PLOT_H

#include <eplb/sim.h>

#include <stdint.h>

/* What one policy's run leaves for the outputs. */
typedef struct run {
  const char *name;
  eplb_sim_summary_t sum;
  uint64_t n;         /* steps replayed */
  double *bal, *time; /* [n] */
  uint32_t bins, G;
  double *heat;   /* [bins][G] mean tokens per GPU */
  double *heat_n; /* [bins] */
} run_t;

/* Renders the plot into tmp_out, a staged output (cli_output_stage) that
 * the caller commits with the others. Returns an exit code. */
int sim_plot(const char *tmp_out, const run_t *runs, int nr, uint64_t begin);

#endif

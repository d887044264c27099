/* tools/eplb/sim_plot.c — `eplb sim --plot`: balancedness and step time over
 * the steps and per-GPU token heatmaps, rendered by gnuplot. */
#include "cli.h"
#include "sim_plot.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes s into a gnuplot single-quoted string. */
static void gp_quote(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'')
      fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

/* dir/name into buf; -1 when it does not fit. */
static int join(char *buf, size_t n, const char *dir, const char *name) {
  int k = snprintf(buf, n, "%s/%s", dir, name);
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

static int write_plot_data(const char *dir, const run_t *runs, int nr, uint64_t begin) {
  char path[4096];
  FILE *f = join(path, sizeof path, dir, "series.dat") ? NULL : fopen(path, "w");
  if (!f)
    return -1;
  for (uint64_t i = 0; i < runs[0].n; i++) {
    fprintf(f, "%" PRIu64, begin + i);
    for (int p = 0; p < nr; p++)
      fprintf(f, " %.6f %.3f", runs[p].bal[i], runs[p].time[i]);
    fputc('\n', f);
  }
  int bad = fclose(f);
  for (int p = 0; p < nr && !bad; p++) {
    const run_t *r = &runs[p];
    char name[32];
    snprintf(name, sizeof name, "heat%d.dat", p);
    if (join(path, sizeof path, dir, name) || !(f = fopen(path, "w")))
      return -1;
    for (uint32_t b = 0; b < r->bins; b++) {
      double x = (double)begin + (double)b * (double)r->n / r->bins;
      for (uint32_t g = 0; g < r->G; g++)
        fprintf(f, "%.3f %" PRIu32 " %.3f\n", x, g,
                r->heat_n[b] > 0 ? r->heat[(size_t)b * r->G + g] / r->heat_n[b] : 0);
      fputc('\n', f);
    }
    bad = fclose(f);
  }
  return bad ? -1 : 0;
}

static int write_plot_script(const char *dir, const char *tmp_out, const run_t *runs, int nr) {
  char path[4096];
  FILE *f = join(path, sizeof path, dir, "plot.gp") ? NULL : fopen(path, "w");
  if (!f)
    return -1;
  fprintf(f, "set terminal pngcairo size 1200,%d noenhanced\nset output ", 300 * (2 + nr));
  gp_quote(f, tmp_out);
  fprintf(f, "\ncd ");
  gp_quote(f, dir);
  fprintf(f,
          "\nset multiplot layout %d,1\nset grid\nset key outside right\n"
          "set xlabel 'step'\n",
          2 + nr);
  fprintf(f, "set title 'balancedness (mean GPU tokens / max, mean over layers)'\nplot ");
  for (int p = 0; p < nr; p++) {
    fprintf(f, "%s'series.dat' using 1:%d with lines title ", p ? ", " : "", 2 + 2 * p);
    gp_quote(f, runs[p].name);
  }
  fprintf(f, "\nset title 'estimated step time (us)'\nplot ");
  for (int p = 0; p < nr; p++) {
    fprintf(f, "%s'series.dat' using 1:%d with lines title ", p ? ", " : "", 3 + 2 * p);
    gp_quote(f, runs[p].name);
  }
  /* One colour scale for every heatmap, so that policies compare by eye. */
  double hmax = 0;
  for (int p = 0; p < nr; p++)
    for (size_t i = 0; i < (size_t)runs[p].bins * runs[p].G; i++) {
      double v =
          runs[p].heat_n[i / runs[p].G] > 0 ? runs[p].heat[i] / runs[p].heat_n[i / runs[p].G] : 0;
      hmax = v > hmax ? v : hmax;
    }
  fprintf(f,
          "\nunset grid\nset autoscale xfix\nset autoscale yfix\nset ylabel 'GPU'\n"
          "set cblabel 'tokens per step (all layers)'\nset cbrange [0:%g]\n",
          hmax > 0 ? hmax : 1);
  for (int p = 0; p < nr; p++) {
    fprintf(f, "set title ");
    gp_quote(f, runs[p].name);
    fprintf(f, " . ': per-GPU tokens'\nplot 'heat%d.dat' using 1:2:3 with image notitle\n", p);
  }
  fprintf(f, "unset multiplot\n");
  return fclose(f) ? -1 : 0;
}

/* Renders the plot into tmp_out, a staged output (cli_output_stage) that
 * the caller commits with the others. Returns an exit code. */
int sim_plot(const char *tmp_out, const run_t *runs, int nr, uint64_t begin) {
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096], script[4200], errf[4200];
  if (join(dir, sizeof dir, tmpdir && *tmpdir ? tmpdir : "/tmp", "eplb-plot.XXXXXX") ||
      !mkdtemp(dir)) {
    fprintf(stderr, "eplb: --plot: cannot create a temporary directory: %s\n", strerror(errno));
    return CLI_FAIL;
  }
  if (join(script, sizeof script, dir, "plot.gp") || join(errf, sizeof errf, dir, "gnuplot.err")) {
    fprintf(stderr, "eplb: --plot: path too long\n");
    rmdir(dir);
    return CLI_BADINPUT;
  }
  int rc = CLI_FAIL;
  if (write_plot_data(dir, runs, nr, begin) || write_plot_script(dir, tmp_out, runs, nr)) {
    fprintf(stderr, "eplb: --plot: cannot write plot data in %s\n", dir);
    goto done;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "eplb: --plot: fork: %s\n", strerror(errno));
    goto done;
  }
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) || !freopen(errf, "w", stderr))
      _exit(126);
    execlp("gnuplot", "gnuplot", script, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    fprintf(stderr, "eplb: --plot: cannot run gnuplot (install gnuplot-nox)\n");
    goto done;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char line[512] = "failed";
    FILE *e = fopen(errf, "r");
    while (e && fgets(line, sizeof line, e) && strspn(line, " \t\n^") == strlen(line))
      ;
    if (e)
      fclose(e);
    line[strcspn(line, "\n")] = 0;
    fprintf(stderr, "eplb: --plot: gnuplot: %s\n", line);
    goto done;
  }
  rc = CLI_OK;
done:;
  const char *files[] = {"series.dat", "plot.gp", "gnuplot.err"};
  char p[4300];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (!join(p, sizeof p, dir, files[i]))
      remove(p);
  for (int i = 0; i < nr; i++) {
    char name[32];
    snprintf(name, sizeof name, "heat%d.dat", i);
    if (!join(p, sizeof p, dir, name))
      remove(p);
  }
  rmdir(dir);
  return rc;
}

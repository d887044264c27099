/* Fuzz target for the eplbd config file (tools/eplbd/config.c, compiled
 * into this binary): the input is a whole config file, loaded alone and
 * merged with command-line flags. Beyond "no crash, no leak": the result is
 * EPLBD_OK with a usable config or EPLBD_BADINPUT with a one-line message. */
#include "tests/fuzz/fuzz_target.h"

#include "eplbd.h"

#include <stdio.h>
#include <string.h>

void fuzz_target_cleanup(void) { fuzz_util_cleanup(); }

static void load(const eplbd_cli_t *cli) {
  eplbd_config_t cfg;
  char err[1024] = "";
  int rc = eplbd_config_load(cli, &cfg, err, sizeof err);
  fuzz_util_check(rc == EPLBD_OK || rc == EPLBD_BADINPUT, "exit status 0 or 2");
  if (rc != EPLBD_OK) {
    fuzz_util_check(err[0] && !strchr(err, '\n') && !strchr(err, '\r'), "a one-line message");
    return;
  }
  fuzz_util_check(cfg.num_sources >= 1 && cfg.listen && cfg.period > 0 && cfg.nodes >= 1 &&
                      cfg.gpus % cfg.nodes == 0,
                  "a loaded config is usable");
  for (uint32_t i = 0; i < cfg.num_sources; i++) {
    const eplbd_source_cfg_t *s = &cfg.sources[i];
    fuzz_util_check(s->name && s->name[0] && !!s->trace != !!s->shm && (s->out || s->publish_shm),
                    "every source has a name, one input and an output");
  }
  eplbd_config_free(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_util_path("eplbd.json");
  fuzz_util_put(path, data, size);
  eplbd_cli_t cli;
  memset(&cli, 0, sizeof cli);
  cli.config_path = path;
  load(&cli);
  /* Flags add a source after the file's and override its values. */
  cli.shm = "/eplb-fuzz";
  cli.out = "out";
  cli.listen = "off";
  cli.gpus = 4;
  cli.nodes = 2;
  load(&cli);
  return 0;
}

/* tools/eplbd/publish.c — publishing plans so that a crash at any instant
 * leaves only complete, valid plans: the plan is written to a hidden staging
 * name (the library writes a temporary file, fsyncs and renames), read back
 * and compared, renamed to plan-<epoch>.json, the directory fsynced, and the
 * `current` link replaced by renaming a temporary link over it. */
#include "eplbd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* Parses "plan-<N>.json" exactly as eplbd_publish names it: N in
 * [1, 2^64-1], decimal without a leading zero (plan-01.json would alias
 * plan-1.json), nothing that wraps. */
static int plan_epoch(const char *name, uint64_t *epoch) {
  if (strncmp(name, "plan-", 5))
    return 0;
  const char *p = name + 5;
  uint64_t e = 0;
  if (*p < '1' || *p > '9')
    return 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    uint64_t d = (uint64_t)(*p - '0');
    if (e > (UINT64_MAX - d) / 10)
      return 0;
    e = e * 10 + d;
  }
  if (strcmp(p, ".json"))
    return 0;
  *epoch = e;
  return 1;
}

/* Names of our own temporary entries: a crash leaves them behind. */
static int leftover(const char *name) {
  size_t n = strlen(name);
  return !strncmp(name, ".staging-", 9) ||
         (!strncmp(name, ".current", 8) && n >= 12 && !strcmp(name + n - 4, ".tmp"));
}

/* Sets the last published epoch. 2^64-1 is the last there is: epochs never
 * wrap (a runtime refuses a smaller epoch than it has seen, and a restart
 * would resume after the largest), so the source stops publishing, said
 * once; a reload (SIGHUP) looks again. */
static void set_epoch(eplbd_source_t *s, uint64_t epoch) {
  pthread_mutex_lock(&eplbd_lock);
  s->epoch = epoch;
  pthread_mutex_unlock(&eplbd_lock);
  if (epoch == UINT64_MAX && !s->exhausted) {
    s->exhausted = 1;
    pthread_mutex_lock(&eplbd_lock);
    s->errors++;
    pthread_mutex_unlock(&eplbd_lock);
    eplbd_log(EPLB_LOG_ERROR,
              "source %s: epoch %llu is the last one: epochs never wrap, publishing stopped "
              "for this source (clear its --out directory or mailbox, then reload)",
              s->cfg.name, (unsigned long long)epoch);
  }
}

/* Builds a name in dir that nothing holds yet: DIR/PREFIX-TAG then
 * DIR/PREFIX-TAG.K for K = 1, 2, ..., each followed by SUFFIX. A leftover
 * under the first name, even a directory that cannot be removed, must not
 * stop publishing. Returns -1 when all tries are taken (or the path is too
 * long). */
static int free_name(char *out, size_t n, const char *dir, const char *prefix, const char *tag,
                     const char *suffix) {
  struct stat sb;
  for (unsigned k = 0; k < 64 && !eplbd_stop_requested; k++) {
    char num[16] = "";
    if (k)
      snprintf(num, sizeof num, ".%u", k);
    int len = snprintf(out, n, "%s/%s-%s%s%s", dir, prefix, tag, num, suffix);
    if (len < 0 || (size_t)len >= n)
      return -1;
    if (lstat(out, &sb) && errno == ENOENT)
      return 0;
  }
  return -1;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0, n = 0;
  if (!f)
    return NULL;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *b = realloc(buf, cap);
      if (!b) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0)
      break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

/* Same shape and placement, shares within rounding of the JSON text. */
static int same_plan(const eplb_plan_t *a, const eplb_plan_t *b) {
  uint32_t L = eplb_plan_num_layers(a), R = eplb_plan_num_slots(a);
  if (L != eplb_plan_num_layers(b) || R != eplb_plan_num_slots(b) ||
      eplb_plan_num_experts(a) != eplb_plan_num_experts(b) ||
      eplb_plan_num_gpus(a) != eplb_plan_num_gpus(b))
    return 0;
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *pa = eplb_plan_phy2log(a, l), *pb = eplb_plan_phy2log(b, l);
    const double *sa = eplb_plan_share(a, l), *sb = eplb_plan_share(b, l);
    for (uint32_t r = 0; r < R; r++)
      if (pa[r] != pb[r] || fabs(sa[r] - sb[r]) > 1e-9)
        return 0;
  }
  return 1;
}

static void path_join(char *out, size_t n, const char *dir, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

/* Keeps the bytes of the published file for /plan. */
static void keep_json(eplbd_source_t *s, const char *path) {
  size_t len = 0;
  char *buf = read_all(path, &len);
  if (!buf)
    return;
  pthread_mutex_lock(&eplbd_lock);
  free(s->plan_json);
  s->plan_json = buf;
  s->plan_json_len = len;
  pthread_mutex_unlock(&eplbd_lock);
}

/* The new link is made under a free temporary name (symlink() refuses an
 * existing one, whatever it is) and renamed over `current`. */
static int point_current(const char *dir, uint64_t epoch) {
  char target[64], tmp[4096], cur[4096];
  snprintf(target, sizeof target, "plan-%llu.json", (unsigned long long)epoch);
  path_join(cur, sizeof cur, dir, "current");
  int made = 0;
  for (unsigned k = 0; k < 64 && !made; k++) {
    int len = k ? snprintf(tmp, sizeof tmp, "%s/.current.%u.tmp", dir, k)
                : snprintf(tmp, sizeof tmp, "%s/.current.tmp", dir);
    if (len < 0 || (size_t)len >= sizeof tmp)
      break;
    made = !symlink(target, tmp);
    if (!made && errno != EEXIST)
      break;
  }
  if (!made || rename(tmp, cur) || fsync_dir(dir)) {
    eplbd_log(EPLB_LOG_ERROR, "%s: cannot update the current link: %s", dir,
              made ? strerror(errno) : "no free temporary name");
    if (made)
      unlink(tmp);
    return -1;
  }
  return 0;
}

static int newest_first(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

/* Plan files tried as the current plan, newest first, before starting
 * without one (the next plan is then a full replan): bounds the time a
 * directory full of damaged plans costs at start. */
#define RESUME_TRIES 16

/* Lists the epochs of dir's plan files, newest first, into *out (to free).
 * With tidy, removes our temporary leftovers on the way: never visible as
 * plan-*.json; a directory under such a name is removed if empty, else
 * left (publishing picks other names). Returns -1 (logged) on failure. */
static int list_plans(const char *dir, int tidy, uint64_t **out, size_t *count) {
  DIR *d = opendir(dir);
  if (!d) {
    eplbd_log(EPLB_LOG_ERROR, "%s: cannot open: %s", dir, strerror(errno));
    return -1;
  }
  uint64_t *epochs = NULL, e;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  char path[4096];
  while (!eplbd_stop_requested && (de = readdir(d))) {
    if (tidy && leftover(de->d_name)) {
      path_join(path, sizeof path, dir, de->d_name);
      if (unlink(path) && (errno == EISDIR || errno == EPERM))
        rmdir(path);
    } else if (plan_epoch(de->d_name, &e)) {
      if (n == cap) {
        size_t c = cap ? cap * 2 : 64;
        uint64_t *p = realloc(epochs, c * sizeof *p);
        if (!p) {
          eplbd_log(EPLB_LOG_ERROR, "%s: out of memory listing plans", dir);
          rc = -1;
          break;
        }
        epochs = p;
        cap = c;
      }
      epochs[n++] = e;
    }
  }
  closedir(d);
  if (rc) {
    free(epochs);
    return -1;
  }
  if (n)
    qsort(epochs, n, sizeof *epochs, newest_first);
  *out = epochs;
  *count = n;
  return 0;
}

/* Removes all but the newest keep_plans plan files, never the one `current`
 * names: a daemon publishing every period would otherwise fill the disk.
 * No fsync: a removal lost in a crash is only done again. */
static void prune(eplbd_source_t *s) {
  uint64_t *epochs = NULL, cur = 0;
  size_t n = 0;
  if (!s->keep_plans || !s->cfg.out || list_plans(s->cfg.out, 0, &epochs, &n))
    return;
  char path[4096], link[64];
  path_join(path, sizeof path, s->cfg.out, "current");
  ssize_t k = n > s->keep_plans ? readlink(path, link, sizeof link - 1) : -1;
  if (k > 0) {
    link[k] = 0;
    if (!plan_epoch(link, &cur))
      cur = 0;
  }
  for (size_t i = s->keep_plans; i < n && !eplbd_stop_requested; i++) {
    if (epochs[i] == cur)
      continue;
    snprintf(path, sizeof path, "%s/plan-%llu.json", s->cfg.out, (unsigned long long)epochs[i]);
    if (unlink(path) && errno != ENOENT)
      eplbd_log(EPLB_LOG_WARN, "source %s: cannot remove the old plan %s: %s", s->cfg.name, path,
                strerror(errno));
  }
  free(epochs);
}

/* The directory listing gives the epochs (no probing of every number
 * below the largest); the newest plan that reads back valid becomes the
 * current one. */
int eplbd_publish_resume(eplbd_source_t *s) {
  if (!s->cfg.out)
    return 0;
  const char *dir = s->cfg.out;
  if (mkdir(dir, 0755) && errno != EEXIST) {
    eplbd_log(EPLB_LOG_ERROR, "%s: cannot create: %s", dir, strerror(errno));
    return -1;
  }
  uint64_t *epochs = NULL;
  size_t n = 0;
  char path[4096];
  if (list_plans(dir, 1, &epochs, &n))
    return -1;
  /* Every name counts, even one that does not read back: an epoch is never reused. */
  if (n)
    set_epoch(s, epochs[0]);
  for (size_t i = 0; i < n && !s->current && !eplbd_stop_requested; i++) {
    if (i == RESUME_TRIES) {
      eplbd_log(EPLB_LOG_WARN,
                "source %s: none of the %u newest plans in %s reads back: starting without "
                "a current plan",
                s->cfg.name, RESUME_TRIES, dir);
      break;
    }
    snprintf(path, sizeof path, "%s/plan-%llu.json", dir, (unsigned long long)epochs[i]);
    eplb_plan_t *p = NULL;
    if (eplb_plan_read(path, &p)) {
      eplbd_log(EPLB_LOG_WARN, "source %s: skipping %s: %s", s->cfg.name, path,
                eplb_error_detail());
      continue;
    }
    s->current = p;
    keep_json(s, path);
    char link[4096], want[64];
    path_join(path, sizeof path, dir, "current");
    ssize_t k = readlink(path, link, sizeof link - 1);
    snprintf(want, sizeof want, "plan-%llu.json", (unsigned long long)epochs[i]);
    if (k < 0 || (size_t)k != strlen(want) || memcmp(link, want, (size_t)k))
      point_current(dir, epochs[i]);
    eplbd_log(EPLB_LOG_INFO, "source %s: resuming after epoch %llu (current %s)", s->cfg.name,
              (unsigned long long)epochs[0], want);
  }
  free(epochs);
  prune(s);
  return 0;
}

void eplbd_publish_resume_mailbox(eplbd_source_t *s) {
  uint64_t e = 0;
  if (!s->cfg.publish_shm || eplb_shm_mailbox_epoch(s->shm, &e) || e <= s->epoch)
    return;
  set_epoch(s, e);
}

/* Writes the plan to a private temporary file and checks it reads back the
 * same; *json receives the file's bytes. */
static int validate_file(const eplb_plan_t *plan, const char *path, char **json, size_t *len) {
  eplb_status_t st = eplb_plan_write(plan, path);
  eplb_plan_t *back = NULL;
  if (st) {
    eplbd_log(EPLB_LOG_ERROR, "%s: %s", path, eplb_error_detail());
    return -1;
  }
  if ((st = eplb_plan_read(path, &back)) || !same_plan(plan, back)) {
    eplbd_log(EPLB_LOG_ERROR, "%s: the plan does not validate after writing: %s", path,
              st ? eplb_error_detail() : "read back differs");
    eplb_plan_destroy(back);
    unlink(path);
    return -1;
  }
  eplb_plan_destroy(back);
  if (json && !(*json = read_all(path, len))) {
    unlink(path);
    return -1;
  }
  return 0;
}

int eplbd_publish(eplbd_source_t *s, const eplb_plan_t *plan) {
  if (s->exhausted) /* logged when the epoch reached 2^64-1 */
    return -1;
  uint64_t epoch = s->epoch + 1;
  char staging[4096], final[4096], tag[64];
  char *json = NULL;
  size_t len = 0;
  if (s->cfg.out) {
    snprintf(tag, sizeof tag, "%llu", (unsigned long long)epoch);
    if (free_name(staging, sizeof staging, s->cfg.out, ".staging", tag, ".json")) {
      eplbd_log(EPLB_LOG_ERROR, "%s: no free name for staging epoch %llu", s->cfg.out,
                (unsigned long long)epoch);
      goto fail;
    }
    snprintf(final, sizeof final, "%s/plan-%llu.json", s->cfg.out, (unsigned long long)epoch);
    if (validate_file(plan, staging, &json, &len))
      goto invalid;
    if (rename(staging, final) || fsync_dir(s->cfg.out)) {
      eplbd_log(EPLB_LOG_ERROR, "%s: cannot publish: %s", final, strerror(errno));
      unlink(staging);
      goto fail;
    }
    if (!point_current(s->cfg.out, epoch))
      prune(s);
  } else {
    const char *tmpdir = getenv("TMPDIR");
    snprintf(tag, sizeof tag, "%ld-%s", (long)getpid(), s->cfg.name);
    if (free_name(staging, sizeof staging, tmpdir && tmpdir[0] ? tmpdir : "/tmp", "eplbd", tag,
                  ".json")) {
      eplbd_log(EPLB_LOG_ERROR, "no free temporary name to validate the plan of %s", s->cfg.name);
      goto fail;
    }
    int rc = validate_file(plan, staging, &json, &len);
    unlink(staging);
    if (rc)
      goto invalid;
  }
  if (s->cfg.shm && s->cfg.publish_shm && s->shm) {
    eplb_plan_t *back = NULL;
    uint64_t got = 0;
    eplb_status_t st = eplb_shm_post_plan(s->shm, plan, epoch);
    if (!st)
      st = eplb_shm_read_plan(s->shm, &got, &back);
    int same = !st && got == epoch && back && same_plan(plan, back);
    eplb_plan_destroy(back);
    if (!same) {
      eplbd_log(EPLB_LOG_ERROR, "source %s: mailbox post of epoch %llu failed: %s", s->cfg.name,
                (unsigned long long)epoch, st ? eplb_error_detail() : "read back differs");
      if (!s->cfg.out)
        goto fail;
    }
  }
  pthread_mutex_lock(&eplbd_lock);
  free(s->plan_json);
  s->plan_json = json;
  s->plan_json_len = len;
  pthread_mutex_unlock(&eplbd_lock);
  set_epoch(s, epoch);
  return 0;
invalid:
  pthread_mutex_lock(&eplbd_lock);
  s->invalid_plans++;
  pthread_mutex_unlock(&eplbd_lock);
fail:
  free(json);
  return -1;
}

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

/* Parses "plan-<digits>.json" exactly. */
static int plan_epoch(const char *name, uint64_t *epoch) {
  if (strncmp(name, "plan-", 5))
    return 0;
  const char *p = name + 5;
  uint64_t e = 0;
  if (*p < '0' || *p > '9')
    return 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (e > (UINT64_MAX - 9) / 10)
      return 0;
    e = e * 10 + (uint64_t)(*p - '0');
  }
  if (strcmp(p, ".json"))
    return 0;
  *epoch = e;
  return 1;
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

static int point_current(const char *dir, uint64_t epoch) {
  char target[64], tmp[4096], cur[4096];
  snprintf(target, sizeof target, "plan-%llu.json", (unsigned long long)epoch);
  path_join(tmp, sizeof tmp, dir, ".current.tmp");
  path_join(cur, sizeof cur, dir, "current");
  unlink(tmp);
  if (symlink(target, tmp) || rename(tmp, cur) || fsync_dir(dir)) {
    eplbd_log(EPLB_LOG_ERROR, "%s: cannot update the current link: %s", dir, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

int eplbd_publish_resume(eplbd_source_t *s) {
  if (s->cfg.out) {
    const char *dir = s->cfg.out;
    if (mkdir(dir, 0755) && errno != EEXIST) {
      eplbd_log(EPLB_LOG_ERROR, "%s: cannot create: %s", dir, strerror(errno));
      return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
      eplbd_log(EPLB_LOG_ERROR, "%s: cannot open: %s", dir, strerror(errno));
      return -1;
    }
    uint64_t max = 0, e;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
      /* Leftovers of a crash: never visible as plan-*.json, removed here. */
      if (!strncmp(de->d_name, ".staging-", 9) || !strcmp(de->d_name, ".current.tmp")) {
        path_join(path, sizeof path, dir, de->d_name);
        unlink(path);
      } else if (plan_epoch(de->d_name, &e) && e > max)
        max = e;
    }
    closedir(d);
    s->epoch = max;
    /* The newest plan that reads back valid becomes the current one. */
    for (uint64_t k = max; k > 0 && !s->current; k--) {
      snprintf(path, sizeof path, "%s/plan-%llu.json", dir, (unsigned long long)k);
      if (access(path, F_OK))
        continue;
      eplb_plan_t *p = NULL;
      if (eplb_plan_read(path, &p)) {
        eplbd_log(EPLB_LOG_WARN, "source %s: %s", s->cfg.name, eplb_error_detail());
        continue;
      }
      s->current = p;
      keep_json(s, path);
      char link[4096], want[64];
      path_join(path, sizeof path, dir, "current");
      ssize_t n = readlink(path, link, sizeof link - 1);
      snprintf(want, sizeof want, "plan-%llu.json", (unsigned long long)k);
      if (n < 0 || (size_t)n != strlen(want) || memcmp(link, want, (size_t)n))
        point_current(dir, k);
      eplbd_log(EPLB_LOG_INFO, "source %s: resuming after epoch %llu (current plan-%llu.json)",
                s->cfg.name, (unsigned long long)max, (unsigned long long)k);
    }
  }
  return 0;
}

void eplbd_publish_resume_mailbox(eplbd_source_t *s) {
  uint64_t e = 0;
  if (!s->cfg.publish_shm || eplb_shm_mailbox_epoch(s->shm, &e) || e <= s->epoch)
    return;
  pthread_mutex_lock(&eplbd_lock);
  s->epoch = e;
  pthread_mutex_unlock(&eplbd_lock);
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
  uint64_t epoch = s->epoch + 1;
  char staging[4096], final[4096];
  char *json = NULL;
  size_t len = 0;
  if (s->cfg.out) {
    snprintf(staging, sizeof staging, "%s/.staging-%llu.json", s->cfg.out,
             (unsigned long long)epoch);
    snprintf(final, sizeof final, "%s/plan-%llu.json", s->cfg.out, (unsigned long long)epoch);
    if (validate_file(plan, staging, &json, &len))
      goto invalid;
    if (rename(staging, final) || fsync_dir(s->cfg.out)) {
      eplbd_log(EPLB_LOG_ERROR, "%s: cannot publish: %s", final, strerror(errno));
      unlink(staging);
      goto fail;
    }
    point_current(s->cfg.out, epoch);
  } else {
    const char *tmpdir = getenv("TMPDIR");
    snprintf(staging, sizeof staging, "%s/eplbd-%ld-%s.json", tmpdir ? tmpdir : "/tmp",
             (long)getpid(), s->cfg.name);
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
  s->epoch = epoch;
  free(s->plan_json);
  s->plan_json = json;
  s->plan_json_len = len;
  pthread_mutex_unlock(&eplbd_lock);
  return 0;
invalid:
  pthread_mutex_lock(&eplbd_lock);
  s->invalid_plans++;
  pthread_mutex_unlock(&eplbd_lock);
fail:
  free(json);
  return -1;
}

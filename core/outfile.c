/* core/outfile.c — atomic output files: written under a temporary name in
 * the target's directory and renamed into place, so that no reader ever sees
 * a partial file at the target path. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- temporaries of outputs being written -------------------------------
 * A fixed table, not a list: eplb_remove_temporaries runs in a signal
 * handler, where it may neither allocate nor take a lock. A slot is claimed
 * (FREE -> BUSY), filled, then published (READY); the handler only reads
 * READY slots, whose path no longer changes. */
enum { TMP_FREE, TMP_BUSY, TMP_READY };
#define TMP_SLOTS 64
static struct {
  atomic_int state;
  char path[4096];
} tmp_table[TMP_SLOTS];

int eplb__tmp_register(const char *tmp) {
  size_t n = strlen(tmp);
  if (n >= sizeof tmp_table[0].path)
    return -1;
  for (int i = 0; i < TMP_SLOTS; i++) {
    int expect = TMP_FREE;
    if (atomic_compare_exchange_strong(&tmp_table[i].state, &expect, TMP_BUSY)) {
      memcpy(tmp_table[i].path, tmp, n + 1);
      atomic_store(&tmp_table[i].state, TMP_READY);
      return i;
    }
  }
  return -1; /* more than 64 at once: that one is not removed on a signal */
}

int eplb__tmp_create(char *tmp, int dir, int *slot) {
  /* A fatal signal that lands between the creation and the registration
   * would leave the temporary behind (a CLI test that kills as soon as the
   * file shows caught it under load): blocked in between, it is delivered
   * after, when the handler knows the name. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  int masked = !pthread_sigmask(SIG_BLOCK, &block, &old);
  int fd = dir ? (mkdtemp(tmp) ? 0 : -1) : mkstemp(tmp);
  int saved = errno;
  *slot = fd >= 0 ? eplb__tmp_register(tmp) : -1;
  if (masked)
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = saved;
  return fd;
}

void eplb__tmp_unregister(int slot) {
  if (slot >= 0 && slot < TMP_SLOTS)
    atomic_store(&tmp_table[slot].state, TMP_FREE);
}

void eplb_remove_temporaries(void) {
  int saved = errno;
  for (int i = 0; i < TMP_SLOTS; i++)
    if (atomic_load(&tmp_table[i].state) == TMP_READY)
      unlink(tmp_table[i].path);
  /* A staged directory (eplb_outputs_stage) is registered with its files:
   * once they are gone it is empty. rmdir never removes a file. */
  for (int i = 0; i < TMP_SLOTS; i++)
    if (atomic_load(&tmp_table[i].state) == TMP_READY)
      rmdir(tmp_table[i].path);
  errno = saved;
}

int eplb__tmp_name(char *buf, size_t cap, const char *path, const char *suffix) {
  int k = snprintf(buf, cap, "%s.tmp.%ld.%s", path, (long)getpid(), suffix);
  return k < 0 || (size_t)k >= cap ? -1 : 0;
}

/* A temporary left by a writer that is gone: "<base>.tmp.<pid>.<alnum>"
 * whose process no longer exists here and that has not been written for a
 * minute (the minute covers a pid that a writer on another host of a shared
 * file system holds), or an untagged "<base>.tmp.<alnum>" of an older eplb
 * (mkstemp or "<pid>" only) unwritten for an hour. Never one of this
 * process's own: its writers remove theirs. */
static int stale_tmp(const char *dir, const char *name, size_t baselen, time_t now) {
  const char *p = name + baselen + 5; /* past "<base>.tmp." */
  const char *dot = strchr(p, '.');
  long pid = -1;
  if (dot) {
    if (dot == p || dot - p > 10)
      return 0;
    pid = 0;
    for (const char *q = p; q < dot; q++) {
      if (*q < '0' || *q > '9')
        return 0;
      pid = pid * 10 + (*q - '0');
    }
    p = dot + 1;
  }
  if (!*p)
    return 0;
  for (const char *q = p; *q; q++)
    if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
      return 0;
  char full[8192];
  struct stat sb;
  int k = snprintf(full, sizeof full, "%s/%s", dir, name);
  if (k < 0 || (size_t)k >= sizeof full || lstat(full, &sb) ||
      !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode)))
    return 0;
  if (pid >= 0) {
    /* kill(pid, 0) fails with ESRCH only when no such process exists (EPERM:
     * it exists under another user). */
    if (pid == (long)getpid() || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      return 0;
    return now - sb.st_mtime >= 60;
  }
  return now - sb.st_mtime >= 3600;
}

/* A stale staging directory (an export killed before its renames): its
 * files, then itself. Only one level: eplb stages flat directories, and a
 * directory with anything else in it is left alone. */
static int remove_flat_dir(const char *full) {
  DIR *d = opendir(full);
  if (!d)
    return -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    char f[8448];
    struct stat sb;
    int k = snprintf(f, sizeof f, "%s/%s", full, e->d_name);
    if (k > 0 && (size_t)k < sizeof f && !lstat(f, &sb) && S_ISREG(sb.st_mode))
      unlink(f);
  }
  closedir(d);
  return rmdir(full);
}

void eplb_remove_stale_temporaries(const char *path) {
  if (path)
    eplb__tmp_sweep(path);
}

void eplb__tmp_sweep(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) < sizeof dir)
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else
    return;
  /* "DIR/": the temporaries staged inside DIR itself (".tmp.<pid>.<x>"). */
  size_t baselen = strlen(base);
  DIR *d = baselen || (slash && !slash[1]) ? opendir(dir) : NULL;
  if (!d)
    return; /* best effort: the write itself succeeded */
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, base, baselen) || strncmp(e->d_name + baselen, ".tmp.", 5) ||
        !stale_tmp(dir, e->d_name, baselen, now))
      continue;
    char full[8192];
    int k = snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (k > 0 && (size_t)k < sizeof full && !lstat(full, &sb) &&
        !(S_ISDIR(sb.st_mode) ? remove_flat_dir(full) : unlink(full)))
      eplb__log(EPLB_LOG_INFO, "core", "%s: removed a temporary left by an earlier writer", full);
  }
  closedir(d);
}

eplb_status_t eplb__check_output(const char *path, const char *module) {
  struct stat sb;
  /* stat, never open: opening a FIFO would block until a reader came. A
   * rename would replace a FIFO, a device node or a socket named by mistake
   * with a regular file (a root user's /dev/null among them), so only a
   * regular file, or a link to one, is replaced; a missing target (a
   * dangling link too) is created. */
  if (!path || stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
    return EPLB_OK;
  if (S_ISDIR(sb.st_mode))
    return eplb__error(EPLB_EINVAL, module, "%s is a directory", path);
  return eplb__error(EPLB_EINVAL, module, "%s exists and is not a regular file", path);
}

eplb_status_t eplb__check_input(const char *path, const char *module) {
  struct stat sb;
  if (!path || stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
    return EPLB_OK;
  return eplb__error(EPLB_EIO, module, "%s: not a regular file", path);
}

eplb_status_t eplb__fsync_dir(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return eplb__error(EPLB_EIO, "core", "%s: cannot open directory: %s", dir, strerror(errno));
  int r = fsync(fd);
  int e = errno;
  close(fd);
  /* Some file systems cannot fsync a directory; the rename still happened. */
  if (r != 0 && e != EINVAL && e != EROFS)
    return eplb__error(EPLB_EIO, "core", "%s: fsync failed: %s", dir, strerror(e));
  return EPLB_OK;
}

eplb_status_t eplb__outfile_open(const char *path, eplb__outfile_t *out) {
  memset(out, 0, sizeof *out);
  out->slot = -1;
  eplb_status_t st = eplb__check_output(path, "core");
  if (st)
    return st;
  size_t cap = strlen(path) + 40;
  out->path = eplb__strdup(path);
  out->tmp = eplb__malloc(cap);
  if (!out->path || !out->tmp) {
    st = eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
    goto fail;
  }
  /* The pid in the name tells a later sweep whether its writer still lives. */
  eplb__tmp_name(out->tmp, cap, path, "XXXXXX");
  int fd = eplb__tmp_create(out->tmp, 0, &out->slot);
  if (fd < 0) {
    st = eplb__error(EPLB_EIO, "core", "%s: cannot create: %s", path, strerror(errno));
    goto fail;
  }
  /* mkstemp creates 0600; an output file is an ordinary shared artefact. */
  (void)fchmod(fd, 0644);
  out->f = fdopen(fd, "wb");
  if (!out->f) {
    st = eplb__error(EPLB_EIO, "core", "%s: cannot open: %s", path, strerror(errno));
    close(fd);
    unlink(out->tmp);
    eplb__tmp_unregister(out->slot);
    goto fail;
  }
  return EPLB_OK;
fail:
  eplb__free(out->path);
  eplb__free(out->tmp);
  memset(out, 0, sizeof *out);
  return st;
}

eplb_status_t eplb__outfile_commit(eplb__outfile_t *out) {
  eplb_status_t st = EPLB_OK;
  int failed = fflush(out->f) != 0 || ferror(out->f) || fsync(fileno(out->f)) != 0;
  int err = errno;
  if (fclose(out->f) != 0 && !failed) {
    failed = 1;
    err = errno;
  }
  out->f = NULL;
  /* Checked again: the target may have become a FIFO or a device since. */
  if (!failed && (st = eplb__check_output(out->path, "core")) != EPLB_OK) {
    unlink(out->tmp);
  } else if (!failed && rename(out->tmp, out->path) != 0) {
    failed = 1;
    err = errno;
  }
  if (failed) {
    st = eplb__error(EPLB_EIO, "core", "%s: write failed: %s", out->path, strerror(err));
    unlink(out->tmp);
  } else if (!st) {
    st = eplb__fsync_dir(out->path);
    eplb__tmp_sweep(out->path);
  }
  eplb__tmp_unregister(out->slot);
  eplb__free(out->path);
  eplb__free(out->tmp);
  memset(out, 0, sizeof *out);
  return st;
}

void eplb__outfile_abort(eplb__outfile_t *out) {
  if (out->f) {
    fclose(out->f);
    unlink(out->tmp);
    eplb__tmp_unregister(out->slot);
  }
  eplb__free(out->path);
  eplb__free(out->tmp);
  memset(out, 0, sizeof *out);
}

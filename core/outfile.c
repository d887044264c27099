/* core/outfile.c — atomic output files: written under a temporary name in
 * the target's directory and renamed into place, so that no reader ever sees
 * a partial file at the target path. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
  eplb_status_t st = EPLB_OK;
  memset(out, 0, sizeof *out);
  size_t n = strlen(path);
  out->path = eplb__strdup(path);
  out->tmp = eplb__malloc(n + sizeof ".tmp.XXXXXX");
  if (!out->path || !out->tmp) {
    st = eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
    goto fail;
  }
  memcpy(out->tmp, path, n);
  memcpy(out->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
  int fd = mkstemp(out->tmp);
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
  if (!failed && rename(out->tmp, out->path) != 0) {
    failed = 1;
    err = errno;
  }
  if (failed) {
    st = eplb__error(EPLB_EIO, "core", "%s: write failed: %s", out->path, strerror(err));
    unlink(out->tmp);
  } else {
    st = eplb__fsync_dir(out->path);
  }
  eplb__free(out->path);
  eplb__free(out->tmp);
  memset(out, 0, sizeof *out);
  return st;
}

void eplb__outfile_abort(eplb__outfile_t *out) {
  if (out->f) {
    fclose(out->f);
    unlink(out->tmp);
  }
  eplb__free(out->path);
  eplb__free(out->tmp);
  memset(out, 0, sizeof *out);
}

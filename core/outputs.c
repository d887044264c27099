/* core/outputs.c — outputs committed together (common.h, eplb_outputs_*):
 * a job with several outputs writes each to a temporary and renames them
 * all only once everything has succeeded, so that a job that fails leaves
 * none of them. The CLI's -o, --export, --csv and --plot go through here. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct staged {
  char *path; /* the target, trailing slashes stripped */
  char *tmp;  /* its temporary: a file, or a directory when is_dir */
  int is_dir;
  int live;        /* tmp exists and is ours to remove */
  int slot;        /* tmp in eplb_remove_temporaries' table (-1: none) */
  uint32_t nfiles; /* a staged directory's entries, each registered too, */
  char **files;    /* so that a signal handler removes them without a */
  int *file_slots; /* readdir and a commit knows what to move (NULL: moved) */
  uint32_t capfiles;
} staged_t;

struct eplb_outputs {
  staged_t *v;
  uint32_t n, cap;
};

/* "dir/" names the directory "dir": its temporary is a sibling. */
static void strip_slashes(char *p) {
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/')
    p[--n] = 0;
}

eplb_status_t eplb_outputs_check(const char *path, int is_dir) {
  char dir[4096];
  struct stat sb;
  if (!path || !*path)
    return eplb__error(EPLB_EINVAL, "core", "empty path");
  if (strlen(path) >= sizeof dir - 64)
    return eplb__error(EPLB_EINVAL, "core", "path too long");
  snprintf(dir, sizeof dir, "%s", path);
  strip_slashes(dir);
  if (!stat(dir, &sb)) {
    if (!is_dir && S_ISDIR(sb.st_mode))
      return eplb__error(EPLB_EINVAL, "core", "%s is a directory", path);
    if (is_dir && !S_ISDIR(sb.st_mode))
      return eplb__error(EPLB_EINVAL, "core", "%s exists and is not a directory", path);
  }
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = 0;
  else if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
    return eplb__error(EPLB_EINVAL, "core", "%s: directory %s does not exist", path, dir);
  if (access(dir, W_OK | X_OK))
    return eplb__error(EPLB_EINVAL, "core", "%s: directory %s is not writable", path, dir);
  return EPLB_OK;
}

eplb_status_t eplb_outputs_create(eplb_outputs_t **out) {
  if (!out)
    return eplb__error(EPLB_EINVAL, "core", "outputs: NULL argument");
  *out = eplb__calloc(1, sizeof **out);
  return *out ? EPLB_OK : eplb__error(EPLB_ENOMEM, "core", "outputs: out of memory");
}

/* Removes what is left of one staged output (its files, then itself) and
 * frees it. */
static void staged_free(staged_t *s) {
  for (uint32_t k = 0; k < s->nfiles; k++) {
    if (s->files[k]) {
      char p[8448];
      snprintf(p, sizeof p, "%s/%s", s->tmp, s->files[k]);
      unlink(p);
    }
    eplb__tmp_unregister(s->file_slots[k]);
    eplb__free(s->files[k]);
  }
  if (s->live && s->is_dir)
    rmdir(s->tmp);
  else if (s->live)
    unlink(s->tmp);
  eplb__tmp_unregister(s->slot);
  eplb__free(s->files);
  eplb__free(s->file_slots);
  eplb__free(s->path);
  eplb__free(s->tmp);
  memset(s, 0, sizeof *s);
}

static void discard_all(eplb_outputs_t *o) {
  for (uint32_t i = 0; i < o->n; i++)
    staged_free(&o->v[i]);
  o->n = 0;
}

void eplb_outputs_destroy(eplb_outputs_t *o) {
  if (!o)
    return;
  discard_all(o);
  eplb__free(o->v);
  eplb__free(o);
}

/* Creates s->tmp (mkstemp or mkdtemp, in the library's temporary-name
 * pattern, so that the sweep after a later write of the same target
 * removes what a SIGKILL left). */
static eplb_status_t make_tmp(staged_t *s, const char *path) {
  size_t cap = strlen(s->path) + 48;
  struct stat sb;
  if (!(s->tmp = eplb__malloc(cap)))
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
  /* A directory that exists is staged inside itself: its files then move
   * within one file system even when it is a link to another. */
  if (s->is_dir && !stat(s->path, &sb) && S_ISDIR(sb.st_mode)) {
    snprintf(s->tmp, cap, "%s/", s->path);
    char *inside = eplb__strdup(s->tmp);
    int bad = !inside || eplb__tmp_name(s->tmp, cap, inside, "XXXXXX");
    eplb__free(inside);
    if (bad)
      return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
  } else {
    eplb__tmp_name(s->tmp, cap, s->path, "XXXXXX");
  }
  int ok;
  if (s->is_dir) {
    ok = mkdtemp(s->tmp) != NULL;
  } else {
    int fd = mkstemp(s->tmp);
    /* mkstemp creates 0600; an output is an ordinary shared artefact. */
    ok = fd >= 0 && !fchmod(fd, 0644) && !close(fd);
  }
  if (!ok)
    return eplb__error(EPLB_EIO, "core", "%s: cannot create a temporary: %s", path,
                       strerror(errno));
  s->live = 1;
  s->slot = eplb__tmp_register(s->tmp);
  return EPLB_OK;
}

eplb_status_t eplb_outputs_stage(eplb_outputs_t *o, const char *path, int is_dir,
                                 const char **tmp) {
  if (!o || !tmp)
    return eplb__error(EPLB_EINVAL, "core", "outputs stage: NULL argument");
  *tmp = NULL;
  eplb_status_t st = eplb_outputs_check(path, is_dir);
  if (st)
    return st;
  if (o->n == o->cap) {
    uint32_t cap = o->cap ? 2 * o->cap : 4;
    staged_t *v = eplb__realloc_array(o->v, cap, sizeof *v);
    if (!v)
      return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
    o->v = v;
    o->cap = cap;
  }
  staged_t *s = &o->v[o->n];
  memset(s, 0, sizeof *s);
  s->slot = -1;
  s->is_dir = is_dir != 0;
  if (!(s->path = eplb__strdup(path))) {
    staged_free(s);
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
  }
  strip_slashes(s->path);
  if ((st = make_tmp(s, path))) {
    staged_free(s);
    return st;
  }
  o->n++;
  *tmp = s->tmp;
  return EPLB_OK;
}

static staged_t *find_dir(eplb_outputs_t *o, const char *tmp) {
  for (uint32_t i = 0; i < o->n; i++)
    if (o->v[i].is_dir && !strcmp(o->v[i].tmp, tmp))
      return &o->v[i];
  return NULL;
}

static eplb_status_t add_file(staged_t *s, const char *name) {
  for (uint32_t k = 0; k < s->nfiles; k++)
    if (s->files[k] && !strcmp(s->files[k], name))
      return EPLB_OK;
  if (s->nfiles == s->capfiles) {
    uint32_t cap = s->capfiles ? 2 * s->capfiles : 4;
    char **f = eplb__realloc_array(s->files, cap, sizeof *f);
    if (f)
      s->files = f;
    int *fs = f ? eplb__realloc_array(s->file_slots, cap, sizeof *fs) : NULL;
    if (!fs)
      return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", s->path);
    s->file_slots = fs;
    s->capfiles = cap;
  }
  char full[8448];
  snprintf(full, sizeof full, "%s/%s", s->tmp, name);
  if (!(s->files[s->nfiles] = eplb__strdup(name)))
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", s->path);
  s->file_slots[s->nfiles++] = eplb__tmp_register(full);
  return EPLB_OK;
}

eplb_status_t eplb_outputs_expect(eplb_outputs_t *o, const char *tmp, const char *name) {
  staged_t *s = o && tmp && name ? find_dir(o, tmp) : NULL;
  if (!s || !*name || strchr(name, '/'))
    return eplb__error(EPLB_EINVAL, "core", "outputs expect: not a staged directory or a name");
  return add_file(s, name);
}

/* Records every entry of a staged directory, also those nobody announced. */
static eplb_status_t list_dir(staged_t *s) {
  DIR *d = opendir(s->tmp);
  if (!d)
    return eplb__error(EPLB_EIO, "core", "%s: cannot list the staged files", s->path);
  struct dirent *e;
  eplb_status_t st = EPLB_OK;
  while (!st && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      st = add_file(s, e->d_name);
  closedir(d);
  return st;
}

/* What was moved into place is no longer a temporary of ours. */
static void forget_file(staged_t *s, uint32_t k) {
  eplb__tmp_unregister(s->file_slots[k]);
  s->file_slots[k] = -1;
  eplb__free(s->files[k]);
  s->files[k] = NULL;
}

static void forget_tmp(staged_t *s) {
  eplb__tmp_unregister(s->slot);
  s->slot = -1;
  s->live = 0;
}

/* A staged directory into a directory that exists: file by file. */
static eplb_status_t move_files(staged_t *s) {
  for (uint32_t k = 0; k < s->nfiles; k++) {
    char from[8448], to[8448];
    snprintf(from, sizeof from, "%s/%s", s->tmp, s->files[k]);
    snprintf(to, sizeof to, "%s/%s", s->path, s->files[k]);
    if (rename(from, to))
      return eplb__error(EPLB_EIO, "core", "%s: cannot write: %s", to, strerror(errno));
    forget_file(s, k);
  }
  rmdir(s->tmp);
  forget_tmp(s);
  /* Staging of killed runs: beside the directory and inside it. */
  char inside[8448];
  snprintf(inside, sizeof inside, "%s/", s->path);
  eplb__tmp_sweep(s->path);
  eplb__tmp_sweep(inside);
  return EPLB_OK;
}

static eplb_status_t commit_one(staged_t *s) {
  struct stat sb;
  if (s->is_dir && !stat(s->path, &sb))
    return move_files(s);
  /* A file, or a directory that does not exist yet: one rename. */
  if (rename(s->tmp, s->path)) {
    int e = errno;
    return eplb__error(e == EISDIR || e == ENOTDIR || e == ENOTEMPTY ? EPLB_EINVAL : EPLB_EIO,
                       "core", "%s: cannot write: %s", s->path, strerror(e));
  }
  for (uint32_t k = 0; k < s->nfiles; k++)
    forget_file(s, k);
  forget_tmp(s);
  eplb__tmp_sweep(s->path);
  return EPLB_OK;
}

eplb_status_t eplb_outputs_commit(eplb_outputs_t *o) {
  if (!o)
    return eplb__error(EPLB_EINVAL, "core", "outputs commit: NULL argument");
  eplb_status_t st = EPLB_OK;
  for (uint32_t i = 0; i < o->n && !st; i++)
    if (o->v[i].is_dir)
      st = list_dir(&o->v[i]);
  for (uint32_t i = 0; i < o->n && !st; i++)
    st = commit_one(&o->v[i]);
  discard_all(o);
  return st;
}

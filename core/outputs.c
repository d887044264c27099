/* core/outputs.c — outputs committed together (common.h, eplb_outputs_*):
 * a job with several outputs writes each to a temporary and renames them
 * all only once everything has succeeded, so that a job that fails leaves
 * none of them. The CLI's -o, --export, --csv and --plot go through here. */
#include "core/core.h"
#include "eplb/common_tooling.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
  uint32_t n;
  size_t cap;
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
    if (!is_dir && !S_ISREG(sb.st_mode))
      return eplb__error(EPLB_EINVAL, "core", "%s exists and is not a regular file", path);
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
  int fd = eplb__tmp_create(s->tmp, s->is_dir, &s->slot);
  s->live = fd >= 0; /* created: removed whatever follows */
  /* mkstemp creates 0600; an output is an ordinary shared artefact. */
  int ok = fd >= 0;
  if (ok && !s->is_dir) {
    ok = !fchmod(fd, 0644);
    ok = !close(fd) && ok;
  }
  if (!ok)
    return eplb__error(EPLB_EIO, "core", "%s: cannot create a temporary: %s", path,
                       strerror(errno));
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
  staged_t *grown = eplb__room_for_one(o->v, &o->cap, o->n, sizeof *grown, 4);
  if (!grown)
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", path);
  o->v = grown;
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

/* One rename of a commit, kept until the commit ends so that a failure can
 * put everything back: `to` held `bak`'s content before (a hard link made
 * just before the rename; NULL: `to` did not exist or the file system
 * cannot link), and `from` is where the staged output was. */
typedef struct {
  char *to, *from, *bak;
  int existed;  /* to existed: without bak, the new output stays on a failure */
  int bak_slot; /* bak in eplb_remove_temporaries' table (-1: none) */
} moved_t;

typedef struct {
  moved_t *v;
  size_t n, cap;
} journal_t;

static void moved_free(moved_t *m) {
  eplb__tmp_unregister(m->bak_slot);
  eplb__free(m->to);
  eplb__free(m->from);
  eplb__free(m->bak);
}

/* Renames from onto to, journalled (after a hard link of what to held). A
 * file never replaces a FIFO, a device or a socket (stat: opening a FIFO
 * blocks), also not one in an export directory, which nobody checked
 * before; a directory is left to rename, which refuses it. */
static eplb_status_t journal_rename(journal_t *j, const char *from, const char *to, int file) {
  struct stat ts;
  if (file && !stat(to, &ts) && !S_ISREG(ts.st_mode) && !S_ISDIR(ts.st_mode))
    return eplb__error(EPLB_EINVAL, "core", "%s: cannot write: it exists and is not a regular file",
                       to);
  moved_t *grown = eplb__room_for_one(j->v, &j->cap, j->n, sizeof *grown, 8);
  if (!grown)
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", to);
  j->v = grown;
  moved_t *m = &j->v[j->n];
  *m = (moved_t){.to = eplb__strdup(to), .from = eplb__strdup(from), .bak_slot = -1};
  size_t cap = strlen(to) + 48;
  struct stat sb;
  m->existed = !lstat(to, &sb);
  if (m->to && m->from && m->existed && !S_ISDIR(sb.st_mode) && (m->bak = eplb__malloc(cap))) {
    char suffix[24];
    snprintf(suffix, sizeof suffix, "old%zu", j->n);
    eplb__tmp_name(m->bak, cap, to, suffix);
    unlink(m->bak); /* a dead run's: the name has our pid */
    /* linkat without AT_SYMLINK_FOLLOW: a symbolic link is kept as one. */
    if (linkat(AT_FDCWD, to, AT_FDCWD, m->bak, 0)) {
      eplb__free(m->bak);
      m->bak = NULL;
    } else {
      m->bak_slot = eplb__tmp_register(m->bak);
    }
  }
  if (!m->to || !m->from) {
    moved_free(m);
    return eplb__error(EPLB_ENOMEM, "core", "%s: out of memory", to);
  }
  if (rename(from, to)) {
    int e = errno;
    if (m->bak)
      unlink(m->bak);
    moved_free(m);
    return eplb__error(e == EISDIR || e == ENOTDIR || e == ENOTEMPTY ? EPLB_EINVAL : EPLB_EIO,
                       "core", "%s: cannot write: %s", to, strerror(e));
  }
  j->n++;
  return EPLB_OK;
}

/* A failed commit: newest first, each target gets its previous content
 * back (one rename over the new output: the path never goes missing for a
 * reader) or, new, goes back where it was staged. Returns a target that
 * keeps the new output (no hard link could be made of its old one), or
 * NULL. */
static const char *journal_undo(journal_t *j) {
  const char *kept = NULL;
  for (size_t i = j->n; i-- > 0;) {
    moved_t *m = &j->v[i];
    if (m->bak)
      rename(m->bak, m->to);
    else if (!m->existed)
      rename(m->to, m->from);
    else
      kept = m->to;
  }
  return kept;
}

static void journal_end(journal_t *j, int committed) {
  for (size_t i = 0; i < j->n; i++) {
    if (committed && j->v[i].bak)
      unlink(j->v[i].bak);
    moved_free(&j->v[i]);
  }
  eplb__free(j->v);
}

/* Renames one staged output into place: a file, or a directory that does
 * not exist yet, in one rename; a staged directory whose target exists
 * file by file into it. */
static eplb_status_t commit_one(staged_t *s, journal_t *j) {
  struct stat sb;
  if (!s->is_dir || stat(s->path, &sb))
    return journal_rename(j, s->tmp, s->path, !s->is_dir);
  eplb_status_t st = EPLB_OK;
  for (uint32_t k = 0; k < s->nfiles && !st; k++) {
    char from[8448], to[8448];
    snprintf(from, sizeof from, "%s/%s", s->tmp, s->files[k]);
    snprintf(to, sizeof to, "%s/%s", s->path, s->files[k]);
    st = journal_rename(j, from, to, 1);
  }
  return st;
}

/* Everything is in place: nothing staged is a temporary of ours any more;
 * the targets' stale temporaries (killed runs') are swept. */
static void committed(staged_t *s) {
  for (uint32_t k = 0; k < s->nfiles; k++)
    forget_file(s, k);
  struct stat sb;
  if (s->is_dir && !stat(s->tmp, &sb))
    rmdir(s->tmp); /* files moved into a directory that existed */
  forget_tmp(s);
  eplb__tmp_sweep(s->path);
  if (s->is_dir) {
    char inside[8448];
    snprintf(inside, sizeof inside, "%s/", s->path);
    eplb__tmp_sweep(inside);
  }
}

eplb_status_t eplb_outputs_commit(eplb_outputs_t *o) {
  if (!o)
    return eplb__error(EPLB_EINVAL, "core", "outputs commit: NULL argument");
  eplb_status_t st = EPLB_OK;
  journal_t j = {0};
  for (uint32_t i = 0; i < o->n && !st; i++)
    if (o->v[i].is_dir)
      st = list_dir(&o->v[i]);
  for (uint32_t i = 0; i < o->n && !st; i++)
    st = commit_one(&o->v[i], &j);
  const char *kept = st ? journal_undo(&j) : NULL;
  if (kept) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
    st = eplb__error(st, "core", "%s (%s keeps the new output: no hard link of the old one)",
                     detail, kept);
  }
  for (uint32_t i = 0; i < o->n && !st; i++)
    committed(&o->v[i]);
  journal_end(&j, st == EPLB_OK);
  discard_all(o);
  return st;
}

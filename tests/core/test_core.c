#include "core/core.h"
#include "eplb/common_tooling.h"
#include "eplb/kernels.h" /* eplb_cuda_device_count */
#include "eplb_config.h"
#include "tests/support.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

START_TEST(status_strings_are_distinct_and_named) {
  for (int s = 0; s >= EPLB_EDEVICE; s--) {
    const char *str = eplb_status_str((eplb_status_t)s);
    const char *name = eplb_status_name((eplb_status_t)s);
    ck_assert_ptr_nonnull(str);
    ck_assert_str_ne(str, "unknown status");
    ck_assert_str_ne(name, "EPLB_UNKNOWN");
    for (int t = s + 1; t <= 0; t++)
      ck_assert_str_ne(str, eplb_status_str((eplb_status_t)t));
  }
  ck_assert_str_eq(eplb_status_str((eplb_status_t)-999), "unknown status");
  ck_assert_str_eq(eplb_status_name(EPLB_ECORRUPT), "EPLB_ECORRUPT");
}
END_TEST

struct logged {
  int n;
  eplb_log_level_t level;
  char module[32];
  char msg[256];
};

static void capture(eplb_log_level_t level, const char *module, const char *msg, void *user) {
  struct logged *l = user;
  l->n++;
  l->level = level;
  snprintf(l->module, sizeof l->module, "%s", module);
  snprintf(l->msg, sizeof l->msg, "%s", msg);
}

START_TEST(errors_set_detail_and_log_at_debug) {
  struct logged l = {0};
  eplb_log_set_callback(capture, &l, EPLB_LOG_DEBUG);
  eplb_status_t s = eplb__error(EPLB_EFORMAT, "traces", "%s: bad magic", "x.eplbt");
  ck_assert_int_eq(s, EPLB_EFORMAT);
  ck_assert_str_eq(eplb_error_detail(), "x.eplbt: bad magic");
  ck_assert_int_eq(l.n, 1);
  ck_assert_int_eq(l.level, EPLB_LOG_DEBUG);
  ck_assert_str_eq(l.module, "traces");
  ck_assert_ptr_nonnull(strstr(l.msg, "EPLB_EFORMAT"));
  /* Levels above the maximum are dropped. */
  eplb_log_set_callback(capture, &l, EPLB_LOG_WARN);
  eplb__log(EPLB_LOG_INFO, "core", "dropped");
  ck_assert_int_eq(l.n, 1);
  eplb__log(EPLB_LOG_WARN, "core", "kept %d", 7);
  ck_assert_int_eq(l.n, 2);
  ck_assert_str_eq(l.msg, "kept 7");
  eplb_error_clear();
  ck_assert_str_eq(eplb_error_detail(), "");
  eplb_log_set_callback(NULL, NULL, EPLB_LOG_ERROR);
}
END_TEST

START_TEST(allocator_hooks_are_used_and_can_fail) {
  eplb_allocator_t bad = {0};
  ck_assert_int_eq(eplb_allocator_set(&bad), EPLB_EINVAL);
  eplb_test_alloc_install();
  eplb_test_alloc_reset();
  void *p = eplb__malloc(16);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(eplb_test_alloc_count(), 1);
  eplb__free(p);
  eplb_test_alloc_fail_after(0);
  ck_assert_ptr_null(eplb__malloc(16));
  ck_assert_ptr_null(eplb__calloc(2, 8));
  eplb_test_alloc_reset();
  /* Overflowing array sizes fail without calling the allocator. */
  ck_assert_ptr_null(eplb__malloc_array(SIZE_MAX / 2, 4));
  ck_assert_int_eq(eplb_test_alloc_count(), 0);
  char *d = eplb__strdup("abc");
  ck_assert_str_eq(d, "abc");
  eplb__free(d);
  ck_assert_int_eq(eplb_allocator_set(NULL), EPLB_OK);
}
END_TEST

START_TEST(features_match_build_and_cuda_query_is_safe) {
  ck_assert_int_eq(eplb_feature_enabled(EPLB_FEATURE_CUDA), EPLB_HAVE_CUDA);
  ck_assert_int_eq(eplb_feature_enabled(EPLB_FEATURE_MPI), EPLB_HAVE_MPI);
  ck_assert_int_eq(eplb_feature_enabled((eplb_feature_t)42), 0);
  ck_assert_str_eq(eplb_version(), EPLB_VERSION);
  /* The headers' version macros are the build's (meson.build's project version). */
  char v[32];
  snprintf(v, sizeof v, "%d.%d.%d", EPLB_VERSION_MAJOR, EPLB_VERSION_MINOR, EPLB_VERSION_PATCH);
  ck_assert_str_eq(v, eplb_version());
  ck_assert_int_eq(eplb_version_number(), EPLB_VERSION_NUMBER);
  ck_assert(EPLB_VERSION_AT_LEAST(0, 1, 0) && !EPLB_VERSION_AT_LEAST(EPLB_VERSION_MAJOR + 1, 0, 0));
  int n = -1;
  eplb_status_t s = eplb_cuda_device_count(&n);
  if (!EPLB_HAVE_CUDA)
    ck_assert_int_eq(s, EPLB_EUNSUPPORTED);
  else
    ck_assert(s == EPLB_OK || s == EPLB_ENODEVICE);
  ck_assert(s == EPLB_OK ? n >= 1 : n == 0);
  ck_assert_int_eq(eplb_cuda_device_count(NULL), EPLB_EINVAL);
}
END_TEST

/* Issue 22 row 5: the temporaries of outputs being written are what a
 * signal handler removes; after a rename the stale ones of gone writers go. */
START_TEST(temporaries_removed_on_signal_and_swept) {
  char path[4096];
  snprintf(path, sizeof path, "%s", eplb_test_tmp("out.txt"));
  eplb__outfile_t a, b;
  ck_assert_int_eq(eplb__outfile_open(path, &a), EPLB_OK);
  ck_assert_int_eq(eplb__outfile_open(path, &b), EPLB_OK);
  char tmp_a[4200];
  snprintf(tmp_a, sizeof tmp_a, "%s", a.tmp);
  ck_assert(eplb_test_exists(tmp_a) && eplb_test_exists(b.tmp));
  /* "<path>.tmp.<pid>.<suffix>": the sweep tells its writer by the pid. */
  char prefix[4200];
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", path, (long)getpid());
  ck_assert(!strncmp(a.tmp, prefix, strlen(prefix)));
  eplb_remove_temporaries();
  ck_assert(!eplb_test_exists(tmp_a) && !eplb_test_exists(b.tmp));
  fputs("x", a.f);
  ck_assert_int_eq(eplb__outfile_commit(&a), EPLB_EIO); /* its file is gone */
  eplb__outfile_abort(&b);
  ck_assert(!eplb_test_exists(path));
  /* A dead writer's temporary unwritten for a minute goes; this process's
   * own and a fresh one stay. */
  char dead[4200], mine[4200], fresh[4200];
  long pid = 999999;
  while (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
    pid--;
  snprintf(dead, sizeof dead, "%s.tmp.%ld.abc123", path, pid);
  snprintf(fresh, sizeof fresh, "%s.tmp.%ld.def456", path, pid);
  snprintf(mine, sizeof mine, "%s.tmp.%ld.ghi789", path, (long)getpid());
  const char *old[] = {dead, mine};
  for (int i = 0; i < 2; i++) {
    eplb_test_write_file(old[i], "x", 1);
    struct timespec t[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, old[i], t, 0), 0);
  }
  eplb_test_write_file(fresh, "x", 1);
  ck_assert_int_eq(eplb__outfile_open(path, &a), EPLB_OK);
  ck_assert_int_eq(eplb__outfile_commit(&a), EPLB_OK);
  ck_assert(eplb_test_exists(path));
  ck_assert(!eplb_test_exists(dead));
  ck_assert(eplb_test_exists(mine) && eplb_test_exists(fresh));
}
END_TEST

/* Issue 19: the CLI's staged outputs as a library job. Nothing appears at a
 * target before the commit; a set destroyed uncommitted, or whose
 * temporaries a signal handler removed, leaves nothing; a directory target
 * that exists gets the staged files moved into it. */
START_TEST(outputs_commit_together_or_not_at_all) {
  char dir[4096], file[4200], sub[4200], newdir[4200];
  snprintf(dir, sizeof dir, "%s", eplb_test_tmp("outs"));
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  snprintf(file, sizeof file, "%s/plan.json", dir);
  snprintf(sub, sizeof sub, "%s/export", dir);
  snprintf(newdir, sizeof newdir, "%s/fresh/", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  /* Checks name the path, never an option. */
  ck_assert_int_eq(eplb_outputs_check(sub, 0), EPLB_EINVAL);
  ck_assert_str_eq(strrchr(eplb_error_detail(), '/'), "/export is a directory");
  ck_assert_int_eq(eplb_outputs_check(file, 1), EPLB_OK);
  char missing[4300];
  snprintf(missing, sizeof missing, "%s/no/x.csv", dir);
  ck_assert_int_eq(eplb_outputs_check(missing, 0), EPLB_EINVAL);
  ck_assert(strstr(eplb_error_detail(), "/no does not exist") != NULL);
  ck_assert_int_eq(eplb_outputs_check("", 0), EPLB_EINVAL);

  eplb_outputs_t *o = NULL;
  const char *tf = NULL, *td = NULL, *tn = NULL;
  ck_assert_int_eq(eplb_outputs_create(&o), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, file, 0, &tf), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &td), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, newdir, 1, &tn), EPLB_OK);
  const char *tx = "";
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 0, &tx), EPLB_EINVAL); /* a directory */
  ck_assert(tx == NULL);
  char prefix[4300];
  snprintf(prefix, sizeof prefix, "%s/.tmp.%ld.", sub, (long)getpid());
  ck_assert(!strncmp(td, prefix, strlen(prefix))); /* inside the existing directory */
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", file, (long)getpid());
  ck_assert(!strncmp(tf, prefix, strlen(prefix)));
  eplb_test_write_file(tf, "plan", 4);
  ck_assert_int_eq(eplb_outputs_expect(o, td, "a.csv"), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_expect(o, tf, "a.csv"), EPLB_EINVAL); /* not a directory */
  eplb_test_write_file(eplb_test_path(td, "a.csv"), "a", 1);
  eplb_test_write_file(eplb_test_path(td, "b.csv"), "b", 1); /* not announced */
  eplb_test_write_file(eplb_test_path(tn, "c.csv"), "c", 1);
  ck_assert(!eplb_test_exists(file) && !eplb_test_exists(eplb_test_path(sub, "a.csv")));
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_OK);
  ck_assert(eplb_test_exists(file) && !eplb_test_exists(tf));
  ck_assert(eplb_test_exists(eplb_test_path(sub, "a.csv")));
  ck_assert(eplb_test_exists(eplb_test_path(sub, "b.csv")) && !eplb_test_exists(td));
  ck_assert(eplb_test_exists(eplb_test_path(newdir, "c.csv")));
  struct stat sb;
  ck_assert(!stat(file, &sb) && (sb.st_mode & 0777) == 0644);

  /* Not committed: destroy removes the temporaries, the targets stay as they were. */
  char tmp_copy[4300], dir_copy[4300];
  ck_assert_int_eq(eplb_outputs_stage(o, file, 0, &tf), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &td), EPLB_OK);
  snprintf(tmp_copy, sizeof tmp_copy, "%s", tf);
  snprintf(dir_copy, sizeof dir_copy, "%s", td);
  eplb_test_write_file(tf, "new", 3);
  eplb_outputs_destroy(o);
  ck_assert(!eplb_test_exists(tmp_copy) && !eplb_test_exists(dir_copy));
  size_t len = 0;
  char *back = eplb_test_read_file(file, &len);
  ck_assert(len == 4 && !memcmp(back, "plan", 4));
  free(back);

  /* A signal handler's eplb_remove_temporaries empties a staged directory
   * by its announced files and removes it. */
  ck_assert_int_eq(eplb_outputs_create(&o), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &td), EPLB_OK);
  snprintf(dir_copy, sizeof dir_copy, "%s", td);
  ck_assert_int_eq(eplb_outputs_expect(o, td, "x.csv"), EPLB_OK);
  eplb_test_write_file(eplb_test_path(td, "x.csv"), "x", 1);
  eplb_remove_temporaries();
  ck_assert(!eplb_test_exists(dir_copy));
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_EIO); /* nothing left to list */
  ck_assert(strstr(eplb_error_detail(), "cannot list the staged files") != NULL);

  /* A file target that became a non-empty directory: EINVAL, nothing left. */
  char blocked[4300];
  snprintf(blocked, sizeof blocked, "%s/blocked", dir);
  ck_assert_int_eq(eplb_outputs_stage(o, blocked, 0, &tf), EPLB_OK);
  snprintf(tmp_copy, sizeof tmp_copy, "%s", tf);
  ck_assert_int_eq(mkdir(blocked, 0755), 0);
  eplb_test_write_file(eplb_test_path(blocked, "y"), "y", 1);
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_EINVAL);
  ck_assert(strstr(eplb_error_detail(), "blocked: cannot write: ") != NULL);
  ck_assert(!eplb_test_exists(tmp_copy));
  eplb_outputs_destroy(o);
  eplb_outputs_destroy(NULL);
}
END_TEST

/* Entries of dir named like a temporary of ours (staging or backup). */
static int tmp_entries(const char *dir) {
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  if (d)
    closedir(d);
  return d ? n : -1;
}

static int has_content(const char *path, const char *want) {
  size_t len = 0;
  char *got = eplb_test_read_file(path, &len);
  int ok = got && len == strlen(want) && !memcmp(got, want, len);
  free(got);
  return ok;
}

/* A commit that fails midway puts back every output it had renamed: files
 * that existed get their old content, new files and a new directory go, a
 * directory that existed gets its old files back and loses the new ones;
 * no temporary (staging or backup) is left. */
START_TEST(outputs_failed_commit_puts_everything_back) {
  char dir[4096], old[4200], fresh[4200], sub[4200], newdir[4200], blocked[4200];
  snprintf(dir, sizeof dir, "%s", eplb_test_tmp("undo"));
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  snprintf(old, sizeof old, "%s/plan.json", dir);
  snprintf(fresh, sizeof fresh, "%s/steps.csv", dir);
  snprintf(sub, sizeof sub, "%s/export", dir);
  snprintf(newdir, sizeof newdir, "%s/plots", dir);
  snprintf(blocked, sizeof blocked, "%s/zz-last", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  eplb_test_write_file(old, "old plan", 8);
  eplb_test_write_file(eplb_test_path(sub, "a.csv"), "old a", 5);
  eplb_outputs_t *o = NULL;
  const char *t1, *t2, *t3, *t4, *t5;
  ck_assert_int_eq(eplb_outputs_create(&o), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, old, 0, &t1), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, fresh, 0, &t2), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &t3), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, newdir, 1, &t4), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, blocked, 0, &t5), EPLB_OK);
  eplb_test_write_file(t1, "new plan", 8);
  eplb_test_write_file(t2, "steps", 5);
  eplb_test_write_file(eplb_test_path(t3, "a.csv"), "new a", 5);
  eplb_test_write_file(eplb_test_path(t3, "b.csv"), "new b", 5);
  eplb_test_write_file(eplb_test_path(t4, "p.png"), "png", 3);
  /* The last target becomes a non-empty directory after it was checked. */
  ck_assert_int_eq(mkdir(blocked, 0755), 0);
  eplb_test_write_file(eplb_test_path(blocked, "y"), "y", 1);
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_EINVAL);
  ck_assert(has_content(old, "old plan"));
  ck_assert(!eplb_test_exists(fresh) && !eplb_test_exists(newdir));
  ck_assert(has_content(eplb_test_path(sub, "a.csv"), "old a"));
  ck_assert(!eplb_test_exists(eplb_test_path(sub, "b.csv")));
  ck_assert(has_content(eplb_test_path(blocked, "y"), "y"));
  ck_assert_int_eq(tmp_entries(dir) + tmp_entries(sub), 0);
  /* Committed, a set replaces the old content and leaves no backup. */
  ck_assert_int_eq(eplb_outputs_stage(o, old, 0, &t1), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &t3), EPLB_OK);
  eplb_test_write_file(t1, "new plan", 8);
  eplb_test_write_file(eplb_test_path(t3, "a.csv"), "new a", 5);
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_OK);
  ck_assert(has_content(old, "new plan") && has_content(eplb_test_path(sub, "a.csv"), "new a"));
  ck_assert_int_eq(tmp_entries(dir) + tmp_entries(sub), 0);
  eplb_outputs_destroy(o);
}
END_TEST

/* Issue 33, N1: a FIFO (or a device, a socket) is never an output: refused
 * by the check, by an outfile and at the commit (a target that became one
 * after it was staged, an export file), and left as it was. stat, not open:
 * none of these blocks on the FIFO. */
START_TEST(outputs_refuse_fifos) {
  char dir[4096], fifo[4200], link[4200], late[4200], sub[4200];
  snprintf(dir, sizeof dir, "%s", eplb_test_tmp("fifo"));
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  snprintf(fifo, sizeof fifo, "%s/plan.json", dir);
  snprintf(link, sizeof link, "%s/link.json", dir);
  snprintf(late, sizeof late, "%s/late.json", dir);
  snprintf(sub, sizeof sub, "%s/export", dir);
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  ck_assert_int_eq(symlink(fifo, link), 0);
  for (int i = 0; i < 2; i++) {
    const char *t = i ? link : fifo;
    ck_assert_int_eq(eplb_outputs_check(t, 0), EPLB_EINVAL);
    ck_assert(strstr(eplb_error_detail(), "exists and is not a regular file") != NULL);
    eplb__outfile_t of;
    ck_assert_int_eq(eplb__outfile_open(t, &of), EPLB_EINVAL);
  }
  eplb_outputs_t *o = NULL;
  const char *tf = NULL, *td = NULL;
  ck_assert_int_eq(eplb_outputs_create(&o), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, fifo, 0, &tf), EPLB_EINVAL);
  /* Targets that turn into FIFOs after the check. */
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  ck_assert_int_eq(eplb_outputs_stage(o, late, 0, &tf), EPLB_OK);
  ck_assert_int_eq(eplb_outputs_stage(o, sub, 1, &td), EPLB_OK);
  eplb_test_write_file(tf, "plan", 4);
  eplb_test_write_file(eplb_test_path(td, "a.csv"), "a", 1);
  ck_assert_int_eq(mkfifo(eplb_test_path(sub, "a.csv"), 0644), 0);
  ck_assert_int_eq(eplb_outputs_commit(o), EPLB_EINVAL);
  ck_assert(
      strstr(eplb_error_detail(), "a.csv: cannot write: it exists and is not a regular file"));
  struct stat sb;
  ck_assert(!lstat(eplb_test_path(sub, "a.csv"), &sb) && S_ISFIFO(sb.st_mode));
  ck_assert(!eplb_test_exists(late)); /* put back: none of the outputs is written */
  eplb__outfile_t of;
  ck_assert_int_eq(eplb__outfile_open(late, &of), EPLB_OK);
  ck_assert_int_eq(mkfifo(late, 0644), 0);
  ck_assert_int_eq(eplb__outfile_commit(&of), EPLB_EINVAL);
  ck_assert(!lstat(late, &sb) && S_ISFIFO(sb.st_mode));
  ck_assert(!lstat(fifo, &sb) && S_ISFIFO(sb.st_mode));
  ck_assert_int_eq(tmp_entries(dir) + tmp_entries(sub), 0);
  eplb_outputs_destroy(o);
}
END_TEST

int main(void) {
  Suite *s = suite_create("core");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, status_strings_are_distinct_and_named);
  tcase_add_test(tc, errors_set_detail_and_log_at_debug);
  tcase_add_test(tc, allocator_hooks_are_used_and_can_fail);
  tcase_add_test(tc, features_match_build_and_cuda_query_is_safe);
  tcase_add_test(tc, temporaries_removed_on_signal_and_swept);
  tcase_add_test(tc, outputs_commit_together_or_not_at_all);
  tcase_add_test(tc, outputs_failed_commit_puts_everything_back);
  tcase_add_test(tc, outputs_refuse_fifos);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}

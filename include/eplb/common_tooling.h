/* eplb/common_tooling.h — outputs committed together, for the project's tools
 * (`eplb`'s -o, --export, --csv and --plot): the staging that `eplb` and its
 * tests use. Not installed: an embedding stack writes its own files (the
 * library's own writers are atomic already; eplb_remove_temporaries stays in
 * eplb/common.h). */
#ifndef EPLB_COMMON_TOOLING_H
#define EPLB_COMMON_TOOLING_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- outputs committed together ----------------------------------------
 * A job with several outputs (a plan file, an export directory, a CSV, a
 * plot) writes each to a temporary and renames them all only once
 * everything has succeeded, so that a job that fails leaves none of them
 * and no reader ever sees a partial file. What `eplb` does for -o,
 * --export, --csv and --plot. Temporaries are named as the library's own
 * ("<target>.tmp.<pid>.<6 letters/digits>"; a directory target that exists
 * is staged inside itself, "<target>/.tmp.<pid>.<x>", so that its files
 * move within one file system) and are registered with
 * eplb_remove_temporaries while they exist (at most 64 temporaries of a
 * process at once are; beyond, one is only not removed on a signal).
 * Threads: a set is used by one thread at a time; distinct sets may be used
 * concurrently; eplb_remove_temporaries may run in a signal handler at any
 * moment. */
typedef struct eplb_outputs eplb_outputs_t;

/* Whether path can be an output, before any work is done: it does not
 * exist or is a regular file or a link to one (is_dir: a directory or
 * nothing), so an output never replaces a FIFO, a device or a socket
 * (checked with stat: a FIFO is never opened), and its parent directory
 * exists and is writable. The commit checks every target again just
 * before its rename. EPLB_OK, or EPLB_EINVAL with a detail that names path
 * and never the caller's option: "empty path", "path too long" (4032 bytes
 * or more), "PATH is a directory", "PATH exists and is not a directory",
 * "PATH exists and is not a regular file", "PATH: directory DIR does not
 * exist", "PATH: directory DIR is not writable". */
EPLB_API eplb_status_t eplb_outputs_check(const char *path, int is_dir);

/* An empty set in *out, released by eplb_outputs_destroy. EPLB_OK,
 * EPLB_EINVAL (NULL), EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_outputs_create(eplb_outputs_t **out);

/* Removes every temporary of the set that was not committed and frees it.
 * NULL is a no-op. Not async-signal-safe: a handler calls
 * eplb_remove_temporaries instead. */
EPLB_API void eplb_outputs_destroy(eplb_outputs_t *outputs);

/* Checks path (eplb_outputs_check), then creates the temporary to write
 * instead of it: an empty file (mode 0644) or, is_dir, an empty directory.
 * *tmp receives its name, owned by the set, valid until the commit or
 * destroy. EPLB_OK; EPLB_EINVAL (NULL argument, or as eplb_outputs_check);
 * EPLB_EIO "PATH: cannot create a temporary: REASON"; EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_outputs_stage(eplb_outputs_t *outputs, const char *path, int is_dir,
                                          const char **tmp);

/* Announces a file `name` (no '/') about to be written into the staged
 * directory tmp, so that a signal removes it (eplb_remove_temporaries does
 * not list directories). Entries nobody announced are still moved by the
 * commit. EPLB_OK, EPLB_EINVAL (tmp is not a staged directory of the set,
 * bad name), EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_outputs_expect(eplb_outputs_t *outputs, const char *tmp,
                                           const char *name);

/* Renames every staged output into place in the order staged: a file or a
 * new directory with one rename, a staged directory whose target exists
 * file by file into it; after each, the target's stale temporaries are
 * swept (eplb_remove_stale_temporaries). Then removes what is left and
 * empties the set (it may stage again). EPLB_OK; EPLB_EINVAL "PATH: cannot
 * write: REASON" when a target became a directory, or not one, in the
 * meantime; EPLB_EIO for another failed rename or a staged directory that
 * cannot be listed ("PATH: cannot list the staged files"); EPLB_ENOMEM.
 * A failed commit puts back what it had renamed, newest first: a target
 * that existed gets its previous content back (a hard link taken before
 * its rename, renamed over the new output, so the path never goes missing),
 * a new one is removed, so the set lands whole or not at all. Where no hard
 * link can be made (a file system without them, a target another user owns
 * under protected_hardlinks) that target keeps the new output and the
 * detail names it. */
EPLB_API eplb_status_t eplb_outputs_commit(eplb_outputs_t *outputs);

#ifdef __cplusplus
}
#endif

#endif /* EPLB_COMMON_TOOLING_H */

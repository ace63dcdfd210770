/* SPDX-License-Identifier: Apache-2.0 */
#include "privsep.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "util.h"

#define USERADD "/usr/sbin/useradd"
#define USERADD_TRIES 5

/* What DATA_DIR held before airlockd had a directory of its own. */
static const char *const control_files[] = { "airlock.db", "airlock.db-wal", "airlock.db-shm", "admin.token",
                                             "keys" };

int privsep_control_dir(const struct daemon_config *c) {
        struct stat st;
        int r = stat(c->data_dir, &st) < 0 ? negative_errno() : 0;
        if (r == -ENOENT && (r = mkdir_p(c->data_dir, 0711)) < 0)
                return log_error_errno(r, "Failed to create data dir %s: %m", c->data_dir);
        if (r < 0) /* e.g. a parent the unprivileged airlockd may not pass */
                return log_error_errno(r, "Cannot reach data dir %s: %m", c->data_dir);
        bool fresh = access(c->control_dir, F_OK) < 0;
        if (fresh && mkdir(c->control_dir, 0700) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Failed to create %s: %m", c->control_dir);
        if (!fresh)
                return 0;
        for (size_t i = 0; i < ARRAY_SIZE(control_files); i++) {
                _cleanup_free_ char *from = strdup_printf("%s/%s", c->data_dir, control_files[i]);
                _cleanup_free_ char *to = strdup_printf("%s/%s", c->control_dir, control_files[i]);
                if (!from || !to)
                        return -ENOMEM;
                if (rename(from, to) == 0)
                        log_info("moved %s to %s", from, to);
                else if (errno != ENOENT)
                        return log_error_errno(negative_errno(), "Failed to move %s to %s: %m", from, to);
        }
        return 0;
}

static int run_useradd(const char *name) {
        pid_t pid = fork();
        if (pid < 0)
                return negative_errno();
        if (pid == 0) {
                /* a fixed argv, no shell; the name was checked by the caller */
                char *const argv[] = { (char *) USERADD, (char *) "--system", (char *) "--user-group",
                                       (char *) "--no-create-home", (char *) "--home-dir", (char *) "/nonexistent",
                                       (char *) "--shell", (char *) "/usr/sbin/nologin", (char *) name, NULL };
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (null >= 0) {
                        dup2(null, STDIN_FILENO);
                        dup2(null, STDOUT_FILENO);
                }
                execv(USERADD, argv);
                _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0)
                return negative_errno();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int privsep_user(const char *env, const char *def, uid_t *ret_uid, gid_t *ret_gid, const char **ret_name) {
        const char *name = getenv(env);
        if (!name || !*name)
                name = def;
        if (!name_is_valid(name) || name[0] == '-')
                return log_error_errno(-EINVAL, "%s \"%s\" is not a valid user name", env, name);
        /* several first starts at once (a test suite) race for useradd:
         * whoever loses finds the user the winner made */
        for (int attempt = 0;; attempt++) {
                struct passwd *pw = getpwnam(name);
                if (pw) {
                        if (pw->pw_uid == 0 || pw->pw_gid == 0)
                                return log_error_errno(-EPERM, "user %s is root: it must not be", name);
                        *ret_uid = pw->pw_uid;
                        *ret_gid = pw->pw_gid;
                        *ret_name = name;
                        return 0;
                }
                if (attempt == USERADD_TRIES)
                        return log_error_errno(-ENOENT, "cannot create the system user %s (%s)", name, USERADD);
                int k = run_useradd(name);
                if (k == 0)
                        log_info("created the system user %s", name);
                else
                        nanosleep(&(struct timespec){ .tv_nsec = 200 * 1000000L }, NULL);
        }
}

/* lchown of everything under dir (which is ours: no other user writes it
 * while we walk). */
static int chown_tree(const char *path, uid_t uid, gid_t gid, unsigned depth) {
        if (depth > 8)
                return -ELOOP;
        if (lchown(path, uid, gid) < 0)
                return negative_errno();
        struct stat st;
        if (lstat(path, &st) < 0)
                return negative_errno();
        if (!S_ISDIR(st.st_mode))
                return 0;
        DIR *d = opendir(path);
        if (!d)
                return negative_errno();
        int r = 0;
        for (struct dirent *e; r >= 0 && (e = readdir(d));) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *p = strdup_printf("%s/%s", path, e->d_name);
                r = p ? chown_tree(p, uid, gid, depth + 1) : -ENOMEM;
        }
        closedir(d);
        return r;
}

int privsep_hand_over(const struct daemon_config *c, uid_t uid, gid_t gid) {
        struct stat st;
        if (lstat(c->data_dir, &st) < 0)
                return log_error_errno(negative_errno(), "Cannot stat %s: %m", c->data_dir);
        /* the node's storage and sockets live here: airlockd may pass
         * through, never rename or replace anything */
        if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
                return log_error_errno(-EPERM, "data dir %s must be a directory owned by root", c->data_dir);
        if (chmod(c->data_dir, (st.st_mode & 0755) | 0711) < 0)
                return log_error_errno(negative_errno(), "Cannot chmod %s: %m", c->data_dir);
        int r = chown_tree(c->control_dir, uid, gid, 0);
        if (r < 0)
                return log_error_errno(r, "Cannot hand %s over to uid %u: %m", c->control_dir, (unsigned) uid);
        /* traversable, not listable: the node (another user) reads the
         * public capability keys in control/keys/public; every file here is
         * airlockd's alone (umask 077) */
        if (chmod(c->control_dir, 0711) < 0)
                return log_error_errno(negative_errno(), "Cannot chmod %s: %m", c->control_dir);
        return 0;
}

int privsep_drop(uid_t uid, gid_t gid) {
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
                return -1;
        /* for good: no way back to root */
        if (setuid(0) == 0 || getuid() != uid || geteuid() != uid)
                return -1;
        return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

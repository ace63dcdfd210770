/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Template specs (docs/templates.md): what a template of a user's is built
 * from, as JSON or as a Dockerfile subset (FROM, RUN, COPY, ENV, WORKDIR,
 * USER, and CMD / EXPOSE / HEALTHCHECK for its start and readiness). Both
 * parse into one struct, checked field by field before anything runs (a
 * message naming the field, or the Dockerfile's line, and why); its
 * canonical JSON (tplspec_to_json(): keys sorted, defaults written out) is
 * what a template's content hash is taken over. Untrusted input: every
 * size is bounded, both parsers are fuzzed.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define TPLSPEC_STEPS_MAX 64
#define TPLSPEC_ARGV_MAX 64          /* words of an exec-form command */
#define TPLSPEC_TEXT_MAX (16u << 10) /* bytes of one command, path list or env value */
#define TPLSPEC_PATH_MAX 1024
#define TPLSPEC_ENV_MAX 64
#define TPLSPEC_PACKAGES_MAX 256
#define TPLSPEC_INPUT_MAX (256u << 10) /* bytes of a spec or Dockerfile */
#define TPLSPEC_ERR_MAX 256

enum tplspec_base {
        TPLSPEC_BASE_TEMPLATE, /* another template (a built-in one, or the caller's) */
        TPLSPEC_BASE_DEBIAN,   /* a Debian suite and packages (mmdebstrap) */
        TPLSPEC_BASE_OCI,      /* an OCI image: "oci:DIR[:TAG]", "docker-archive:FILE" or a registry ref */
};

enum tplspec_step_kind {
        TPLSPEC_RUN,     /* argv (exec form), or argv {"/bin/sh","-c",TEXT} (shell form) */
        TPLSPEC_COPY,    /* srcs (paths in the build context) to dst */
        TPLSPEC_ENV,     /* key = value, for the later steps and the sandboxes */
        TPLSPEC_WORKDIR, /* path, made if missing */
        TPLSPEC_USER,    /* name, for the later RUN steps and the sandboxes */
};

struct tplspec_step {
        enum tplspec_step_kind kind;
        char **argv;  /* RUN: NULL-terminated */
        char **srcs;  /* COPY: NULL-terminated, relative, no ".." */
        char *dst;    /* COPY: absolute, or relative to the workdir */
        char *key, *value; /* ENV */
        char *path;   /* WORKDIR (absolute), USER (a name) */
};

struct tplspec {
        char *name;       /* [a-z0-9][a-z0-9-]{0,62} */
        enum tplspec_base base;
        char *from;       /* template name, Debian suite or OCI reference */
        char **packages;  /* Debian: NULL-terminated, may be empty */
        struct tplspec_step *steps;
        size_t n_steps;
        char **start;     /* start command (argv), NULL: none */
        char **ready_cmd; /* readiness check: a command that exits 0, or */
        unsigned ready_port; /* a TCP port that accepts (0: none) */
        unsigned ready_timeout_s;
        unsigned memory_mib, vcpus, disk_mib; /* 0: the base's */
};

void tplspec_free(struct tplspec *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct tplspec *, tplspec_free);

/* Parses and checks a JSON spec. -EINVAL with err saying which field and
 * why (err: TPLSPEC_ERR_MAX bytes). */
int tplspec_parse_json(const json_t *j, struct tplspec **ret, char *err);
/* Parses a Dockerfile subset into a spec named name. -EINVAL with err
 * naming the line and why. memory_mib, vcpus, disk_mib stay 0 (the API
 * request's fields set them). */
int tplspec_parse_dockerfile(const char *text, size_t len, const char *name, struct tplspec **ret, char *err);
/* The canonical JSON of s (tplspec_parse_json() reads it back the same). */
json_t *tplspec_to_json(const struct tplspec *s);
/* The rules of a spec's parts, for what checks them again (the root
 * process that makes a base's root file system): a Debian suite, a package
 * name, an OCI reference. */
bool tplspec_suite_ok(const char *s);
bool tplspec_package_ok(const char *s);
bool tplspec_oci_ok(const char *s);
/* The path inside the build context an OCI reference names ("oci:DIR[:TAG]"
 * gives DIR, "docker-archive:FILE" FILE; a registry's none: NULL), in buf
 * (size n); NULL too when it is no relative path without "..". */
const char *tplspec_oci_context_path(const char *ref, char *buf, size_t n);

/* The paths a build context must hold: an OCI base's archive or layout
 * first, then the COPY sources (NULL-terminated, borrowed from s; free the
 * array only). */
const char **tplspec_context_paths(const struct tplspec *s);

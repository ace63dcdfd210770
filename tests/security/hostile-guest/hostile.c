/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-guest-hostile: the real guest agent (src/guest, linked again)
 * with a compromised side, for tests/security/test_hostile_guest.py. It
 * behaves exactly like airlock-guest, so templates build and sandboxes
 * start, until a test asks it, through an ordinary exec of
 *
 *     ["airlock-hostile", ATTACK, ARGS...]
 *
 * to attack the node over the guest channel. Nothing in the product uses
 * or installs it: meson builds it as a test artefact only.
 *
 * The hooks are the linker's --wrap (see meson.build), so src/guest has no
 * test code in it: process_exec (the magic command), files_handle (lying
 * file reads and listings) and proto_write_frame (lying HELLO replies,
 * silence).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent.h"
#include "log.h"
#include "proto.h"

#define MAGIC "airlock-hostile"
#define HELLO_MODE_FILE "/etc/airlock-hostile-hello"
#define HOSTILE_PREFIX "/airlock-hostile/"

int __real_process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len);
int __wrap_process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len);
int __real_files_handle(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len);
int __wrap_files_handle(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len);
int __real_proto_write_frame(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len);
int __wrap_proto_write_frame(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len);

/* After "truncated": the agent says nothing any more (it still reads). */
static bool mute;

static int write_all(int fd, const void *data, size_t len) {
        const uint8_t *p = data;
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                len -= (size_t) k;
        }
        return 0;
}

static void header(uint8_t out[PROTO_HEADER_SIZE], uint8_t version, uint8_t type, uint32_t stream, uint32_t len) {
        proto_header_encode(&(struct proto_header){ .version = version, .type = type, .stream = stream, .length = len },
                            out);
}

static int frame(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        return __real_proto_write_frame(a->chan_fd, type, stream, payload, len);
}

static int frame_str(struct agent *a, uint8_t type, uint32_t stream, const char *s) {
        return frame(a, type, stream, s, strlen(s));
}

/* What a well-behaved agent sends for a process that printed text and
 * exited with code: the test sees it arrive after the attack. */
static int fake_exec(struct agent *a, uint32_t stream, const char *text, int code) {
        char exit_json[64];
        snprintf(exit_json, sizeof exit_json, "{\"exit_code\":%d,\"signal\":0}", code);
        int r = frame_str(a, PROTO_RESULT, stream, "{\"pid\":1}");
        if (r >= 0 && text[0])
                r = frame_str(a, PROTO_STDOUT, stream, text);
        if (r >= 0)
                r = frame_str(a, PROTO_EXIT, stream, exit_json);
        return r;
}

static unsigned long arg_ul(json_t *argv, size_t i, unsigned long def) {
        const char *s = json_string_value(json_array_get(argv, i));
        return s ? strtoul(s, NULL, 0) : def;
}

/* A header the node must refuse: over the size limit, at UINT32_MAX, or
 * of another protocol version. Nothing follows; the node must close the
 * channel and fail the sandbox with a clear error. */
static int attack_bad_header(struct agent *a, uint32_t stream, const char *how) {
        uint8_t h[PROTO_HEADER_SIZE];
        if (strcmp(how, "version") == 0)
                header(h, PROTO_VERSION + 1, PROTO_RESULT, stream, 2);
        else if (strcmp(how, "maxlen") == 0)
                header(h, PROTO_VERSION, PROTO_RESULT, stream, UINT32_MAX);
        else
                header(h, PROTO_VERSION, PROTO_RESULT, stream, PROTO_MAX_PAYLOAD + 1);
        return write_all(a->chan_fd, h, sizeof h);
}

/* Half a frame, then silence for good. */
static int attack_truncated(struct agent *a, uint32_t stream) {
        uint8_t buf[PROTO_HEADER_SIZE + 100];
        header(buf, PROTO_VERSION, PROTO_RESULT, stream, 4096);
        memset(buf + PROTO_HEADER_SIZE, '{', 100);
        int r = write_all(a->chan_fd, buf, sizeof buf);
        mute = true;
        return r;
}

/* One frame (the exec's RESULT) dribbled a byte a second, for `seconds`:
 * the agent does nothing else meanwhile. */
static int attack_slowloris(struct agent *a, uint32_t stream, unsigned long seconds) {
        uint8_t buf[PROTO_HEADER_SIZE + 256];
        size_t len = sizeof buf - PROTO_HEADER_SIZE;
        header(buf, PROTO_VERSION, PROTO_RESULT, stream, (uint32_t) len);
        memset(buf + PROTO_HEADER_SIZE, ' ', len);
        memcpy(buf + PROTO_HEADER_SIZE, "{\"pid\":1}", 9);
        for (size_t i = 0; i < sizeof buf && i < seconds; i++) {
                if (write_all(a->chan_fd, buf + i, 1) < 0)
                        break;
                sleep(1);
        }
        mute = true; /* the rest of that frame never comes */
        return 0;
}

/* Bytes that are no frame (with partial magics among them), then a normal
 * answer: the node must skip them and carry on. */
static int attack_garbage(struct agent *a, uint32_t stream, unsigned long n) {
        uint8_t buf[64 << 10];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof buf; i++) {
                x = x * 1103515245u + 12345u;
                buf[i] = (uint8_t) (x >> 16);
                if (buf[i] == 'A')
                        buf[i] = 'B';
        }
        memcpy(buf + 100, "ALK", 3);
        memcpy(buf + 1000, "ALKALK", 6);
        for (unsigned long done = 0; done < n;) {
                size_t k = n - done < sizeof buf ? n - done : sizeof buf;
                int r = write_all(a->chan_fd, buf, k);
                if (r < 0)
                        return r;
                done += k;
        }
        return fake_exec(a, stream, "survived garbage\n", 0);
}

/* A reply whose JSON is cut off: the request fails, the channel lives. */
static int attack_bad_json(struct agent *a, uint32_t stream) {
        return frame_str(a, PROTO_RESULT, stream, "{\"pid\":");
}

/* count frames of one byte for streams nobody opened (after one maximal
 * frame, which grows the node's reader buffer to 1 MiB, when big), then a
 * normal answer. */
static int attack_flood(struct agent *a, uint32_t stream, unsigned long count, bool big) {
        if (big) {
                uint8_t *p = calloc(1, PROTO_MAX_PAYLOAD);
                int r = p ? frame(a, PROTO_STDOUT, 0x7ffffff0u, p, PROTO_MAX_PAYLOAD) : -ENOMEM;
                free(p);
                if (r < 0)
                        return r;
        }
        enum { PER = PROTO_HEADER_SIZE + 1, BATCH = 4096 };
        static uint8_t buf[PER * BATCH];
        for (unsigned long done = 0; done < count;) {
                size_t k = count - done < BATCH ? count - done : BATCH;
                for (size_t i = 0; i < k; i++) {
                        header(buf + i * PER, PROTO_VERSION, PROTO_STDOUT, 0x70000000u + (uint32_t) ((done + i) % 100000),
                               1);
                        buf[i * PER + PROTO_HEADER_SIZE] = 'x';
                }
                int r = write_all(a->chan_fd, buf, k * PER);
                if (r < 0)
                        return r;
                done += k;
        }
        return fake_exec(a, stream, "flooded\n", 0);
}

/* Replies and stream frames for requests the node never sent: on stream 0,
 * on every low stream id, on the ids the node will pick next, on the last
 * id. Then a normal answer. */
static int attack_unsolicited(struct agent *a, uint32_t stream) {
        static const struct {
                uint8_t type;
                const char *payload;
        } lies[] = {
                { PROTO_RESULT, "{\"pid\":1,\"size\":99999999999,\"entries\":[]}" },
                { PROTO_ERROR, "{\"errno\":-7,\"message\":\"lie\"}" },
                { PROTO_ERROR, "{\"errno\":99999999999}" },
                { PROTO_EXIT, "{\"exit_code\":99999999999,\"signal\":-1}" },
                { PROTO_FILE_DATA, "xxxxxxxx" },
                { PROTO_FILE_END, "{}" },
                { PROTO_STDOUT, "unasked output" },
                { PROTO_HELLO, "{\"nonce\":\"00\",\"version\":1}" },
                { 200, "{}" },
        };
        for (uint32_t i = 0; i < 3000; i++) {
                uint32_t ids[3] = { i, stream + 1 + i, UINT32_MAX - i };
                for (size_t k = 0; k < 3; k++) {
                        if (ids[k] == stream)
                                continue;
                        for (size_t l = 0; l < sizeof lies / sizeof lies[0]; l++) {
                                /* one PING and one HELLO on stream 0 are enough */
                                if (ids[k] == 0 && i > 0)
                                        continue;
                                int r = frame_str(a, lies[l].type, ids[k], lies[l].payload);
                                if (r < 0)
                                        return r;
                        }
                }
        }
        int r = frame_str(a, PROTO_PING, 0, "{}");
        /* and on its own stream: an ERROR and a second RESULT after the answer */
        if (r >= 0)
                r = fake_exec(a, stream, "after the lies\n", 0);
        if (r >= 0)
                r = frame_str(a, PROTO_RESULT, stream, "{\"pid\":2}");
        if (r >= 0)
                r = frame_str(a, PROTO_EXIT, stream, "not json");
        return r;
}

/* PINGs on stream 0 without end, never reading the answers: the agent
 * blocks in write once the node stops taking them. It says so on the
 * console (once) when the channel has taken nothing for two seconds: the
 * node's reader is then stuck sending answers nobody reads, which is the
 * moment the test checks that nothing else on the node waits for it.
 * The PINGs go 256 to a write: every buffer between node and guest must
 * fill with answers first (about a megabyte of 14-byte frames), and one
 * write per PING under TCG took long enough on a loaded machine for the
 * test's wait to run out before the stall. */
#define PING_BATCH 256
static int attack_ping_flood(struct agent *a) {
        static const char payload[] = "{}";
        const size_t one = PROTO_HEADER_SIZE + sizeof payload - 1;
        uint8_t *batch = malloc(PING_BATCH * one);
        if (!batch)
                return -ENOMEM;
        for (size_t i = 0; i < PING_BATCH; i++) {
                header(batch + i * one, PROTO_VERSION, PROTO_PING, 0, sizeof payload - 1);
                memcpy(batch + i * one + PROTO_HEADER_SIZE, payload, sizeof payload - 1);
        }
        bool told = false;
        for (;;) {
                struct pollfd p = { .fd = a->chan_fd, .events = POLLOUT };
                int n = told ? 1 : poll(&p, 1, 2000);
                if (n == 0) {
                        log_warn("hostile: ping flood stalled: the node takes no more");
                        told = true;
                } else if (n > 0 && (p.revents & (POLLHUP | POLLERR)) && !told) {
                        /* a write now blocks until the host is back: say so */
                        log_warn("hostile: ping flood: the host went away (poll revents 0x%x)", (unsigned) p.revents);
                        told = true;
                }
                int r = write_all(a->chan_fd, batch, PING_BATCH * one);
                if (r < 0) {
                        /* the test waits for the stall: say why it will not come */
                        log_warn("hostile: ping flood ended%s: %s", told ? "" : " before it stalled", strerror(-r));
                        free(batch);
                        return 0;
                }
        }
}

/* An exec whose output comes in maximal (1 MiB) frames, far past the
 * node's output limit. */
static int attack_exec_output(struct agent *a, uint32_t stream, unsigned long mib) {
        uint8_t *p = malloc(PROTO_MAX_PAYLOAD);
        if (!p)
                return -ENOMEM;
        memset(p, 'o', PROTO_MAX_PAYLOAD);
        int r = frame_str(a, PROTO_RESULT, stream, "{\"pid\":1}");
        for (unsigned long i = 0; i < mib && r >= 0; i++)
                r = frame(a, i % 2 ? PROTO_STDERR : PROTO_STDOUT, stream, p, PROTO_MAX_PAYLOAD);
        free(p);
        if (r >= 0)
                r = frame_str(a, PROTO_EXIT, stream, "{\"exit_code\":0,\"signal\":0}");
        return r;
}

/* Arms a lie for the HELLO replies of the next host connections (also
 * after a reboot: the mode is on the disk). */
static int attack_hello(struct agent *a, uint32_t stream, const char *mode, const char *victim) {
        int fd = open(HELLO_MODE_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        char line[256];
        snprintf(line, sizeof line, "%s %s\n", mode, victim ? victim : "-");
        int r = write_all(fd, line, strlen(line));
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        close(fd);
        if (r < 0)
                return r;
        return fake_exec(a, stream, "armed\n", 0);
}

int __wrap_process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        json_error_t jerr;
        json_t *req = json_loadb(payload, len, 0, &jerr);
        json_t *argv = json_object_get(req, "argv");
        const char *magic = json_string_value(json_array_get(argv, 0));
        const char *attack = json_string_value(json_array_get(argv, 1));
        if (!magic || strcmp(magic, MAGIC) != 0 || !attack) {
                json_decref(req);
                return __real_process_exec(a, stream, payload, len);
        }
        log_warn("hostile: attack %s", attack);
        int r;
        if (strcmp(attack, "bad-header") == 0)
                r = attack_bad_header(a, stream, json_string_value(json_array_get(argv, 2)) ?: "oversize");
        else if (strcmp(attack, "truncated") == 0)
                r = attack_truncated(a, stream);
        else if (strcmp(attack, "slowloris") == 0)
                r = attack_slowloris(a, stream, arg_ul(argv, 2, 120));
        else if (strcmp(attack, "garbage") == 0)
                r = attack_garbage(a, stream, arg_ul(argv, 2, 1 << 20));
        else if (strcmp(attack, "bad-json") == 0)
                r = attack_bad_json(a, stream);
        else if (strcmp(attack, "flood") == 0)
                r = attack_flood(a, stream, arg_ul(argv, 2, 1000000),
                                 json_string_value(json_array_get(argv, 3)) &&
                                         strcmp(json_string_value(json_array_get(argv, 3)), "big") == 0);
        else if (strcmp(attack, "unsolicited") == 0)
                r = attack_unsolicited(a, stream);
        else if (strcmp(attack, "ping-flood") == 0)
                r = attack_ping_flood(a);
        else if (strcmp(attack, "exec-output") == 0)
                r = attack_exec_output(a, stream, arg_ul(argv, 2, 64));
        else if (strcmp(attack, "hello") == 0)
                r = attack_hello(a, stream, json_string_value(json_array_get(argv, 2)) ?: "version",
                                 json_string_value(json_array_get(argv, 3)));
        else
                r = -EOPNOTSUPP;
        json_decref(req);
        return r < 0 ? r : 0;
}

/* FILE_READ of /airlock-hostile/giant-N: announces one byte, sends N MiB in
 * maximal frames. LIST of /airlock-hostile/list: entries that are paths,
 * bad types and sizes, and more than the node's limit. */
int __wrap_files_handle(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        json_error_t jerr;
        json_t *req = (type == PROTO_FILE_READ || type == PROTO_LIST) ? json_loadb(payload, len, 0, &jerr) : NULL;
        const char *path = json_string_value(json_object_get(req, "path"));
        if (!path || strncmp(path, HOSTILE_PREFIX, strlen(HOSTILE_PREFIX)) != 0) {
                json_decref(req);
                return __real_files_handle(a, type, stream, payload, len);
        }
        int r = 0;
        if (type == PROTO_FILE_READ) {
                unsigned long mib = strtoul(path + strlen(HOSTILE_PREFIX "giant-"), NULL, 10);
                uint8_t *p = malloc(PROTO_MAX_PAYLOAD);
                r = p ? frame_str(a, PROTO_RESULT, stream, "{\"size\":1,\"mode\":420}") : -ENOMEM;
                if (p)
                        memset(p, 'g', PROTO_MAX_PAYLOAD);
                for (unsigned long i = 0; i < mib && r >= 0; i++)
                        r = frame(a, PROTO_FILE_DATA, stream, p, PROTO_MAX_PAYLOAD);
                free(p);
                if (r >= 0)
                        r = frame_str(a, PROTO_FILE_END, stream, "{}");
        } else {
                /* list-many: 12000 good entries; list-bad-K: two good ones
                 * around bad entry K */
                json_t *entries = json_array();
                json_t *bad[] = {
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "..", "type", "dir", "size", 1, "mode", 0755, "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", ".", "type", "dir", "size", 1, "mode", 0755, "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "", "type", "file", "size", 1, "mode", 0644, "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "../../etc/passwd", "type", "file", "size", 1, "mode",
                                  0644, "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "a/b", "type", "file", "size", 1, "mode", 0644, "mtime",
                                  0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "/etc/shadow", "type", "file", "size", 1, "mode", 0644,
                                  "mtime", 0),
                        json_pack("{s:s%,s:s,s:i,s:i,s:i}", "name", "nul\0x", (size_t) 5, "type", "file", "size", 1,
                                  "mode", 0644, "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "badtype", "type", "device", "size", 1, "mode", 0644,
                                  "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "negsize", "type", "file", "size", -1, "mode", 0644,
                                  "mtime", 0),
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", "badmode", "type", "file", "size", 1, "mode", 0777777,
                                  "mtime", 0),
                        json_pack("{s:i}", "name", 7),
                        json_string("not an object"),
                };
                const char *what = path + strlen(HOSTILE_PREFIX);
                size_t k = strncmp(what, "list-bad-", 9) == 0 ? strtoul(what + 9, NULL, 10) : SIZE_MAX;
                int good = k == SIZE_MAX ? 12000 : 2;
                char name[32];
                for (int i = 0; i < good; i++) {
                        snprintf(name, sizeof name, "f%05d", i);
                        json_array_append_new(entries, json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", name, "type", "file",
                                                                 "size", i, "mode", 0644, "mtime", 0));
                        if (i == 0 && k < sizeof bad / sizeof bad[0])
                                json_array_append(entries, bad[k]);
                }
                for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                        json_decref(bad[i]);
                r = agent_send_json(a, PROTO_RESULT, stream, json_pack("{s:o}", "entries", entries));
        }
        json_decref(req);
        return r < 0 ? r : 0;
}

/* The HELLO reply, as armed by "hello": "version" claims another protocol
 * version; "forge" names another sandbox and carries a forged log line in
 * the agent name. Everything, when muted: nothing. */
int __wrap_proto_write_frame(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        if (mute)
                return 0;
        char mode[64] = "", victim[128] = "";
        FILE *f = type == PROTO_HELLO ? fopen(HELLO_MODE_FILE, "re") : NULL;
        if (f) {
                if (fscanf(f, "%63s %127s", mode, victim) < 1)
                        mode[0] = 0;
                fclose(f);
        }
        if (!mode[0])
                return __real_proto_write_frame(fd, type, stream, payload, len);
        json_error_t jerr;
        json_t *m = json_loadb(payload, len, 0, &jerr);
        if (!m)
                return __real_proto_write_frame(fd, type, stream, payload, len);
        if (strcmp(mode, "version") == 0)
                json_object_set_new(m, "version", json_integer(PROTO_VERSION + 1));
        else {
                char agent[512];
                snprintf(agent, sizeof agent,
                         "airlock-guest 9.9\nts=2026-01-01T00:00:00.000Z level=error prog=airlock-node "
                         "sandbox=%s msg=\"FORGED-BY-GUEST\"",
                         victim);
                json_object_set_new(m, "agent", json_string(agent));
                json_object_set_new(m, "boot_id", json_string("\r\nFORGED-BY-GUEST"));
                json_object_set_new(m, "sandbox_id", json_string(victim));
        }
        char *s = json_dumps(m, JSON_COMPACT);
        json_decref(m);
        int r = s ? __real_proto_write_frame(fd, type, stream, s, strlen(s)) : -ENOMEM;
        free(s);
        return r;
}

/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Functions we do not call (git's banned.h): a call to one is a compile
 * error naming it, sorry_strcpy_is_a_banned_function.
 *
 *   strcpy strcat strncpy strncat   unbounded or silently truncating
 *                                   copies: str_copy() (util.h),
 *                                   snprintf(), memcpy() with a length
 *   sprintf vsprintf                unbounded: snprintf(), strdup_printf()
 *   gets                            unbounded
 *   strtok                          hidden state: strtok_r(), strsep()
 *   asctime ctime gmtime localtime  a static buffer: the _r forms
 *
 * It is force-included (-include) ahead of each file of a target that
 * depends on banned_dep (lib/basic/meson.build). The headers that declare
 * these are included here first, so a file's own #include of them later is
 * a no-op (their include guards) and no declaration meets these macros.
 */

#include <stdio.h>
#include <string.h>
#include <time.h>

#define BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef strncat
#define strncat(x, y, n) BANNED(strncat)

#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)

#undef gets
#define gets(x) BANNED(gets)
#undef strtok
#define strtok(x, y) BANNED(strtok)

#undef asctime
#define asctime(t) BANNED(asctime)
#undef ctime
#define ctime(t) BANNED(ctime)
#undef gmtime
#define gmtime(t) BANNED(gmtime)
#undef localtime
#define localtime(t) BANNED(localtime)

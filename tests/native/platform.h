/* platform.h - ARCH and LIBC as the native test drivers print them (internal to tests/native). */
#ifndef ISAFORGE_TEST_PLATFORM_H
#define ISAFORGE_TEST_PLATFORM_H

#if defined(__x86_64__)
#define ARCH "x86_64"
#elif defined(__aarch64__)
#define ARCH "aarch64"
#else
#define ARCH "other"
#endif

#if defined(__GLIBC__)
#define LIBC "glibc"
#elif defined(__linux__)
#define LIBC "musl" /* the only other libc this is built with (zig cc -target *-linux-musl) */
#else
#define LIBC "other"
#endif

#endif

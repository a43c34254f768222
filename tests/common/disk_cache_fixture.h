/* The fixture and helpers that the disk cache tests (tests/unit/test_disk_cache_*.c)
 * share: a fresh read-write cache in a temporary directory for each test,
 * keys and payloads, publish and lookup checks, and the file operations that
 * damage, age or plant things in a cache. */
#ifndef FSA_DISK_CACHE_FIXTURE_H
#define FSA_DISK_CACHE_FIXTURE_H

#include "testing.h"

#include "jit/disk_cache.h"
#include "jit/kernel_key.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define TARGET "sm_90a"

typedef struct fixture {
    char *root;
    fsa_disk_cache *dc;
} fixture;

/* cmocka setup and teardown: *state is a fixture whose cache is open read-write. */
int disk_cache_setup(void **state);
int disk_cache_teardown(void **state);

/* A key of sel_fwd_main (bf16) for TARGET; nvrtc may be NULL. */
void make_key(fsa_kernel_key *k, const char *head_dim, const char *nvrtc, const char *opt);
/* The same for another target. */
void make_key_for(fsa_kernel_key *k, const char *target, const char *head_dim, const char *nvrtc, const char *opt);
/* n seeded random bytes; the caller frees them. */
uint8_t *make_payload(size_t n, uint64_t seed);
void publish(fsa_disk_cache *dc, const fsa_kernel_key *k, const uint8_t *p, size_t n);
/* Looks a key up and expects exactly these bytes. */
void expect_hit(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, const uint8_t *p, size_t n);
/* A lookup's status; a failed lookup must hand out no bytes. */
fsa_status lookup_status(fsa_disk_cache *dc, const fsa_kernel_key *k, int any_nvrtc, uint64_t *corrupt);

int exists(const char *path); /* lstat: a dangling link exists */
off_t file_size(const char *path);
void flip_byte(const char *path, off_t at);
void set_times(const char *path, time_t atime, time_t mtime);
char *join(const char *a, const char *b); /* "a/b"; the caller frees it */
void touch(const char *path);             /* a small file of junk */
/* A new file at `to` (it must not exist) with the bytes of `from`: another inode. */
void copy_file(const char *from, const char *to);
/* Opens path and takes its flock, as a writer holds its temporary file
 * until its rename; close the descriptor to let go. */
int hold_file(const char *path);
/* Whether the last error is the disk cache's and its message holds `text`. */
int error_mentions(const char *text);
/* An fsa_disk_cache_list callback: counts the entries into *(int *)user. */
int count_entries(const fsa_cache_entry_info *info, void *user);

#endif

/* The disk cache under concurrency: processes and threads publishing and
 * reading one key at once always see the whole entry and leave no temporary
 * files; the per-key lock makes a second process wait for the first, but not
 * for a stopped holder, and not past FSA_CACHE_LOCK_TIMEOUT. */
#include "disk_cache_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ concurrency */

#define N_PROCS 8
#define N_THREADS 4
#define N_ROUNDS 50
#define RACE_BYTES 65536

typedef struct race_arg {
    fsa_disk_cache *dc;
    const fsa_kernel_key *key;
    const uint8_t *payload;
    int failures;
} race_arg;

/* No cmocka asserts here: this runs in forked children. */
static void *race_thread(void *p)
{
    race_arg *a = p;
    for (int i = 0; i < N_ROUNDS; i++) {
        uint64_t corrupt = 0;
        fsa_disk_entry e;
        if (fsa_disk_cache_publish(a->dc, a->key, TARGET, a->payload, RACE_BYTES, "k") != FSA_STATUS_OK)
            a->failures++;
        fsa_status st = fsa_disk_cache_lookup(&e, a->dc, a->key, TARGET, i & 1, &corrupt);
        if (st != FSA_STATUS_OK || corrupt != 0 || e.cubin_size != RACE_BYTES ||
            memcmp(e.cubin, a->payload, RACE_BYTES) != 0 || strcmp(e.entry_names, "k") != 0)
            a->failures++;
        fsa_disk_entry_free(&e);
    }
    return NULL;
}

static int race_child(const char *root, const fsa_kernel_key *key, const uint8_t *payload)
{
    fsa_disk_cache *dc = NULL;
    if (fsa_disk_cache_open(&dc, root, 0) != FSA_STATUS_OK) return 2;
    pthread_t t[N_THREADS];
    race_arg args[N_THREADS];
    int failures = 0;
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (race_arg){dc, key, payload, 0};
        if (pthread_create(&t[i], NULL, race_thread, &args[i]) != 0) return 3;
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += args[i].failures;
    }
    fsa_disk_cache_close(dc);
    return failures ? 1 : 0;
}

static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_concurrent_publishers_and_readers_always_see_the_whole_entry(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    uint8_t *p = make_payload(RACE_BYTES, 14);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) _exit(race_child(f->root, &k, p));
    }
    for (int i = 0; i < N_PROCS; i++) {
        int ws = 0;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    expect_hit(f->dc, &k, 0, p, RACE_BYTES);
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 1);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    assert_int_equal(count_temp_files(dir), 0);
    free(p);
    fsa_key_free(&k);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void test_the_key_lock_makes_a_second_process_wait_for_the_first(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    char *marker = join(f->root, "released");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Holds the lock, then leaves a marker just before letting go. */
        int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
        if (fd < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        usleep(300 * 1000);
        int m = open(marker, O_CREAT | O_WRONLY, 0600);
        if (m < 0) _exit(3);
        close(m);
        fsa_disk_cache_unlock(fd);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    double t0 = now_ms();
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    double waited = now_ms() - t0;
    assert_true(fd >= 0);
    assert_true(exists(marker)); /* we got it only after the child released it */
    assert_true(waited > 100.0);
    fsa_disk_cache_unlock(fd);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);

    /* A lock file is not an entry. */
    int n = 0;
    assert_int_equal(fsa_disk_cache_list(f->dc, count_entries, &n), FSA_STATUS_OK);
    assert_int_equal(n, 0);
    close(ready[0]);
    close(ready[1]);
    free(marker);
    fsa_key_free(&k);
}

/* A child that takes the key lock, says so on `ready`, then either stops
 * itself (SIGSTOP) or sleeps for a minute holding it. */
static pid_t lock_holder(fixture *f, const fsa_kernel_key *k, int stop_itself)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = fsa_disk_cache_lock(f->dc, k, TARGET);
        if (fd < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        if (stop_itself) raise(SIGSTOP);
        sleep(60);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
    if (stop_itself) {
        int ws = 0;
        assert_int_equal(waitpid(pid, &ws, WUNTRACED), pid);
        assert_true(WIFSTOPPED(ws));
    }
    return pid;
}

static void end_holder(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Asks for the lock in a child that an alarm kills after `limit_s`: a wait
 * that does not end fails the test instead of hanging it. Returns the
 * seconds the ask took, or -1 when the child got the lock anyway. */
static double ask_for_lock(fixture *f, const fsa_kernel_key *k, unsigned limit_s)
{
    double t0 = now_ms();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(limit_s);
        int fd = fsa_disk_cache_lock(f->dc, k, TARGET);
        _exit(fd >= 0 ? 1 : 0);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws)) fail_msg("waiting for the lock did not end within %u s (signal %d)", limit_s, WTERMSIG(ws));
    assert_true(WIFEXITED(ws));
    return WEXITSTATUS(ws) == 0 ? (now_ms() - t0) / 1e3 : -1.0;
}

static void test_a_lock_held_by_a_stopped_process_is_not_waited_for(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 1);
    double took = ask_for_lock(f, &k, 20);
    end_holder(holder);
    assert_true(took >= 0.0); /* went on without the lock */
    assert_true(took < 5.0);
    fsa_key_free(&k);
}

static void test_a_lock_held_past_the_timeout_is_given_up(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 0);
    assert_int_equal(setenv("FSA_CACHE_LOCK_TIMEOUT", "1", 1), 0);
    double took = ask_for_lock(f, &k, 20);
    unsetenv("FSA_CACHE_LOCK_TIMEOUT");
    end_holder(holder);
    assert_true(took >= 0.9);
    assert_true(took < 10.0);
    /* Once the holder is gone, the lock is there to take. */
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    assert_true(fd >= 0);
    fsa_disk_cache_unlock(fd);
    fsa_key_free(&k);
}

/* A timeout with anything after its number is no timeout: the default
 * wait applies, not the number read ("0s" would mean no wait at all). */
/* With FSA_CACHE_LOCK_TIMEOUT=value, a lock another process holds for 300 ms
 * is waited for (the default timeout) and had. */
static void expect_the_default_timeout_with(fixture *f, const char *value)
{
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* holds the lock for 300 ms */
        int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
        if (fd < 0 || write(ready[1], "x", 1) != 1) _exit(2);
        usleep(300 * 1000);
        fsa_disk_cache_unlock(fd);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(setenv("FSA_CACHE_LOCK_TIMEOUT", value, 1), 0);
    int fd = fsa_disk_cache_lock(f->dc, &k, TARGET);
    unsetenv("FSA_CACHE_LOCK_TIMEOUT");
    if (fd < 0) fail_msg("FSA_CACHE_LOCK_TIMEOUT=%s did not wait: %s", value, fsa_last_error());
    fsa_disk_cache_unlock(fd);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    close(ready[0]);
    close(ready[1]);
    fsa_key_free(&k);
}

static void test_a_lock_timeout_with_trailing_characters_is_ignored(void **state)
{
    expect_the_default_timeout_with(*state, "0s");
}

/* Seconds are decimal (README.md): a hexadecimal value, which strtod reads
 * (0x0 as no wait at all), is "any other value", the default. */
static void test_a_hexadecimal_lock_timeout_is_ignored(void **state)
{
    expect_the_default_timeout_with(*state, "0x0");
    expect_the_default_timeout_with(*state, "0X0p0");
}

/* Rewrites the record of the one lock file of the cache's target directory,
 * held by `holder`: its start time plus `start_delta`, and the host `host`
 * (NULL: the record's own). */
static void rewrite_lock_record(fixture *f, pid_t holder, unsigned long long start_delta, const char *host)
{
    char dir[4096], path[8192] = "";
    snprintf(dir, sizeof dir, "%s/v1/%s", f->root, TARGET);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t n = strlen(de->d_name);
        if (n > 5 && strcmp(de->d_name + n - 5, ".lock") == 0) snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    assert_true(path[0] != '\0');
    char rec[256] = {0}, own_host[128];
    long pid = 0;
    unsigned long long start = 0;
    FILE *fp = fopen(path, "r+");
    assert_non_null(fp);
    assert_non_null(fgets(rec, sizeof rec, fp));
    assert_int_equal(sscanf(rec, "pid %ld start %llu host %127s", &pid, &start, own_host), 3);
    assert_int_equal(pid, (long)holder);
    assert_int_equal(ftruncate(fileno(fp), 0), 0);
    rewind(fp);
    fprintf(fp, "pid %ld start %llu host %s\n", pid, start + start_delta, host ? host : own_host);
    fclose(fp);
}

/* A record whose pid is a stopped process but whose start time is not that
 * process's (the pid was reused after the writer died) is no evidence: the
 * waiter waits out its timeout rather than blaming an unrelated process. */
static void test_a_stopped_process_that_reused_the_holders_pid_is_not_blamed(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 1);
    rewrite_lock_record(f, holder, 1, NULL);
    assert_int_equal(setenv("FSA_CACHE_LOCK_TIMEOUT", "1", 1), 0);
    double took = ask_for_lock(f, &k, 20);
    unsetenv("FSA_CACHE_LOCK_TIMEOUT");
    end_holder(holder);
    assert_true(took >= 0.9); /* waited out the timeout */
    fsa_key_free(&k);
}

/* A lock record naming a process of another host is no evidence (cache/README.md): a stopped process of
 * this host with that pid is not blamed, and the waiter waits out FSA_CACHE_LOCK_TIMEOUT (it gave up after
 * 0.2 s when the host went unread). */
static void test_a_record_of_another_host_is_not_blamed(void **state)
{
    fixture *f = *state;
    fsa_kernel_key k;
    make_key(&k, "128", "13.0", "-O3");
    pid_t holder = lock_holder(f, &k, 1);
    rewrite_lock_record(f, holder, 0, "another-host.example");
    assert_int_equal(setenv("FSA_CACHE_LOCK_TIMEOUT", "1", 1), 0);
    double took = ask_for_lock(f, &k, 20);
    unsetenv("FSA_CACHE_LOCK_TIMEOUT");
    end_holder(holder);
    print_message("  asked for the lock for %.2f s\n", took);
    assert_true(took >= 0.9); /* waited out the timeout */
    fsa_key_free(&k);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, disk_cache_setup, disk_cache_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_concurrent_publishers_and_readers_always_see_the_whole_entry),
        T(test_the_key_lock_makes_a_second_process_wait_for_the_first),
        T(test_a_lock_held_by_a_stopped_process_is_not_waited_for),
        T(test_a_stopped_process_that_reused_the_holders_pid_is_not_blamed),
        T(test_a_record_of_another_host_is_not_blamed),
        T(test_a_lock_held_past_the_timeout_is_given_up),
        T(test_a_lock_timeout_with_trailing_characters_is_ignored),
        T(test_a_hexadecimal_lock_timeout_is_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

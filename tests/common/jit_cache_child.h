/* Fresh processes for the JIT cache tests: the test binary run again with
 * "--child <mode> args..." (the main of every test file that starts one hands
 * those arguments to child_main), and the threads that race for one kernel.
 * The modes: disk-hit, build, no-nvrtc, plan-disk and race (what each checks:
 * jit_cache_child.c). */
#ifndef FSA_JIT_CACHE_CHILD_H
#define FSA_JIT_CACHE_CHILD_H

#include "jit_cache_fixture.h"

#include <pthread.h>
#include <sys/types.h>

/* One of the threads asking for fill with `unroll` at once (through ctx):
 * waits at the barrier, then stores the status and module. */
typedef struct race_thread {
    fsa_context *ctx;
    int unroll;
    pthread_barrier_t *barrier;
    fsa_status st;
    fsa_module *m;
} race_thread;

void *race_thread_main(void *p);

/* Runs the child mode argv[0] with its arguments; returns its exit code. */
int child_main(int argc, char **argv);

/* Starts this binary with "--child args...". `close_fds` (-1 terminated) are
 * closed in the child before exec. The child's environment is ours without
 * FSA_* settings (except the test's own, FSA_TEST_*), plus `extra_env`. */
pid_t spawn_self(const char *const *args, const char *const *extra_env, const int *close_fds);
/* The child's exit code; a signal fails the test. */
int wait_child(pid_t pid);
/* spawn_self, then wait_child. */
int run_self(const char *const *args, const char *const *extra_env);

#endif

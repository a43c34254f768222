/* The command-line tools started without a standard stream (tools/tool_args.c): the stream is opened
 * onto /dev/null and reported, so that the next file the tool opens does not take its number and receive
 * the tool's output. Each case runs in a child whose streams it may close. */
#include "testing.h"
#include "tool_args.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int mask;    /* what tool_open_standard_streams returned */
    int next_fd; /* the number of the first file opened after it */
    int on_null; /* bit fd: fd is /dev/null afterwards */
} streams_outcome;

static int is_dev_null(int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat("/dev/null", &b) == 0 && S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev;
}

/* In the child: closes the descriptors of the mask *arg (0, 1, 2), calls the function, opens a file. */
static void close_then_open(void *out, const void *arg)
{
    const int closed = *(const int *)arg;
    for (int fd = 0; fd <= 2; fd++)
        if (closed & (1 << fd)) close(fd);
    streams_outcome *o = out;
    memset(o, 0, sizeof *o);
    o->mask = tool_open_standard_streams();
    char *dir = fsa_test_mkdtemp("tool-streams");
    char path[4096];
    snprintf(path, sizeof path, "%s/file", dir ? dir : "/nonexistent");
    o->next_fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (dir) fsa_test_rmtree(dir);
    free(dir);
    for (int fd = 0; fd <= 2; fd++) o->on_null |= is_dev_null(fd) << fd;
}

static streams_outcome run_with_closed(int closed)
{
    streams_outcome o;
    fsa_test_in_child(&o, sizeof o, close_then_open, &closed);
    return o;
}

static void test_open_streams_are_left_alone(void **state)
{
    (void)state;
    const streams_outcome o = run_with_closed(0);
    assert_int_equal(o.mask, 0);
    assert_true(o.next_fd > 2);
}

static void test_a_closed_stdout_goes_to_dev_null_and_is_reported(void **state)
{
    (void)state;
    const streams_outcome o = run_with_closed(2);
    assert_int_equal(o.mask, 2);
    assert_true(o.next_fd > 2); /* the file did not take stdout's number */
    assert_true(o.on_null & 2);
}

static void test_every_closed_stream_is_reported_and_none_is_reused(void **state)
{
    (void)state;
    const streams_outcome o = run_with_closed(7);
    assert_int_equal(o.mask, 7);
    assert_true(o.next_fd > 2);
    assert_int_equal(o.on_null, 7);
    const streams_outcome e = run_with_closed(4);
    assert_int_equal(e.mask, 4);
    assert_true(e.next_fd > 2 && (e.on_null & 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_streams_are_left_alone),
        cmocka_unit_test(test_a_closed_stdout_goes_to_dev_null_and_is_reported),
        cmocka_unit_test(test_every_closed_stream_is_reported_and_none_is_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

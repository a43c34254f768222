/* The per-key lock of the disk cache: it only keeps processes from
 * compiling one kernel twice (cache/README.md, "Locking"). */
#include "disk_cache_internal.h"

#include "base/status_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define STAGE FSA_DC_STAGE

int fsa_disk_cache_lock(fsa_disk_cache *dc, const fsa_kernel_key *key, const char *target)
{
    fsa_status st = FSA_STATUS_OK;
    char *dir = NULL, *path = NULL;
    int fd = -1;
    if (dc == NULL || key == NULL || key->name == NULL)
        FSA_FAIL(FSA_STATUS_NULL_POINTER, STAGE, "cache lock: NULL argument");
    if (dc->read_only) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cache %s is read-only: no lock", dc->root);
    FSA_CHECK(fsa_dc_target_dir(&dir, dc, target, 1));
    path = fsa_dc_key_file_path(dir, key, ".lock");
    FSA_CHECK_ALLOC(path, STAGE);
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot open lock %s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) FSA_FAIL(FSA_STATUS_CACHE_IO, STAGE, "cannot lock %s: %s", path, strerror(errno));
cleanup:
    if (st != FSA_STATUS_OK && fd >= 0) {
        close(fd);
        fd = -1;
    }
    free(path);
    free(dir);
    return fd;
}

void fsa_disk_cache_unlock(int fd)
{
    if (fd < 0) return;
    (void)flock(fd, LOCK_UN);
    close(fd);
}

#include "struct_size.h"

#include "status_internal.h"

#include <string.h>

/* The caller's struct_size, once it is known to be in range. */
static fsa_status caller_size(size_t *out, const void *caller, size_t size, size_t first_size, const char *stage,
                              const char *type_name)
{
    size_t n;
    memcpy(&n, caller, sizeof n); /* struct_size is the first field of every such struct */
    if (n < first_size || n > size)
        return fsa_error_set(FSA_STATUS_STRUCT_SIZE, stage, "%s.struct_size is %zu; this library takes %zu to %zu",
                             type_name, n, first_size, size);
    *out = n;
    return FSA_STATUS_OK;
}

fsa_status fsa_struct_size_check(const void *caller, size_t size, size_t first_size, const char *stage,
                                 const char *type_name)
{
    size_t n = 0;
    return caller_size(&n, caller, size, first_size, stage, type_name);
}

fsa_status fsa_struct_read(void *local, size_t size, const void *caller, size_t first_size, const char *stage,
                           const char *type_name)
{
    size_t n = 0;
    fsa_status st = caller_size(&n, caller, size, first_size, stage, type_name);
    if (st != FSA_STATUS_OK) return st;
    memset(local, 0, size);
    memcpy(local, caller, n);
    return FSA_STATUS_OK;
}

fsa_status fsa_struct_write(void *caller, const void *local, size_t size, size_t first_size, const char *stage,
                            const char *type_name)
{
    size_t n = 0;
    fsa_status st = caller_size(&n, caller, size, first_size, stage, type_name);
    if (st != FSA_STATUS_OK) return st;
    memcpy((char *)caller + sizeof n, (const char *)local + sizeof n, n - sizeof n);
    return FSA_STATUS_OK;
}

fsa_status fsa_struct_field_whole(size_t struct_size, size_t offset, size_t field_size, const char *stage,
                                  const char *type_name, const char *field_name)
{
    if (struct_size > offset && struct_size < offset + field_size)
        return fsa_error_set(FSA_STATUS_STRUCT_SIZE, stage,
                             "%s.struct_size is %zu, inside %s (bytes %zu to %zu); no version of the struct ends there",
                             type_name, struct_size, field_name, offset, offset + field_size - 1);
    return FSA_STATUS_OK;
}

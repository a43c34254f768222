/* The GNU build ID of a loaded shared object. NVRTC's version call reports
 * major.minor only, which a patch release of the same toolkit shares; its
 * build ID tells the builds apart, so kernel keys name it and a cache never
 * serves one NVRTC build's cubin to another. Read from the program headers
 * the dynamic loader mapped: no file is opened. */
#ifndef FSA_ELF_BUILD_ID_H
#define FSA_ELF_BUILD_ID_H

#include <stddef.h>
#include <stdint.h>

/* Longest build ID kept (linkers write 16 or 20 bytes). */
#define FSA_BUILD_ID_MAX 32

/* The build ID in a block of ELF notes (a PT_NOTE segment's bytes, entries
 * padded to `align`, 4 or 8): its length, the bytes copied to out; 0 when the
 * block holds none, one longer than cap, or a malformed note before it. */
size_t fsa_elf_build_id_in_notes(uint8_t *out, size_t cap, const void *notes, size_t size, size_t align);

/* The build ID of the loaded object whose mapped segments hold `address`
 * (one of its symbols); 0 when no such object or it has none. */
size_t fsa_elf_build_id_of_loaded(uint8_t *out, size_t cap, const void *address);

#endif

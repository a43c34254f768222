#include "elf_build_id.h"

#include <elf.h>
#include <link.h>
#include <string.h>

static size_t pad_to(size_t n, size_t align) { return (n + align - 1) / align * align; }

size_t fsa_elf_build_id_in_notes(uint8_t *out, size_t cap, const void *notes, size_t size, size_t align)
{
    const uint8_t *p = notes;
    if (align != 8) align = 4; /* p_align 0 or 1 means the usual 4 */
    size_t at = 0;
    while (size - at >= 12) {
        uint32_t name_size, desc_size, type;
        memcpy(&name_size, p + at, 4);
        memcpy(&desc_size, p + at + 4, 4);
        memcpy(&type, p + at + 8, 4);
        size_t name_at = at + 12;
        if (name_size > size - name_at) return 0;
        /* Padding is to offsets in the block (whose start is aligned), not to lengths. */
        size_t desc_at = pad_to(name_at + name_size, align);
        if (desc_at > size || desc_size > size - desc_at) return 0;
        if (type == NT_GNU_BUILD_ID && name_size == 4 && memcmp(p + name_at, "GNU", 4) == 0) {
            if (desc_size == 0 || desc_size > cap) return 0;
            memcpy(out, p + desc_at, desc_size);
            return desc_size;
        }
        size_t next = pad_to(desc_at + desc_size, align);
        if (next > size) return 0;
        at = next;
    }
    return 0;
}

typedef struct search {
    uintptr_t address;
    uint8_t *out;
    size_t cap, found;
} search;

/* 1 when [address, address + size) lies inside one loaded segment (readable, if asked). */
static int mapped(const struct dl_phdr_info *info, uintptr_t address, size_t size, int readable)
{
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || (readable && !(ph->p_flags & PF_R))) continue;
        if (address >= start && address - start < ph->p_memsz && size <= ph->p_memsz - (address - start)) return 1;
    }
    return 0;
}

static int visit(struct dl_phdr_info *info, size_t info_size, void *data)
{
    (void)info_size;
    search *s = data;
    if (!mapped(info, s->address, 1, 0)) return 0;
    for (size_t i = 0; i < info->dlpi_phnum && s->found == 0; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t notes = info->dlpi_addr + ph->p_vaddr;
        /* Notes outside the mapped segments (allowed, never seen) are not read. */
        if (ph->p_type != PT_NOTE || !mapped(info, notes, ph->p_memsz, 1)) continue;
        s->found = fsa_elf_build_id_in_notes(s->out, s->cap, (const void *)notes, ph->p_memsz, ph->p_align);
    }
    return 1; /* the object that holds the address: stop here either way */
}

size_t fsa_elf_build_id_of_loaded(uint8_t *out, size_t cap, const void *address)
{
    search s = {(uintptr_t)address, out, cap, 0};
    (void)dl_iterate_phdr(visit, &s);
    return s.found;
}

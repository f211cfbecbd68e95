"""Fingerprint of a compiled kernel binary (cubin / hsaco / mubin) without its debug info.

A binary embeds the source file's absolute path in its debug sections (`.debug_line`,
`.nv_debug_line_sass`, ...). FlagGems generates pointwise kernels into a cache directory
that the A/B drivers make private per run, so hashing the raw bytes would call every A/A
pair "binary changed". Only the sections that carry code and data count: every ELF section
except `.debug*`, `.nv_debug*`, `.note*`, `.comment`, the relocations of those, and the
section-name string table.
A blob that is not an ELF file is hashed whole (there is no structure to trust).

There is no ELF reader in the project's dependencies; section headers are a fixed struct
(System V gABI), read here with `struct` only.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Iterator, Tuple

_SKIP_PREFIXES = (".debug", ".nv_debug", ".note", ".comment", ".shstrtab")
# Relocations of a skipped section go with it: `.rel.debug_line` holds offsets into
# `.debug_line`, past its file-name table, so they move with the path's length (H200 A/A of
# FlagGems' generated abs/gelu kernels: equal TTGIR, LLIR and PTX, different cubin hashes).
_RELOC_PREFIXES = (".rela", ".rel")


def skipped(name: str) -> bool:
    """Whether a section is left out of the code digest (debug info and what points into it)."""
    for reloc in _RELOC_PREFIXES:
        if name.startswith(reloc + "."):
            name = name[len(reloc):]
            break
    return not name or name.startswith(_SKIP_PREFIXES)
SHT_NOBITS = 8


class NotELF(ValueError):
    """The bytes are not a readable ELF file."""


def _sections(blob: bytes) -> Iterator[Tuple[str, int, bytes]]:
    if blob[:4] != b"\x7fELF" or len(blob) < 52:
        raise NotELF("no ELF magic")
    is64 = blob[4] == 2
    end = "<" if blob[5] == 1 else ">"
    try:
        if is64:
            shoff, = struct.unpack_from(end + "Q", blob, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", blob, 0x3A)
            fmt = end + "IIQQQQIIQQ"
        else:
            shoff, = struct.unpack_from(end + "I", blob, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", blob, 0x2E)
            fmt = end + "IIIIIIIIII"
        headers = [struct.unpack_from(fmt, blob, shoff + i * shentsize) for i in range(shnum)]
        names = headers[shstrndx]
        strtab = blob[names[4]:names[4] + names[5]]
        for h in headers:
            name_off, sh_type, offset, size = h[0], h[1], h[4], h[5]
            name = strtab[name_off:strtab.index(b"\0", name_off)].decode("utf-8", "replace")
            data = b"" if sh_type == SHT_NOBITS else blob[offset:offset + size]
            if sh_type != SHT_NOBITS and offset + size > len(blob):
                raise NotELF(f"section {name!r} runs past the end of the file")
            yield name, sh_type, data
    except (struct.error, IndexError, ValueError) as exc:
        if isinstance(exc, NotELF):
            raise
        raise NotELF(f"unreadable section table: {exc}") from None


def code_digest(blob: bytes) -> str:
    """sha256 over (name, type, bytes) of the code/data sections; the whole blob if not ELF."""
    digest = hashlib.sha256()
    try:
        sections = list(_sections(blob))
    except NotELF:
        digest.update(b"raw\n" + blob)
        return digest.hexdigest()
    for name, sh_type, data in sections:
        if skipped(name):
            continue
        digest.update(f"{name}\0{sh_type}\0{len(data)}\n".encode() + data)
    return digest.hexdigest()

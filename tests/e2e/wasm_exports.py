"""A copy of a .wasm module without some of its exports, for fidelity scenarios that pin what Envoy does
with a callback the module does not export (`filter.without_exports`, tests/fidelity/README.md).

The fidelity filter is written with the Rust SDK, which exports every callback; a module without one is
the same module with that name taken out of its export section (section 7: a vector of name, kind byte,
index). Nothing else changes, so the copy behaves as the filter does wherever the host still calls it.
harness/tests/fidelity.rs does the same for the harness runner.
"""

from __future__ import annotations

EXPORT_SECTION = 7


def _read_leb(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned LEB128 number at `at`, and where what follows it starts."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _leb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def without_exports(wasm: bytes, names: list[str]) -> bytes:
    """`wasm` less the exports `names` (each must be exported), every other byte as it was."""
    out, at, removed = bytearray(wasm[:8]), 8, []
    while at < len(wasm):
        section = wasm[at]
        size, start = _read_leb(wasm, at + 1)
        body = wasm[start:start + size]
        if section == EXPORT_SECTION:
            count, entry = _read_leb(body, 0)
            kept = []
            for _ in range(count):
                length, name_at = _read_leb(body, entry)
                name = body[name_at:name_at + length].decode()
                _index, end = _read_leb(body, name_at + length + 1)  # past the kind byte and the index
                if name in names:
                    removed.append(name)
                else:
                    kept.append(body[entry:end])
                entry = end
            body = _leb(len(kept)) + b"".join(kept)
        out += bytes([section]) + _leb(len(body)) + body
        at = start + size
    assert sorted(removed) == sorted(names), f"not exported: {sorted(set(names) - set(removed))}"
    return bytes(out)

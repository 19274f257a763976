#!/usr/bin/env python3
"""Reproducible OCI images of the filter and the sidecar, without docker (Python standard library only).

    oci_image.py wasm  --input livecheck.wasm       --out target/image --tag 0.1.0
    oci_image.py judge --input livecheck-judge --out target/image --tag 0.1.0

Each writes, under --out, an OCI image layout directory (NAME/), the same layout as an `oci-archive`
tarball (NAME.oci.tar) and the manifest's digest (NAME.digest), and prints that digest.

The filter's image is the "compat" variant of the Wasm image spec: one tar+gzip layer holding
`plugin.wasm`. Istio (`pkg/wasm/imagefetcher.go`, `PrepareFetch` → `extractOCIStandardImage` →
`extractWasmPluginBinary`) and Envoy Gateway (its copy, `internal/wasm/imagefetcher.go`, same functions)
take an OCI manifest whose last layer is `application/vnd.oci.image.layer.v1.tar+gzip` and return the
first tar entry whose base name is `plugin.wasm`; neither reads the config. Their `sha256` fields
(WasmPlugin `spec.sha256`, EnvoyExtensionPolicy `wasm.code.image.sha256`) are compared with the
manifest's digest, as hex without the `sha256:` prefix.

Same input bytes, same output bytes: entries sorted, mtime 0 (or SOURCE_DATE_EPOCH), owner 0:0 unless
stated, fixed modes, no user or group names, gzip with no file name and mtime 0, JSON with sorted keys
and no spaces, `created` from the same epoch. Only the gzip stream depends on the machine's zlib.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import struct
import sys
import tarfile
import tempfile
from dataclasses import dataclass

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"

WASM_FILE_NAME = "plugin.wasm"
JUDGE_BINARY = "livecheck-judge"
JUDGE_USER = 65532
JUDGE_PORT = 8181
JUDGE_STATE_DIR = "var/lib/livecheck-judge"
JUDGE_CONFIG_PATH = "/etc/livecheck-judge/judge.toml"


@dataclass(frozen=True)
class Entry:
    """One file or directory of a layer (`data` None: a directory). `path` is relative, no leading '/'."""

    path: str
    data: bytes | None = None
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Image:
    """An image's blobs by digest, and its manifest's descriptor."""

    manifest_digest: str
    manifest_size: int
    blobs: dict[str, bytes]


def source_date_epoch() -> int:
    """SOURCE_DATE_EPOCH (reproducible-builds.org) when set, else 0."""
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def descriptor(data: bytes, media_type: str) -> dict:
    return {"mediaType": media_type, "digest": digest(data), "size": len(data)}


def deterministic_tar(entries: list[Entry], mtime: int) -> bytes:
    """An uncompressed ustar archive of `entries`, sorted by path, with no timestamps, names or
    device numbers that depend on the machine."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path)  # tarfile ends a directory's name with "/"
            info.mtime, info.mode, info.uid, info.gid = mtime, entry.mode, entry.uid, entry.gid
            info.uname = info.gname = ""
            if entry.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return out.getvalue()


def deterministic_gzip(data: bytes) -> bytes:
    """gzip with mtime 0 and no file name in the header (gzip.compress writes neither)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def rfc3339(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_image(entries: list[Entry], platform: dict, container_config: dict | None, epoch: int) -> Image:
    """A one-layer image: the layer (tar+gzip of `entries`), its config and its manifest."""
    layer_tar = deterministic_tar(entries, epoch)
    layer = deterministic_gzip(layer_tar)
    config = {
        **platform,
        "created": rfc3339(epoch),
        "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
    }
    if container_config is not None:
        config["config"] = container_config
    config_bytes = canonical_json(config)
    manifest = canonical_json({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": descriptor(config_bytes, MEDIA_CONFIG),
        "layers": [descriptor(layer, MEDIA_LAYER_TAR_GZIP)],
    })
    blobs = {digest(b): b for b in (layer, config_bytes, manifest)}
    return Image(manifest_digest=digest(manifest), manifest_size=len(manifest), blobs=blobs)


def wasm_image(wasm: bytes, epoch: int) -> Image:
    """The filter as a compat Wasm image: one layer holding `plugin.wasm`. The platform is what the
    module is built for (Go's GOOS/GOARCH names, as the OCI config asks); the fetchers ignore it."""
    if wasm[:4] != b"\0asm":
        raise ValueError("not a WebAssembly module (no \\0asm magic)")
    return build_image([Entry(WASM_FILE_NAME, wasm, 0o644)], {"architecture": "wasm", "os": "wasip1"}, None, epoch)


def judge_image(binary: bytes, epoch: int) -> Image:
    """The sidecar alone in a scratch image: the static binary, and an empty state directory owned
    by the (numeric, non-root) user it runs as. TLS roots are compiled in (webpki-roots), so no
    /etc/ssl is needed."""
    interpreter = elf_interpreter(binary)
    if interpreter is not None:
        raise ValueError(f"{JUDGE_BINARY} is dynamically linked ({interpreter}): "
                         "an image without a libc cannot run it; build it for x86_64-unknown-linux-musl")
    parents = JUDGE_STATE_DIR.split("/")
    entries = [Entry(JUDGE_BINARY, binary, 0o755)]
    entries += [Entry("/".join(parents[:i]), None, 0o755) for i in range(1, len(parents))]
    entries.append(Entry(JUDGE_STATE_DIR, None, 0o700, JUDGE_USER, JUDGE_USER))
    container_config = {
        "Entrypoint": [f"/{JUDGE_BINARY}"],
        "Env": [f"LIVECHECK_JUDGE_CONFIG={JUDGE_CONFIG_PATH}"],
        "ExposedPorts": {f"{JUDGE_PORT}/tcp": {}},
        "User": f"{JUDGE_USER}:{JUDGE_USER}",
        "WorkingDir": f"/{JUDGE_STATE_DIR}",
    }
    return build_image(entries, {"architecture": "amd64", "os": "linux"}, container_config, epoch)


def elf_interpreter(binary: bytes) -> str | None:
    """The dynamic loader a 64-bit little-endian ELF file asks for (PT_INTERP), None when it asks for
    none: a static (or static-pie) binary, which the kernel runs without any library."""
    if binary[:4] != b"\x7fELF" or binary[4:6] != b"\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    try:
        phoff, = struct.unpack_from("<Q", binary, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", binary, 0x36)
        for i in range(phnum):
            p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
                "<IIQQQQ", binary, phoff + i * phentsize)
            if p_type == 3:  # PT_INTERP
                return binary[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
    except struct.error as e:
        raise ValueError(f"truncated ELF file: {e}") from None
    return None


def layout_files(image: Image, tag: str) -> dict[str, bytes]:
    """The files of an OCI image layout holding `image` under the reference name `tag`."""
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": image.manifest_digest,
            "size": image.manifest_size,
            "annotations": {REF_NAME: tag},
        }],
    }
    files = {"oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}), "index.json": canonical_json(index)}
    files.update({f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in image.blobs.items()})
    return files


def layout_archive(files: dict[str, bytes], epoch: int) -> bytes:
    """The layout as a plain tar with the layout at its root: what skopeo's `oci-archive:` reads."""
    entries = [Entry("blobs", None, 0o755), Entry("blobs/sha256", None, 0o755)]
    entries += [Entry(path, data, 0o644) for path, data in files.items()]
    return deterministic_tar(entries, epoch)


def write_outputs(image: Image, name: str, tag: str, out_dir: pathlib.Path, epoch: int) -> None:
    """NAME/ (the layout, replaced whole so no stale blob stays), NAME.oci.tar and NAME.digest."""
    files = layout_files(image, tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep other users (a registry client) out
    try:
        for path, data in files.items():
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        layout = out_dir / name
        if layout.exists():
            shutil.rmtree(layout)
        staging.rename(layout)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    (out_dir / f"{name}.oci.tar").write_bytes(layout_archive(files, epoch))
    (out_dir / f"{name}.digest").write_text(image.manifest_digest + "\n")


def read_layout(layout: pathlib.Path, tag: str) -> tuple[str, dict, dict]:
    """The manifest digest, manifest and config that `layout` holds under `tag`, every blob on the way
    checked against its descriptor's digest and size (ValueError otherwise)."""

    def blob(desc: dict) -> bytes:
        data = (layout / "blobs" / "sha256" / desc["digest"].removeprefix("sha256:")).read_bytes()
        if digest(data) != desc["digest"] or len(data) != desc["size"]:
            raise ValueError(f"{layout}: blob {desc['digest']} does not match its descriptor")
        return data

    index = json.loads((layout / "index.json").read_text())
    found = [m for m in index["manifests"] if m.get("annotations", {}).get(REF_NAME) == tag]
    if len(found) != 1:
        raise ValueError(f"{layout}: {len(found)} manifests are tagged {tag!r}")
    manifest = json.loads(blob(found[0]))
    config = json.loads(blob(manifest["config"]))
    for layer in manifest["layers"]:
        blob(layer)
    return found[0]["digest"], manifest, config


def layer_members(layer: bytes) -> dict[str, bytes | None]:
    """A tar+gzip layer's entries: path → file bytes (None for anything but a regular file)."""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer)), mode="r:") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


BUILDERS = {"wasm": ("livecheck-wasm", wasm_image), "judge": ("livecheck-judge", judge_image)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=sorted(BUILDERS))
    parser.add_argument("--input", type=pathlib.Path, required=True, help="the .wasm, or the static binary")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="directory for NAME/, NAME.oci.tar, NAME.digest")
    parser.add_argument("--tag", required=True, help="the reference name inside the layout (org.opencontainers.image.ref.name)")
    args = parser.parse_args(argv)
    name, build = BUILDERS[args.kind]
    epoch = source_date_epoch()
    try:
        image = build(args.input.read_bytes(), epoch)
    except (OSError, ValueError) as e:
        print(f"oci_image: {args.input}: {e}", file=sys.stderr)
        return 1
    write_outputs(image, name, args.tag, args.out, epoch)
    print(f"{name}:{args.tag} {image.manifest_digest}  ({args.out / name}/, {args.out / name}.oci.tar)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

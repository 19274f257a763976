"""scripts/oci_image.py: the filter's and the sidecar's OCI images, byte for byte reproducible, in the
shape Istio's and Envoy Gateway's wasm fetchers read (pkg/wasm/imagefetcher.go, extractOCIStandardImage:
the last layer is application/vnd.oci.image.layer.v1.tar+gzip and holds plugin.wasm).

The layout is read here independently of the builder's own reader, from the OCI image-layout spec."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pathlib
import struct
import tarfile

import pytest

import image_registry_check
import oci_image

TAG = "0.1.0"
EXPECTED_MEDIA_TYPES = {
    "index": "application/vnd.oci.image.index.v1+json",
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": "application/vnd.oci.image.layer.v1.tar+gzip",
}


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def build_wasm_image(wasm: pathlib.Path, out: pathlib.Path) -> str:
    assert oci_image.main(["wasm", "--input", str(wasm), "--out", str(out), "--tag", TAG]) == 0
    return (out / "livecheck-wasm.digest").read_text()


def blob(layout: pathlib.Path, descriptor: dict) -> bytes:
    """A blob by its descriptor, checked against the descriptor's digest and size."""
    data = (layout / "blobs" / "sha256" / descriptor["digest"].removeprefix("sha256:")).read_bytes()
    assert sha256(data) == descriptor["digest"]
    assert len(data) == descriptor["size"]
    return data


def open_layout(layout: pathlib.Path) -> tuple[dict, dict, dict, bytes]:
    """index.json → the one tagged manifest → its config and its one layer."""
    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_bytes())
    assert index["schemaVersion"] == 2 and index["mediaType"] == EXPECTED_MEDIA_TYPES["index"]
    [entry] = index["manifests"]
    assert entry["mediaType"] == EXPECTED_MEDIA_TYPES["manifest"]
    assert entry["annotations"] == {"org.opencontainers.image.ref.name": TAG}
    manifest = json.loads(blob(layout, entry))
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == EXPECTED_MEDIA_TYPES["manifest"]
    assert manifest["config"]["mediaType"] == EXPECTED_MEDIA_TYPES["config"]
    [layer] = manifest["layers"]
    assert layer["mediaType"] == EXPECTED_MEDIA_TYPES["layer"]
    return entry, manifest, json.loads(blob(layout, manifest["config"])), blob(layout, layer)


def layer_tar(layer: bytes) -> tarfile.TarFile:
    return tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer)), mode="r:")


def get_json(url: str) -> dict:
    """A loopback GET's JSON body (a status other than 200 raises)."""
    with image_registry_check.NO_PROXY.open(url, timeout=5) as response:
        assert response.status == 200
        return json.load(response)


def fake_elf(interpreter: bytes | None = None) -> bytes:
    """A minimal ELF64 header with one PT_LOAD, plus a PT_INTERP naming `interpreter` when given."""
    phdrs = [struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, 0, 0, 0x1000)]
    tail = b""
    if interpreter is not None:
        tail = interpreter + b"\0"
        phdrs.append(struct.pack("<IIQQQQQQ", 3, 4, 64 + 56 * 2, 0, 0, len(tail), len(tail), 1))
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 2, 0x3E, 1, 0x401000, 64, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    return header + b"".join(phdrs) + bytes(56 * (2 - len(phdrs))) + tail + b"rest of a binary"


@pytest.fixture(scope="module")
def wasm_build(wasm_file, tmp_path_factory) -> tuple[pathlib.Path, str]:
    out = tmp_path_factory.mktemp("image")
    return out, build_wasm_image(wasm_file, out)


def test_two_builds_of_the_same_wasm_are_byte_identical(wasm_file, wasm_build, tmp_path, capsys):
    first, first_digest = wasm_build
    second_digest = build_wasm_image(wasm_file, tmp_path)
    assert second_digest == first_digest
    assert tree(tmp_path) == tree(first)
    assert first_digest.strip() in capsys.readouterr().out


def test_a_rebuild_into_the_same_directory_leaves_no_stale_blob(wasm_file, tmp_path):
    stale = tmp_path / "livecheck-wasm" / "blobs" / "sha256" / ("0" * 64)
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from an older build")
    build_wasm_image(wasm_file, tmp_path)
    assert not stale.exists()
    assert len(list(stale.parent.iterdir())) == 3  # manifest, config, layer


def test_the_digest_file_names_the_manifest_of_the_layout(wasm_build):
    out, digest = wasm_build
    entry, _, _, _ = open_layout(out / "livecheck-wasm")
    assert digest == entry["digest"] + "\n"
    assert len(list((out / "livecheck-wasm" / "blobs" / "sha256").iterdir())) == 3


def test_the_config_is_a_minimal_wasm_platform_config_with_the_layer_diff_id(wasm_build):
    out, _ = wasm_build
    _, _, config, layer = open_layout(out / "livecheck-wasm")
    assert config == {
        "architecture": "wasm",
        "os": "wasip1",
        "created": "1970-01-01T00:00:00Z",
        "rootfs": {"type": "layers", "diff_ids": [sha256(gzip.decompress(layer))]},
    }


def test_the_layer_holds_exactly_plugin_wasm_with_the_modules_bytes(wasm_file, wasm_build):
    out, _ = wasm_build
    _, _, _, layer = open_layout(out / "livecheck-wasm")
    flags, mtime = struct.unpack_from("<BI", layer, 3)
    assert layer[:3] == b"\x1f\x8b\x08" and flags == 0 and mtime == 0  # no file name, no time
    with layer_tar(layer) as tar:
        [member] = tar.getmembers()
        assert (member.name, member.mode, member.uid, member.gid, member.mtime) == ("plugin.wasm", 0o644, 0, 0, 0)
        assert (member.uname, member.gname) == ("", "")
        assert tar.extractfile(member).read() == wasm_file.read_bytes()


def test_the_oci_archive_holds_the_layout_at_its_root(wasm_build):
    out, _ = wasm_build
    with tarfile.open(out / "livecheck-wasm.oci.tar", mode="r:") as tar:
        members = tar.getmembers()
        files = {m.name: tar.extractfile(m).read() for m in members if m.isfile()}
    assert [m.name for m in members if m.isdir()] == ["blobs", "blobs/sha256"]
    assert all((m.uid, m.gid, m.mtime) == (0, 0, 0) for m in members)
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert files == tree(out / "livecheck-wasm")


def test_source_date_epoch_sets_every_time_and_so_the_digest(wasm_file, wasm_build, monkeypatch, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert build_wasm_image(wasm_file, tmp_path) != wasm_build[1]
    _, _, config, layer = open_layout(tmp_path / "livecheck-wasm")
    assert config["created"] == "2023-11-14T22:13:20Z"
    with layer_tar(layer) as tar:
        assert [m.mtime for m in tar.getmembers()] == [1700000000]
    with tarfile.open(tmp_path / "livecheck-wasm.oci.tar", mode="r:") as tar:
        assert {m.mtime for m in tar.getmembers()} == {1700000000}


def test_a_file_that_is_not_a_wasm_module_is_refused(tmp_path, capsys):
    not_wasm = tmp_path / "livecheck.wasm"
    not_wasm.write_bytes(b"\x7fELF not a module")
    assert oci_image.main(["wasm", "--input", str(not_wasm), "--out", str(tmp_path / "out"), "--tag", TAG]) == 1
    assert "not a WebAssembly module" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_judge_image_config_starts_its_binary_as_a_numeric_non_root_user(tmp_path):
    binary = fake_elf()
    oci_image.write_outputs(oci_image.judge_image(binary, 0), "livecheck-judge", TAG, tmp_path, 0)
    _, _, config, layer = open_layout(tmp_path / "livecheck-judge")
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"] == {
        "Entrypoint": ["/livecheck-judge"],
        "Env": ["LIVECHECK_JUDGE_CONFIG=/etc/livecheck-judge/judge.toml"],
        "ExposedPorts": {"8181/tcp": {}},
        "User": "65532:65532",
        "WorkingDir": "/var/lib/livecheck-judge",
    }
    with layer_tar(layer) as tar:
        entries = {m.name: (m.type, m.mode, m.uid, m.gid) for m in tar.getmembers()}
        assert tar.extractfile("livecheck-judge").read() == binary
    assert entries == {
        "livecheck-judge": (tarfile.REGTYPE, 0o755, 0, 0),
        "var": (tarfile.DIRTYPE, 0o755, 0, 0),
        "var/lib": (tarfile.DIRTYPE, 0o755, 0, 0),
        "var/lib/livecheck-judge": (tarfile.DIRTYPE, 0o700, 65532, 65532),
    }


def test_the_judge_image_of_the_static_sidecar_serves_from_its_layer_alone(judge_static, tmp_path):
    """The image built from `make judge-static`'s binary, its layer unpacked into an empty root and
    started there as its config says (chroot, its user, its Env): /healthz and /readyz answer, the
    store is in its state directory, and SIGTERM stops it cleanly."""
    assert oci_image.main(["judge", "--input", str(judge_static), "--out", str(tmp_path / "out"), "--tag", TAG]) == 0
    _, _, config, layer = open_layout(tmp_path / "out" / "livecheck-judge")
    with layer_tar(layer) as tar:
        assert tar.extractfile("livecheck-judge").read() == judge_static.read_bytes()
    judge, base_url, state_dir = image_registry_check.start_judge_from_layer(config, layer, tmp_path)
    try:
        health, ready = get_json(f"{base_url}/healthz"), get_json(f"{base_url}/readyz")
    finally:
        judge.stop()
    assert (health["status"], ready) == ("ok", {"status": "ready"})
    assert judge.status() == "exit 0", (tmp_path / "judge.log").read_text()
    assert "results.sqlite" in [p.name for p in state_dir.iterdir()]


def test_the_same_judge_binary_gives_the_same_judge_image():
    binary = fake_elf()
    assert oci_image.judge_image(binary, 0) == oci_image.judge_image(binary, 0)


def test_a_dynamically_linked_judge_is_refused():
    with pytest.raises(ValueError, match="dynamically linked.*x86_64-unknown-linux-musl"):
        oci_image.judge_image(fake_elf(b"/lib64/ld-linux-x86-64.so.2"), 0)


def test_a_truncated_elf_file_is_refused_not_crashed_on():
    with pytest.raises(ValueError, match="truncated"):
        oci_image.elf_interpreter(fake_elf()[:40])


def test_read_layout_refuses_a_blob_that_does_not_match_its_descriptor(wasm_file, tmp_path):
    build_wasm_image(wasm_file, tmp_path)
    layout = tmp_path / "livecheck-wasm"
    digest, manifest, _ = oci_image.read_layout(layout, TAG)
    assert digest == (tmp_path / "livecheck-wasm.digest").read_text().strip()
    config = layout / "blobs" / "sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    config.write_bytes(config.read_bytes().replace(b"wasip1", b"linux!"))
    with pytest.raises(ValueError, match="does not match"):
        oci_image.read_layout(layout, TAG)

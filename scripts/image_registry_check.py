#!/usr/bin/env python3
"""`make image-check`: the images `make image` wrote, through a real registry and back.

Starts Debian's `docker-registry` (the CNCF distribution registry) on a free loopback port with its
storage in a temporary directory, and for each image:
  1. pushes the layout with skopeo (`oci:` → `docker://`, --preserve-digests), and the oci-archive
     tarball (`oci-archive:`) under a second tag;
  2. reads the manifest back over the registry API as Istio's and Envoy Gateway's fetchers do
     (go-containerregistry's remote.Get): its digest must be the one `make image` printed, and both
     tags must give it;
  3. fetches the last layer as their extractOCIStandardImage does: media type
     application/vnd.oci.image.layer.v1.tar+gzip, holding plugin.wasm (the filter) or the binary
     (the sidecar) byte for byte;
  4. pulls the image back with skopeo into a fresh layout, which must hold the same blobs;
and runs the sidecar from the pulled layer alone: unpacked into an empty root, started there by
chroot as the image's user with its Entrypoint and Env, until /readyz answers (as root only: chroot).
Then stops the registry it started, by PID, and removes the temporary directory.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import oci_image  # noqa: E402

# What go-containerregistry's remote.Get asks for (the fetchers' first request).
MANIFEST_ACCEPT = ", ".join([
    oci_image.MEDIA_MANIFEST,
    "application/vnd.docker.distribution.manifest.v2+json",
    oci_image.MEDIA_INDEX,
    "application/vnd.docker.distribution.manifest.list.v2+json",
])
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Failed(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A process started here that serves HTTP on loopback, ready once `ready_url` answers 200 (within
    20 s, else Failed with its log); stopped by its PID."""

    def __init__(self, command: list[str], ready_url: str, log_path: pathlib.Path,
                 env: dict[str, str] | None = None) -> None:
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                with NO_PROXY.open(ready_url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        self.stop()
        raise Failed(f"{' '.join(command)} did not answer {ready_url} ({self.status()}):\n{log_path.read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def status(self) -> str:
        code = self.process.returncode
        return "running" if code is None else f"signal {-code}" if code < 0 else f"exit {code}"


class Registry:
    """docker-registry serving 127.0.0.1:port from `workdir`/storage; its log is `workdir`/registry.log."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.host = f"127.0.0.1:{free_port()}"
        config = workdir / "registry.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn, accesslog: {disabled: true}}\n"
            f"storage: {{filesystem: {{rootdirectory: {workdir / 'storage'}}}}}\n"
            f"http: {{addr: {self.host}}}\n"
        )
        self.server = Server(["docker-registry", "serve", str(config)], f"http://{self.host}/v2/",
                             workdir / "registry.log")

    def get(self, path: str, accept: str = "*/*") -> tuple[bytes, dict[str, str]]:
        request = urllib.request.Request(f"http://{self.host}/v2/{path}", headers={"Accept": accept})
        with NO_PROXY.open(request, timeout=30) as r:
            return r.read(), {k.lower(): v for k, v in r.headers.items()}


def skopeo_copy(policy: pathlib.Path, source: str, dest: str) -> None:
    """skopeo copy without TLS (the registry is plain HTTP on loopback), digests kept as they are."""
    command = ["skopeo", "--policy", str(policy), "copy", "--quiet", "--preserve-digests",
               "--src-tls-verify=false", "--dest-tls-verify=false", source, dest]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise Failed(f"{' '.join(command)}:\n{done.stderr}")


def layout_tag(layout: pathlib.Path) -> str:
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    return entry["annotations"][oci_image.REF_NAME]


def check_image(registry: Registry, policy: pathlib.Path, images: pathlib.Path, name: str,
                expected_member: tuple[str, bytes], workdir: pathlib.Path) -> tuple[dict, bytes]:
    """Pushes, reads back and pulls one image; returns its config and layer as the registry served them."""
    layout = images / name
    tag = layout_tag(layout)
    printed = (images / f"{name}.digest").read_text().strip()
    repo = f"livecheck/{name}"
    remote = f"{registry.host}/{repo}"

    skopeo_copy(policy, f"oci:{layout}:{tag}", f"docker://{remote}:{tag}")
    print(f"push  oci:{layout}:{tag} -> {remote}:{tag}")
    skopeo_copy(policy, f"oci-archive:{images / name}.oci.tar:{tag}", f"docker://{remote}:{tag}-archive")
    print(f"push  oci-archive:{images / name}.oci.tar:{tag} -> {remote}:{tag}-archive")

    for reference in (tag, f"{tag}-archive"):
        body, headers = registry.get(f"{repo}/manifests/{reference}", MANIFEST_ACCEPT)
        served = "sha256:" + hashlib.sha256(body).hexdigest()
        if served != printed or headers.get("docker-content-digest") != printed:
            raise Failed(f"{remote}:{reference}: manifest {served} "
                         f"(Docker-Content-Digest {headers.get('docker-content-digest')}), printed {printed}")
        if headers.get("content-type") != oci_image.MEDIA_MANIFEST:
            raise Failed(f"{remote}:{reference}: served as {headers.get('content-type')}")
    print(f"pull  {remote}:{tag} manifest {printed} (= printed; :{tag}-archive the same)")

    manifest = json.loads(body)
    layer = manifest["layers"][-1]
    if layer["mediaType"] != oci_image.MEDIA_LAYER_TAR_GZIP:
        raise Failed(f"{remote}:{tag}: last layer is {layer['mediaType']}, the fetchers want tar+gzip")
    layer_bytes, _ = registry.get(f"{repo}/blobs/{layer['digest']}")
    if oci_image.digest(layer_bytes) != layer["digest"]:
        raise Failed(f"{remote}:{tag}: layer blob does not match {layer['digest']}")
    member, expected = expected_member
    members = oci_image.layer_members(layer_bytes)
    if members.get(member) != expected:
        raise Failed(f"{remote}:{tag}: layer has {sorted(members)}, {member} not byte-identical to the input")
    print(f"pull  {remote}:{tag} layer {layer['digest']} {layer['mediaType']}: "
          f"{member} ({len(expected)} bytes) identical to the input")

    pulled = workdir / "pulled" / name
    pulled.parent.mkdir(exist_ok=True)
    skopeo_copy(policy, f"docker://{remote}:{tag}", f"oci:{pulled}:{tag}")
    pulled_digest, _, _ = oci_image.read_layout(pulled, tag)
    blobs = sorted(p.name for p in (pulled / "blobs" / "sha256").iterdir())
    if pulled_digest != printed or blobs != sorted(p.name for p in (layout / "blobs" / "sha256").iterdir()):
        raise Failed(f"pulled {name}: manifest {pulled_digest}, blobs {blobs}")
    print(f"pull  {remote}:{tag} -> oci:{pulled}:{tag}: manifest {pulled_digest}, same {len(blobs)} blobs")
    config, _ = registry.get(f"{repo}/blobs/{manifest['config']['digest']}")
    return json.loads(config), layer_bytes


# The least the sidecar starts with: one backend (never called here) and SQLite in the image's state dir.
JUDGE_SMOKE_CONFIG = """listen = "127.0.0.1:{port}"
[[backends]]
api = "openai"
base_url = "http://127.0.0.1:9"
models = ["*"]
[store]
url = "sqlite:///{state_dir}/results.sqlite"
"""


def start_judge_from_layer(config: dict, layer: bytes, workdir: pathlib.Path) -> tuple[Server, str, pathlib.Path]:
    """The sidecar from its image's one layer alone (no libc, no CA files, no /etc/passwd): the layer
    unpacked into an empty root, the least config written where the image's Env says, the
    Entrypoint started there by chroot as the image's User (so as root only), until /readyz answers
    (SQLite in the image's WorkingDir). Returns the running server, its base URL and the state
    directory on this side of the chroot; the caller stops the server."""
    chroot = shutil.which("chroot")
    if os.geteuid() != 0 or chroot is None:
        raise PermissionError("running the sidecar from its layer needs root and chroot")
    root = workdir / "judge-root"
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as tar:
        tar.extractall(root, numeric_owner=True, filter="tar")
    process_config = config["config"]
    env = dict(e.split("=", 1) for e in process_config["Env"])
    config_file = root / env["LIVECHECK_JUDGE_CONFIG"].lstrip("/")
    config_file.parent.mkdir(parents=True)
    port = free_port()
    config_file.write_text(JUDGE_SMOKE_CONFIG.format(port=port, state_dir=process_config["WorkingDir"]))
    command = [chroot, f"--userspec={process_config['User']}", str(root), *process_config["Entrypoint"]]
    base_url = f"http://127.0.0.1:{port}"
    judge = Server(command, f"{base_url}/readyz", workdir / "judge.log", env)
    return judge, base_url, root / process_config["WorkingDir"].lstrip("/")


def check_judge_runs(config: dict, layer: bytes, workdir: pathlib.Path) -> None:
    """The pulled sidecar image runs from its layer alone (said skipped when not root)."""
    try:
        judge, _, state_dir = start_judge_from_layer(config, layer, workdir)
    except PermissionError as e:
        print(f"run   skipped: {e}")
        return
    judge.stop()
    process_config = config["config"]
    state = sorted(p.name for p in state_dir.iterdir())
    print(f"run   {process_config['Entrypoint'][0]} from the pulled layer in an empty root as "
          f"{process_config['User']}: /readyz 200, stopped (pid {judge.process.pid}, {judge.status()}); "
          f"{process_config['WorkingDir']} holds {', '.join(state)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=pathlib.Path, required=True, help="what `make image` wrote")
    parser.add_argument("--wasm", type=pathlib.Path, required=True, help="the livecheck.wasm it packed")
    parser.add_argument("--judge", type=pathlib.Path, required=True, help="the static livecheck-judge it packed")
    args = parser.parse_args(argv)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="livecheck-image-check-"))
    registry = None
    try:
        policy = workdir / "policy.json"
        policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
        registry = Registry(workdir)
        print(f"registry: docker-registry pid {registry.server.process.pid} on {registry.host}, "
              f"storage {workdir / 'storage'}")
        check_image(registry, policy, args.images, "livecheck-wasm",
                    (oci_image.WASM_FILE_NAME, args.wasm.read_bytes()), workdir)
        config, layer = check_image(registry, policy, args.images, "livecheck-judge",
                                    (oci_image.JUDGE_BINARY, args.judge.read_bytes()), workdir)
        check_judge_runs(config, layer, workdir)
    except Failed as e:
        print(f"image-check: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if registry is not None:
            registry.server.stop()
            print(f"registry: pid {registry.server.process.pid} stopped ({registry.server.status()})")
        shutil.rmtree(workdir, ignore_errors=True)
    print("image-check: both images pushed, pulled back and identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())

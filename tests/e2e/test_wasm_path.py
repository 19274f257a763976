"""The e2e tests' guard against a stale .wasm (envoy_process.fresh_wasm): the rule the harness's
`fresh_wasm` follows, so Envoy never loads a filter older than its sources."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from envoy_process import StaleWasm, fresh_wasm, wasm_path

HOUR = 3600


def _package(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A package (Cargo.toml, Cargo.lock, src/lib.rs) built an hour ago: (package dir, release dir)."""
    (tmp_path / "src").mkdir()
    release = tmp_path / "target" / "wasm32-wasip1" / "release"
    release.mkdir(parents=True)
    for f in ("Cargo.toml", "Cargo.lock", "src/lib.rs"):
        (tmp_path / f).write_text("")
        _age(tmp_path / f, HOUR + 60)
    (release / "demo.wasm").write_bytes(b"\0asm")
    _age(release / "demo.wasm", HOUR)
    return tmp_path, release


def _age(path: pathlib.Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_missing_wasm_is_refused_with_the_command_that_builds_it(tmp_path):
    package, release = _package(tmp_path)
    (release / "demo.wasm").unlink()
    with pytest.raises(StaleWasm, match=r"demo\.wasm is missing: run `make wasm`"):
        fresh_wasm(release, package, "demo.wasm")


def test_a_wasm_older_than_a_source_is_refused(tmp_path):
    package, release = _package(tmp_path)
    assert fresh_wasm(release, package, "demo.wasm") == release / "demo.wasm"
    (package / "src" / "lib.rs").write_text("// changed")
    with pytest.raises(StaleWasm, match=r"demo\.wasm is older than .*src/lib\.rs"):
        fresh_wasm(release, package, "demo.wasm")


def test_a_wasm_older_than_the_lock_file_is_refused(tmp_path):
    package, release = _package(tmp_path)
    (package / "Cargo.lock").write_text("# changed")
    with pytest.raises(StaleWasm, match=r"older than .*Cargo\.lock"):
        fresh_wasm(release, package, "demo.wasm")


def test_the_sources_are_the_ones_cargos_dep_info_lists(tmp_path):
    package, release = _package(tmp_path)
    shared = package / "shared dir" / "shared.rs"  # a space, escaped in the dep-info line
    shared.parent.mkdir()
    shared.write_text("")
    _age(shared, 2 * HOUR)
    escaped = str(shared).replace(" ", "\\ ")
    (release / "demo.d").write_text(f"{release / 'demo.wasm'}: {package / 'src' / 'lib.rs'} {escaped}\n")
    (package / "src" / "tests.rs").write_text("")  # not listed: only test builds read it
    assert fresh_wasm(release, package, "demo.wasm") == release / "demo.wasm"
    shared.write_text("// changed")
    with pytest.raises(StaleWasm, match=r"older than .*shared dir/shared\.rs"):
        fresh_wasm(release, package, "demo.wasm")


def test_the_wasm_this_run_loads_is_fresh():
    # `make test` built it (make wasm) before the e2e step; a stale one would have been refused.
    assert wasm_path("livecheck.wasm").is_file()
    assert wasm_path("fidelity_filter.wasm").is_file()

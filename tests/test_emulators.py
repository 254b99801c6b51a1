"""Pinned emulators from Debian packages (ladder.preparing.emulators): fetched by URL, checked against the
pinned sha256, unpacked with dpkg-deb, described by the binary itself. The package here is a
real .deb built with dpkg-deb whose member is a small script answering like QEMU does
(``--version``, ``-cpu help``); the real QEMU 11 package is fetched by the emulated e2e test."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ladder.preparing import emulators
from ladder.core.errors import LadderError
from ladder.core.io import sha256_file

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

FAKE_QEMU = """#!/bin/sh
case "$1" in
  --version) echo "qemu-aarch64 version 11.1.3 (Debian 1:11.1.3+ds-1)";;
  -cpu) printf 'Available CPUs:\\n  max\\n  neoverse-n2\\n';;
esac
"""


@pytest.fixture
def deb(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: qemu-user\nVersion: 1:11.1.3+ds-1\nArchitecture: amd64\n"
        "Maintainer: ladder tests <t@example.org>\nDescription: a stand-in\n")
    binary = root / "usr" / "bin" / "qemu-aarch64"
    binary.parent.mkdir(parents=True)
    binary.write_text(FAKE_QEMU)
    binary.chmod(0o755)
    out = tmp_path / "qemu-user.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)], check=True,
                   capture_output=True)
    return out


def spec_for(deb: Path, **over: object) -> dict:
    return {"package": "qemu-user", "version": "1:11.1.3+ds-1", "sha256": sha256_file(deb),
            "member": "usr/bin/qemu-aarch64", "urls": [deb.as_uri()], **over}


def test_fetched_checked_unpacked_and_described(deb: Path, tmp_path: Path) -> None:
    spec = spec_for(deb, urls=[(tmp_path / "gone.deb").as_uri(), deb.as_uri()])
    out = tmp_path / "res" / "emulators" / "qemu-11" / "x" / "emulator.json"
    rec = emulators.fetch("qemu-11", spec, out, tmp_path / "downloads")
    assert json.loads(out.read_text()) == rec
    assert rec["url"] == deb.as_uri()  # the first URL failed; the second gave the pinned bytes
    assert rec["deb"] == "qemu-user_11.1.3+ds-1_amd64.deb"  # Debian's name: no epoch
    assert rec["qemu_version"].startswith("qemu-aarch64 version 11.1.3")
    assert rec["cpu_models"] == ["max", "neoverse-n2"]
    binary = Path(rec["binary"])
    assert binary.parent == out.parent and rec["binary_sha256"] == sha256_file(binary)
    # a second fetch keeps the checked download (no URL needed)
    again = emulators.fetch("qemu-11", {**spec, "urls": ["file:///nonexistent"]}, out,
                            tmp_path / "downloads")
    assert again["url"].startswith("(kept")


def test_identity_is_the_pin_never_the_url(deb: Path) -> None:
    spec = spec_for(deb)
    moved = {**spec, "urls": ["https://snapshot.debian.org/file/0"]}
    assert emulators.emulator_id("qemu-11", spec) == emulators.emulator_id("qemu-11", moved)
    assert emulators.emulator_id("qemu-11", spec) != emulators.emulator_id(
        "qemu-11", {**spec, "version": "1:11.1.4+ds-1"})


def test_a_wrong_sha256_is_named_and_kept_aside(deb: Path, tmp_path: Path) -> None:
    spec = spec_for(deb, sha256="0" * 64)
    with pytest.raises(LadderError) as exc:
        emulators.fetch("qemu-11", spec, tmp_path / "e" / "emulator.json", tmp_path / "dl")
    msg = str(exc.value)
    assert "emulation.emulators.qemu-11" in msg and "not the pinned " + "0" * 64 in msg
    assert (tmp_path / "dl" / "qemu-user_11.1.3+ds-1_amd64.deb.sha256-mismatch").is_file()
    assert not (tmp_path / "e" / "emulator.json").exists()


def test_a_missing_member_and_a_missing_key_are_named(deb: Path, tmp_path: Path) -> None:
    with pytest.raises(LadderError, match=r"emulators.qemu-11.member: usr/bin/qemu-x86 is not"):
        emulators.fetch("qemu-11", spec_for(deb, member="usr/bin/qemu-x86"),
                        tmp_path / "e" / "emulator.json", tmp_path / "dl")
    with pytest.raises(LadderError, match=r"emulation.emulators.qemu-11.sha256: an emulator"):
        emulators.identity("qemu-11", {**spec_for(deb), "sha256": ""})
    with pytest.raises(LadderError, match=r"cpu_models.sme2.emulator: 'qemu-12' is not a key"):
        emulators.spec_of({"emulation": {"emulators": {"qemu-11": {}}}}, "qemu-12",
                          "emulation.cpu_models.sme2")

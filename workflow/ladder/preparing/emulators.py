"""Pinned QEMU user-mode emulators fetched from Debian's packages, like every other input.

The system's QEMU (``emulation.qemu``, Debian 12's 7.2) emulates SME but not SME2. Newer
emulators ship in Debian's ``qemu-user`` package as static binaries (from 10.0 on), so one can be
had without touching the system's packages: the ``.deb`` is downloaded from a URL the config
names (Debian's pool; snapshot.debian.org keeps every file ever published, by sha1), checked
against its pinned sha256, and its one binary unpacked with ``dpkg-deb`` into the resources
dir, at a path named by the pin (content-addressed: a new pin is a new directory, the old one
stays usable).

``emulation.emulators.<name>``: ``package``, ``version``, ``sha256`` (of the .deb), ``urls`` (tried
in order) and ``member`` (the binary's path inside the package). A CPU model names its emulator
(``emulation.cpu_models.<model>.emulator``); a model without one runs under ``emulation.qemu``.
The record (``emulator.json``) is what the host's facts and the report cite: version, the
.deb's sha256, the URL it came from, the binary's sha256, ``--version`` and its CPU models.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import urllib.error
from pathlib import Path
from typing import Any, Mapping

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, canonical_hash, download, sha256_file

FORMAT = "ladder-emulator/1"
BINARY = "qemu-aarch64"  # the unpacked binary's name beside emulator.json
IDENTITY_KEYS = ("package", "version", "sha256", "member")
log = logging.getLogger("ladder.emulators")


def spec_of(config: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    specs = (config.get("emulation") or {}).get("emulators") or {}
    if name not in specs:
        raise LadderError(f"{where}.emulator: {name!r} is not a key of emulation.emulators "
                          f"({', '.join(specs) or 'none'})")
    return specs[name]


def identity(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """What names the emulator: its package, version, the .deb's sha256 and the member (never
    the URLs: a mirror moving changes nothing)."""
    where = f"emulation.emulators.{name}"
    for key in IDENTITY_KEYS:
        if not spec.get(key):
            raise LadderError(f"{where}.{key}: an emulator needs a {key}")
    return {"name": name, **{k: str(spec[k]) for k in IDENTITY_KEYS},
            "sha256": str(spec["sha256"]).lower()}


def emulator_id(name: str, spec: Mapping[str, Any]) -> str:
    return canonical_hash(identity(name, spec), 16)


def deb_filename(spec: Mapping[str, Any]) -> str:
    """Debian's own file name (the epoch is not part of it)."""
    version = str(spec["version"]).split(":", 1)[-1]
    return f"{spec['package']}_{version}_{spec.get('arch', 'amd64')}.deb"


def fetch_deb(name: str, spec: Mapping[str, Any], downloads: Path,
              timeout_s: float = 300) -> tuple[Path, str | None]:
    """The pinned .deb in ``downloads`` (kept from an earlier fetch when its sha256 matches),
    else from the first URL that gives the pinned bytes. Returns the file and the URL used."""
    where = f"emulation.emulators.{name}"
    want = str(spec["sha256"]).lower()
    downloads.mkdir(parents=True, exist_ok=True)
    deb = downloads / deb_filename(spec)
    if deb.is_file() and sha256_file(deb) == want:
        return deb, None
    failures = []
    for url in spec.get("urls") or []:
        try:
            download(str(url), deb, timeout_s)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            failures.append(f"{url}: {exc}")
            continue
        got = sha256_file(deb)
        if got == want:
            return deb, str(url)
        bad = deb.with_name(deb.name + ".sha256-mismatch")
        os.replace(deb, bad)
        failures.append(f"{url}: sha256 {got}, not the pinned {want} (kept aside as {bad})")
    if not spec.get("urls"):
        raise LadderError(f"{where}.urls: no URL to fetch {deb.name} from")
    raise LadderError(f"{where}: no URL gave {deb.name} with sha256 {want}: "
                      + "; ".join(failures))


def unpack_member(deb: Path, member: str, dest: Path, where: str) -> None:
    """``member`` (a path inside the package) unpacked to ``dest`` with dpkg-deb."""
    dpkg = shutil.which("dpkg-deb")
    if dpkg is None:
        raise LadderError(f"{where}: dpkg-deb is not on PATH (it unpacks the emulator's .deb; "
                          "Debian/Ubuntu: package dpkg)")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        res = subprocess.run([dpkg, "-x", str(deb), tmp], capture_output=True, text=True,
                             check=False)
        if res.returncode != 0:
            raise LadderError(f"{where}: dpkg-deb -x {deb} failed: {res.stderr.strip()[-300:]}")
        src = Path(tmp) / member.lstrip("/")
        if not src.is_file():
            raise LadderError(f"{where}.member: {member} is not a file of {deb.name}")
        part = dest.with_name(dest.name + ".part")
        shutil.copy2(src, part)
        os.chmod(part, 0o755)
        os.replace(part, dest)


def describe(binary: str) -> dict[str, Any]:
    """What the binary says of itself: its version line and its CPU models."""
    from ladder.preparing.emulation import qemu_cpu_models, qemu_version

    return {"qemu_version": qemu_version(binary), "cpu_models": qemu_cpu_models(binary)}


def fetch(name: str, spec: Mapping[str, Any], out_json: str | os.PathLike[str],
          downloads: str | os.PathLike[str]) -> dict[str, Any]:
    """Fetch, check and unpack one emulator; write its record beside the binary."""
    where = f"emulation.emulators.{name}"
    ident = identity(name, spec)
    out = Path(out_json)
    out.parent.mkdir(parents=True, exist_ok=True)
    deb, url = fetch_deb(name, spec, Path(downloads))
    binary = out.parent / BINARY
    unpack_member(deb, str(spec["member"]), binary, where)
    info = describe(str(binary))
    if "qemu" not in info["qemu_version"].lower():
        raise LadderError(f"{where}: {binary} --version printed nothing: not a QEMU binary")
    record = {"format": FORMAT, **ident, "id": emulator_id(name, spec),
              "deb": deb.name, "url": url or "(kept from an earlier fetch, sha256 checked)",
              "binary": str(binary.resolve()), "binary_sha256": sha256_file(binary), **info}
    log.info("emulator %s: %s (%s), %d CPU models", name, info["qemu_version"], deb.name,
             len(info["cpu_models"]))
    atomic_write_json(out, record)
    return record

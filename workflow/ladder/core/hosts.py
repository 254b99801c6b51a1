"""The hosts of a run: where each job goes, and the CPU identity a native build is keyed by.

A host is a name the whole run knows it by (a path component of its results), an executor
(``local``: this machine; ``slurm``: a partition and/or constraint), and its arch. The facts that
matter for a build key (CPU, compiler, what ``-march=native`` expands to) are never assumed: the
``host_facts`` checkpoint reads them on the node itself, and the host's plan is made from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import canonical_hash


@dataclass(frozen=True)
class Host:
    name: str
    executor: str = "local"
    arch: str = "auto"
    partition: str | None = None
    constraint: str | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    slurm_extra: str = "--exclusive"
    instance: str | None = None
    kind: str = "native"  # or emulated-aarch64: cross-built, run under qemu-user
    cpu: str | None = None  # the QEMU CPU model of an emulated host

    @property
    def remote(self) -> bool:
        return self.executor == "slurm"

    @property
    def emulated(self) -> bool:
        return self.kind != "native"

    def where(self) -> str:
        if self.emulated:
            return f"this machine, under QEMU -cpu {self.cpu} (evidence only)"
        if not self.remote:
            return "this machine"
        bits = [f"partition {self.partition}" if self.partition else "",
                f"constraint {self.constraint}" if self.constraint else ""]
        return "SLURM " + ", ".join(b for b in bits if b)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "executor": self.executor, "arch": self.arch,
                "partition": self.partition, "constraint": self.constraint, "cpus": self.cpus,
                "mem_mb": self.mem_mb, "slurm_extra": self.slurm_extra,
                "instance": self.instance, "kind": self.kind, "cpu": self.cpu,
                "where": self.where()}


def hosts_from_config(config: Mapping[str, Any], local_arch: str) -> list[Host]:
    """Parse and check ``hosts:``; every problem names the host and the key."""
    entries: Sequence[Mapping[str, Any]] = config.get("hosts") or [{"name": "local"}]
    hosts: list[Host] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        name = e["name"]
        where = f"hosts[{i}] ({name})"
        if name in seen:
            raise LadderError(f"{where}.name: {name!r} is listed twice")
        seen.add(name)
        executor = e.get("executor", "local")
        arch = e.get("arch", "auto")
        kind = e.get("kind", "native")
        if kind != "native":
            if executor != "local" or e.get("partition") or e.get("constraint"):
                raise LadderError(f"{where}: an {kind} host runs on this machine under QEMU "
                                  "(executor local, no partition/constraint)")
            if arch not in ("auto", "aarch64"):
                raise LadderError(f"{where}.arch: an {kind} host is aarch64, not {arch}")
            if not e.get("cpu"):
                raise LadderError(f"{where}.cpu: an {kind} host needs a QEMU CPU model "
                                  "(e.g. neoverse-n1 or max; see emulation.cpu_models)")
            if e.get("instance"):
                raise LadderError(f"{where}.instance: an emulated host has no price: it never "
                                  "reports throughput")
            hosts.append(Host(name=name, executor="local", arch="aarch64", kind=kind,
                              cpu=str(e["cpu"])))
            continue
        if e.get("cpu"):
            raise LadderError(f"{where}.cpu: only an emulated host (kind: emulated-aarch64) "
                              "names a QEMU CPU model")
        if executor == "slurm":
            if not (e.get("partition") or e.get("constraint")):
                raise LadderError(f"{where}: a slurm host needs a partition or a constraint "
                                  "(how else would its jobs reach it?)")
            if not e.get("cpus"):
                raise LadderError(f"{where}.cpus: a slurm host needs the CPUs its jobs ask for")
            if arch == "auto":
                raise LadderError(f"{where}.arch: a slurm host must name its arch "
                                  "(x86_64 or aarch64); auto means this machine's")
        else:
            if e.get("partition") or e.get("constraint"):
                raise LadderError(f"{where}: partition/constraint given, but executor is local "
                                  "(set executor: slurm)")
            if arch == "auto":
                arch = local_arch
            elif arch != local_arch:
                raise LadderError(f"{where}.arch: {arch} is not this machine's arch ({local_arch})")
        hosts.append(Host(name=name, executor=executor, arch=arch,
                          partition=e.get("partition"), constraint=e.get("constraint"),
                          cpus=e.get("cpus"), mem_mb=e.get("mem_mb"),
                          slurm_extra=e.get("slurm_extra", "--exclusive"),
                          instance=e.get("instance")))
    local = [h.name for h in hosts if not h.remote and not h.emulated]
    if len(local) > 1:
        raise LadderError(f"hosts: {', '.join(local)} are all local; one machine is one host")
    return hosts


def cpu_identity(facts: Mapping[str, Any]) -> str:
    """What a native build depends on: arch, CPU model, feature flags and the compiler's view."""
    return canonical_hash({
        "arch": facts.get("arch"), "cpu_model": facts.get("cpu_model"),
        "cpu_flags": sorted(facts.get("cpu_flags") or []),
        "native_target": (facts.get("native_target") or {}).get("fingerprint"),
    }, 16)


def check_facts(host: Host, facts: Mapping[str, Any], path: str) -> None:
    """The node a host's jobs reach must be the arch the config says."""
    if facts.get("arch") != host.arch:
        raise LadderError(f"host {host.name}: config says arch {host.arch}, but its node "
                          f"{facts.get('hostname')} reports {facts.get('arch')} ({path})")

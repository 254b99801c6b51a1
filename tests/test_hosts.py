"""Hosts config, CPU identity and the cross-host statistics (no cluster needed)."""

from __future__ import annotations

import re

import pytest

from ladder.core.errors import LadderError
from ladder.core.hosts import check_facts, cpu_identity, hosts_from_config
from ladder.analysis.stats import unpaired_ratio_ci, verdict


def test_default_is_one_local_host():
    (h,) = hosts_from_config({}, "x86_64")
    assert (h.name, h.executor, h.arch, h.remote) == ("local", "local", "x86_64", False)


def test_slurm_hosts_keep_their_scheduler_keys():
    hosts = hosts_from_config({"hosts": [
        {"name": "c7g", "executor": "slurm", "arch": "aarch64", "partition": "c7g", "cpus": 4,
         "instance": "c7g.xlarge"},
        {"name": "m7i", "executor": "slurm", "arch": "x86_64", "constraint": "m7i", "cpus": 2},
    ]}, "x86_64")
    assert [h.where() for h in hosts] == ["SLURM partition c7g", "SLURM constraint m7i"]
    assert hosts[0].slurm_extra == "--exclusive" and hosts[0].instance == "c7g.xlarge"


@pytest.mark.parametrize("entry, msg", [
    ({"name": "a", "partition": "p"}, "hosts[0] (a): partition/constraint given, but executor is local"),
    ({"name": "a", "arch": "aarch64"}, "hosts[0] (a).arch: aarch64 is not this machine's arch"),
])
def test_bad_local_host_is_named(entry, msg):
    with pytest.raises(LadderError, match=re.escape(msg)):
        hosts_from_config({"hosts": [entry]}, "x86_64")


def test_two_local_hosts_are_refused():
    with pytest.raises(LadderError, match="one machine is one host"):
        hosts_from_config({"hosts": [{"name": "a"}, {"name": "b"}]}, "x86_64")


def test_cpu_identity_follows_cpu_and_native_expansion():
    facts = {"arch": "aarch64", "cpu_model": "Neoverse-V1", "cpu_flags": ["asimd", "sve"],
             "native_target": {"fingerprint": "abc"}, "hostname": "n1"}
    same = {**facts, "hostname": "n2", "cpu_flags": ["sve", "asimd"]}  # order and node don't matter
    assert cpu_identity(facts) == cpu_identity(same)
    assert cpu_identity({**facts, "native_target": {"fingerprint": "xyz"}}) != cpu_identity(facts)
    assert cpu_identity({**facts, "cpu_model": "Neoverse-V2"}) != cpu_identity(facts)


def test_facts_from_another_arch_are_refused():
    (h,) = hosts_from_config({"hosts": [{"name": "c7g", "executor": "slurm", "arch": "aarch64",
                                         "partition": "c7g", "cpus": 2}]}, "x86_64")
    with pytest.raises(LadderError, match="host c7g: config says arch aarch64, but its node n1 "
                                          "reports x86_64"):
        check_facts(h, {"arch": "x86_64", "hostname": "n1"}, "host.json")


def test_unpaired_ratio_ci_and_verdict():
    a = [10.0, 10.4, 9.8, 10.1, 10.2]
    r = unpaired_ratio_ci(a, [x * 2 for x in a])
    assert r.estimate == pytest.approx(2.0) and 1.9 < r.lo <= 2.0 <= r.hi < 2.1
    assert verdict(r, 0.05).call == "faster"
    r = unpaired_ratio_ci(a, [10.3, 9.7, 10.0, 10.4, 9.9])
    assert r.lo < 1 < r.hi and verdict(r, 0.05).call == "equivalent"
    # a significant difference under the threshold is not called
    r = unpaired_ratio_ci(a, [x * 1.04 for x in a])
    assert r.lo > 1 and verdict(r, 0.05).call == "inconclusive"
    assert unpaired_ratio_ci([], a).estimate is None


def test_failed_slurm_submission_names_host_and_rule(fixture_text):
    from ladder.reporting.fleet import failed_jobs

    (job,) = failed_jobs(fixture_text("snakemake/slurm-sbatch-failed.log"))
    assert job == {"rule": "host_facts", "host": "hostc", "build_key": None,
                   "log": "logs/hostc/host.log"}

from __future__ import annotations

import pytest

from ladder.core.errors import LadderError
from ladder.preparing.recipes import (
    build_key,
    not_applicable_reason,
    quantizer_recipe,
    rungs_from_config,
    select_ladder_name,
)


def test_ladder_selected_by_arch(default_config):
    assert select_ladder_name(default_config, "x86_64") == "x86_64"
    assert select_ladder_name(default_config, "aarch64") == "aarch64"
    with pytest.raises(LadderError, match="no ladder for host arch 'riscv64'"):
        select_ladder_name(default_config, "riscv64")
    default_config["ladder"] = "arm"
    with pytest.raises(LadderError, match="ladder: 'arm' is not a key"):
        select_ladder_name(default_config)


def test_control_shares_its_twins_build(default_config):
    rungs = {r.name: r for r in rungs_from_config(default_config, "x86_64")}
    assert list(rungs) == ["floor", "native_repack", "amx", "control"]
    assert rungs["control"].twin_of == "native_repack"
    keys = {n: build_key(r.recipe, "src") for n, r in rungs.items()}
    assert keys["control"] == keys["native_repack"]
    assert len({keys["floor"], keys["native_repack"], keys["amx"]}) == 3


def test_quantizer_shares_the_floor_build_by_content(default_config):
    floor = rungs_from_config(default_config, "x86_64")[0]
    assert build_key(quantizer_recipe(default_config, "x86_64"), "s") == build_key(floor.recipe, "s")


def test_build_key_tracks_what_changes_the_binary(default_config):
    floor = rungs_from_config(default_config, "x86_64")[0]
    base = build_key(floor.recipe, "src-a")
    assert build_key(floor.recipe, "src-b") != base
    default_config["ladders"]["x86_64"]["rungs"][0]["cmake"] = {
        **default_config["ladders"]["x86_64"]["rungs"][0]["cmake"], "GGML_LLAMAFILE": "ON"}
    changed = rungs_from_config(default_config, "x86_64")[0]
    assert build_key(changed.recipe, "src-a") != base
    # runtime options are not part of the binary
    default_config["ladders"]["x86_64"]["rungs"][0]["cmake"]["GGML_LLAMAFILE"] = "OFF"
    default_config["ladders"]["x86_64"]["rungs"][0]["runtime"] = {"repack": False}
    assert build_key(rungs_from_config(default_config, "x86_64")[0].recipe, "src-a") == base


def test_cmake_define_order_does_not_matter(default_config):
    rung = default_config["ladders"]["x86_64"]["rungs"][0]
    a = build_key(rungs_from_config(default_config, "x86_64")[0].recipe, "s")
    rung["cmake"] = dict(reversed(list(rung["cmake"].items())))
    assert build_key(rungs_from_config(default_config, "x86_64")[0].recipe, "s") == a


def test_not_applicable_reasons(default_config, tmp_path):
    arm = {r.name: r for r in rungs_from_config(default_config, "aarch64")}
    assert not_applicable_reason(arm["floor"], "x86_64", frozenset()) == (
        "requires a aarch64 host; this host is x86_64")
    # a vendor source is a job's business (ladder.preparing.vendor), never decided while planning
    assert not_applicable_reason(arm["kleidiai"], "aarch64", frozenset()) is None
    x86 = {r.name: r for r in rungs_from_config(default_config, "x86_64")}
    assert not_applicable_reason(x86["amx"], "x86_64", frozenset({"avx2"})) == (
        "host CPU lacks amx_tile, amx_int8")
    assert not_applicable_reason(x86["amx"], "x86_64", frozenset({"amx_tile", "amx_int8"})) is None


def test_planning_opens_no_connection(default_config, monkeypatch):
    import socket

    def refuse(*a, **k):
        raise AssertionError("planning opened a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for r in rungs_from_config(default_config, "aarch64"):
        not_applicable_reason(r, "aarch64", frozenset())
        build_key(r.recipe, "s")


def test_vendor_source_is_in_the_build_key(default_config, tmp_path):
    """The KleidiAI rung's key holds its vendor source's kind and hash, never its path; rungs
    without one keep the keys they had."""
    def key_of(cfg, name="kleidiai"):
        return build_key({r.name: r for r in rungs_from_config(cfg, "aarch64")}[name].recipe, "s")

    upstream = key_of(default_config)
    floor = key_of(default_config, "floor")
    sha = "9c131f3aae614c20e9f1243c88ef3b06e73f743fa1a91ae0c03a87d734206f9d"
    default_config["vendor_sources"] = {"KleidiAI": {"kind": "archive", "path": "/a/k.tar.gz",
                                                     "sha256": sha}}
    local = key_of(default_config)
    assert local != upstream and key_of(default_config, "floor") == floor
    default_config["vendor_sources"]["KleidiAI"]["path"] = "/elsewhere/k.tar.gz"
    assert key_of(default_config) == local  # the path is not the identity
    default_config["vendor_sources"]["KleidiAI"]["sha256"] = "0" * 64
    assert key_of(default_config) != local
    del default_config["vendor_sources"]
    with pytest.raises(LadderError, match=r"requires.fetchcontent names 'KleidiAI'.*vendor_sources"):
        key_of(default_config)


def test_duplicate_rung_names_are_named(default_config):
    rungs = default_config["ladders"]["x86_64"]["rungs"]
    rungs.append(dict(rungs[0]))
    with pytest.raises(LadderError, match=r"ladders.x86_64.rungs\[3\].name: rung 'floor' appears twice"):
        rungs_from_config(default_config, "x86_64")


def test_control_twin_must_exist(default_config):
    default_config["ladders"]["x86_64"]["control"]["twin"] = "natve_repack"
    with pytest.raises(LadderError, match="control.twin: 'natve_repack' is not a rung"):
        rungs_from_config(default_config, "x86_64")


def test_a_rung_on_another_source_is_another_build_on_the_same_recipe(default_config):
    """Issue 41: a rung may pin its own source (here a git commit) or carry patches; its build
    key holds that source's identity, the other rungs keep theirs, and the plan lists every
    source a fetch_source job may be asked for (a patched one's base too)."""
    from ladder.planning.plan import Plan, all_sources, recipe_source_id
    from ladder.preparing.source import source_id

    ladder = default_config["ladders"]["x86_64"]["rungs"]
    native = next(r for r in ladder if r["name"] == "native_repack")
    before = {r.name: r for r in rungs_from_config(default_config, "x86_64")}
    commit = "1" * 40
    ladder.append({**native, "name": "release_b",
                   "source": {"kind": "git", "url": "/srv/llama.cpp", "commit": commit}})
    ladder.append({**native, "name": "patched",
                   "patches": [{"path": "config/patches/amx-tile-config.patch"}]})
    rungs = {r.name: r for r in rungs_from_config(default_config, "x86_64")}
    main = Plan.source_id_of(default_config)
    sids = {n: recipe_source_id(r.recipe, main) for n, r in rungs.items()}
    assert sids["native_repack"] == sids["floor"] == main
    assert len({main, sids["release_b"], sids["patched"]}) == 3
    assert rungs["native_repack"].recipe == before["native_repack"].recipe  # keys unchanged
    keys = {n: build_key(r.recipe, sids[n]) for n, r in rungs.items()}
    assert len({keys["native_repack"], keys["release_b"], keys["patched"]}) == 3
    assert rungs["release_b"].recipe.as_dict() == rungs["native_repack"].recipe.as_dict()
    every = all_sources(default_config)
    assert set(every) == {main, sids["release_b"], sids["patched"]}
    assert every[sids["release_b"]]["commit"] == commit
    assert source_id(every[sids["patched"]]) == sids["patched"]
    # the ladder's own source, the patched rung's base: its spec as the config gives it (same
    # keys in the same order), so its fetch_source job's params do not change when a config
    # adds a patched rung (Snakemake compares them as text: everything would run again)
    assert list(every[main].items()) == list(default_config["source"].items())

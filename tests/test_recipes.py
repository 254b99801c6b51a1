from __future__ import annotations

import pytest

from ladder.errors import LadderError
from ladder.recipes import (
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
    never = lambda host: False  # noqa: E731 - an offline host
    assert "no KleidiAI source: github.com is unreachable" in not_applicable_reason(
        arm["kleidiai"], "aarch64", frozenset(), reachable=never)
    assert not_applicable_reason(arm["kleidiai"], "aarch64", frozenset(),
                                 reachable=lambda h: True) is None
    x86 = {r.name: r for r in rungs_from_config(default_config, "x86_64")}
    assert not_applicable_reason(x86["amx"], "x86_64", frozenset({"avx2"})) == (
        "host CPU lacks amx_tile, amx_int8")
    assert not_applicable_reason(x86["amx"], "x86_64", frozenset({"amx_tile", "amx_int8"})) is None


def test_kleidiai_local_source_override(default_config, tmp_path):
    rung = default_config["ladders"]["aarch64"]["rungs"][2]
    rung["cmake"] = {**rung["cmake"], "FETCHCONTENT_SOURCE_DIR_KLEIDIAI": str(tmp_path / "nope")}
    k = rungs_from_config(default_config, "aarch64")[2]
    assert "is not a directory" in not_applicable_reason(k, "aarch64", frozenset(),
                                                          reachable=lambda h: True)
    (tmp_path / "nope").mkdir()
    assert not_applicable_reason(k, "aarch64", frozenset(), reachable=lambda h: False) is None


def test_duplicate_rung_names_are_named(default_config):
    rungs = default_config["ladders"]["x86_64"]["rungs"]
    rungs.append(dict(rungs[0]))
    with pytest.raises(LadderError, match=r"ladders.x86_64.rungs\[3\].name: rung 'floor' appears twice"):
        rungs_from_config(default_config, "x86_64")


def test_control_twin_must_exist(default_config):
    default_config["ladders"]["x86_64"]["control"]["twin"] = "natve_repack"
    with pytest.raises(LadderError, match="control.twin: 'natve_repack' is not a rung"):
        rungs_from_config(default_config, "x86_64")

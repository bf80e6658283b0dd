"""Every group of bench rows has one command line (``bench.harness.Group.main``): alone as
``python -m bench.MODULE`` or through ``python -m bench --only NAME``, it takes the same options,
measures the same plan, prints its table and writes its JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import GROUPS, only_argv, parse_args
from bench.harness import HERE, Group, Row


@dataclass(frozen=True)
class Plan:
    rounds: int
    size: int = 10


def small_group(seen: list[Plan]) -> Group:
    def run(plan: Plan) -> tuple[list[Row], dict[str, Any]]:
        seen.append(plan)
        return [Row("a figure", "ms", [2.0], [1.0], number="Z1")], {"server": "here"}

    return Group(
        "small", "row Z1: a figure", run, Plan(rounds=5), Plan(rounds=1, size=2),
        options=(("rounds", "rounds"),),
        summary=lambda rows, info: [f"server {info['server']}"],
    )  # fmt: skip


def test_a_groups_command_line_measures_its_plan_prints_it_and_writes_its_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Plan] = []
    group = small_group(seen)
    path = tmp_path / "out.json"

    assert group.main(["--quick", "--rounds", "3", "--json", str(path)]) == 0

    assert seen == [Plan(rounds=3, size=2)]  # the quick plan, with the option set
    out = capsys.readouterr().out
    assert "Z1  a figure (ms)" in out and "server here" in out and f"wrote {path}" in out
    written = json.loads(path.read_text())
    assert written["plan"] == {"rounds": 3, "size": 2} and written["info"]["server"] == "here"
    assert [row["name"] for row in written["rows"]] == ["a figure"]
    with pytest.raises(SystemExit):
        group.main(["--rounds", "0"])
    # the full run's call: no option of the group's own in python -m bench's arguments
    group.measure(parse_args([]))
    assert seen[-1] == Plan(rounds=5)


def test_every_group_takes_quick_json_and_its_options_and_only_hands_them_on(
    tmp_path: Path,
) -> None:
    """``--only NAME`` hands each group's ``main`` what it took before the groups shared one
    (a group's own option that ``python -m bench`` does not take, ``--rounds``, is not looked
    for there)."""
    for group in GROUPS:
        with pytest.raises(SystemExit) as helped:
            group.main(["--help"])
        assert helped.value.code == 0, group.name
        args = parse_args(["--only", group.name, "--quick", "--json", str(tmp_path / "x.json")])
        assert only_argv(args, group) == ["--quick", "--json", str(tmp_path / "x.json")]
        assert group.plan(args) == group.quick, group.name
        assert group.plan(parse_args([])) == group.full, group.name

    scale = next(g for g in GROUPS if g.name == "scale")
    argv = only_argv(parse_args(["--only", "scale", "--turns", "50"]), scale)
    assert argv == ["--json", str(HERE / "results-scale.json"), "--turns", "50"]
    assert scale.plan(scale_args := parse_args(["--only", "scale", "--turns", "50"])).turns == 50
    assert scale_args.turns == 50

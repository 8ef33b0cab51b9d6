"""The `networks` and `plan` commands, through the real command line."""

from __future__ import annotations

import json
from functools import partial

import pytest

from tests.conftest import run_cli


def test_networks_lists_all(cli):
    result = cli("networks")
    assert result.returncode == 0
    for name in ("sfc", "vgg_e", "alexnet_half"):
        assert name in result.stdout
    assert "138,344,128" in result.stdout


def test_networks_one(cli):
    result = cli("networks", "vgg_a")
    assert result.returncode == 0 and "conv5_2" in result.stdout and "512x7x7" in result.stdout


def test_plan_table(cli):
    result = cli("plan", "vgg_a", "--traffic-model", "paper")
    assert result.returncode == 0
    assert "level 4: 0.7437 GB" in result.stdout and "1.469 GB" in result.stdout
    assert "traffic model paper" in result.stdout and "batch batch batch in" in result.stdout
    default = cli("plan", "vgg_a")  # a graph plan: a column of kinds per node
    assert default.returncode == 0 and "traffic model layout" in default.stdout
    assert "conv1" in default.stdout and "level 4:" in default.stdout


def test_plan_json_keys(cli):
    result = cli("plan", "sfc", "--strategy", "data", "--levels", "4", "--batch", "256", "--json",
                 "--traffic-model", "paper")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert {"network", "strategy", "levels", "batch", "plan", "traffic_bytes",
            "traffic_bytes_per_level", "hierarchy", "accelerators", "traffic_model"} <= set(data)
    assert data["hierarchy"] == [2] * 4 and data["accelerators"] == 16
    assert data["traffic_model"] == "paper"
    assert data["plan"] == [["batch"] * 4] * 4
    assert data["traffic_bytes"] == 2 * 15 * 140_722_176 * 4
    assert len(data["traffic_bytes_per_level"]) == 4


def test_explicit_plan_string_and_file(cli, tmp_path):
    text = "dp dp mp mp\ndp,dp,mp,mp  # level 2"
    path = tmp_path / "plan.txt"
    path.write_text(text)
    from_file = json.loads(cli("plan", "lenet_c", "--levels", "2", "--plan", str(path),
                               "--json").stdout)
    from_text = json.loads(cli("plan", "lenet_c", "--levels", "2", "--plan",
                               "dp dp mp mp; dp dp mp mp", "--json").stdout)
    canonical = json.loads(cli("plan", "lenet_c", "--levels", "2", "--plan",
                               "batch batch in in; BATCH,batch,IN,in", "--json").stdout)
    by_node = json.loads(cli("plan", "lenet_c", "--levels", "2", "--plan",
                             "*: dp dp; fc1: mp mp; fc2: in in", "--json").stdout)
    assert from_file["plan"] == from_text["plan"] == canonical["plan"] == by_node["plan"] \
        == [["batch", "batch", "in", "in"]] * 2
    assert from_file["traffic_bytes"] == from_text["traffic_bytes"] == canonical["traffic_bytes"]
    assert from_file["strategy"] == "explicit"


def test_any_accelerator_count_gets_its_prime_factor_hierarchy(cli):
    data = json.loads(cli("plan", "lenet_c", "--accelerators", "12", "--json").stdout)
    assert data["hierarchy"] == [3, 2, 2] and data["accelerators"] == 12
    assert data["levels"] == len(data["plan"]) == 3
    assert all(len(row) == 4 for row in data["plan"])
    table = cli("plan", "lenet_c", "--accelerators", "12")
    assert table.returncode == 0 and "hierarchy 3x2x2 (12 accelerators)" in table.stdout


def test_uneven_batch_is_accepted_by_the_layout_model(cli):
    result = cli("plan", "lenet_c", "--batch", "100", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["batch"] == 100 and data["traffic_model"] == "layout"
    assert data["traffic_bytes"] > 0


@pytest.mark.parametrize("args, fragment", [
    (("plan", "no_such_net"), "unknown network 'no_such_net'"),
    (("plan", "missing.yaml"), "missing.yaml: network file not found"),
    (("plan", "lenet_c", "--batch", "100", "--traffic-model", "paper"),
     "batch: 100 is not divisible"),
    (("plan", "lenet_c", "--strategy", "data", "--batch", "100", "--traffic-model", "paper"),
     "batch: 100 cannot be split by data parallelism"),
    (("plan", "lenet_c", "--levels", "-1"), "levels: must be an integer from 0"),
    (("plan", "lenet_c", "--accelerators", "12", "--hierarchy", "4x4"),
     "--hierarchy: 4x4 has 16 members, but there are 12 accelerators"),
    (("plan", "lenet_c", "--kinds", "foo"), "--kinds: unknown split kind 'foo'"),
    (("plan", "lenet_c", "--accelerators", "64", "--batch", "32"),
     "no kind of batch,in can split node conv1 (conv, output [20, 12, 12]) on the top 6 level"),
    # a fixed strategy may not leave a member without samples (32 over 64) either
    (("plan", "lenet_c", "--strategy", "data", "--accelerators", "64", "--batch", "32"), "conv1"),
    (("plan", "lenet_c", "--strategy", "nope"), "invalid choice: 'nope'"),
    (("plan", "lenet_c", "--levels", "1", "--plan", "dp dp xp mp"),
     "unknown split kind 'xp'; allowed: batch (dp), in (mp), out, spatial"),
    (("plan", "lenet_c", "--levels", "2", "--plan", "dp dp mp mp"), "has 1 level(s), expected 2"),
    (("plan", "lenet_c", "--levels", "1", "--plan", "dp dp mp"), "has 3 choice(s), expected 4"),
    (("plan", "lenet_c", "--strategy", "data", "--batch", "0"),
     "--batch: must be an integer from 1 to 16,777,216, got 0"),
    (("plan", "lenet_c", "--strategy", "explicit"), "give --plan"),
])
def test_bad_input_one_line_exit_2(cli, args, fragment):
    result = cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("body, fragment", [
    ("input: {features: 4}\nlayers:\n  - {type: fc, out_featres: 3}\n",
     "layers[0]: unknown field 'out_featres' (did you mean 'out_features'?)"),
    ("input: {features: 4}\nlayers:\n  - {type: fc}\n", "missing field 'out_features'"),
    ("input: {channels: 1, height: 3, width: 3}\nlayers:\n"
     "  - {type: conv, out_channels: 2, kernel: 5}\n", "kernel 5 is larger than its padded input 3"),
    ("input: {features: 4\nlayers: [\n", "YAML syntax error at line"),
])
def test_bad_network_file(cli, tmp_path, body, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    result = cli("plan", str(path))
    assert result.returncode == 2
    assert str(path) in result.stderr and fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_plan_json_is_accepted_back_by_plan_file(tmp_path):
    """`plan --json` output saved to a file is a plan `--plan FILE` takes; a plan for other
    layers is refused in one line."""

    cli = partial(run_cli, cwd=tmp_path)
    saved = tmp_path / "plan.json"
    saved.write_text(cli("plan", "vgg_a", "--kinds", "batch,in,out", "--json").stdout)
    again = json.loads(cli("plan", "vgg_a", "--plan", str(saved), "--json").stdout)
    assert again["plan"] == json.loads(saved.read_text())["plan"]
    assert again["traffic_bytes"] == json.loads(saved.read_text())["traffic_bytes"]
    other = cli("plan", "vgg_b", "--plan", str(saved))
    assert other.returncode == 2 and ("the plan is for vgg_a's 11 nodes, not this network's "
                                      "13: node 2 is conv2_1 there") in other.stderr
    assert other.stderr.count("\n") == 1


def test_exhaustive_search_says_how_many_plans_it_will_visit(capsys):
    """With progress on (the command line turns it on when stderr is a terminal), the
    exhaustive search's bar starts at 0 of every plan it will try."""
    from hypar_sim.planner.options import PlanOptions
    from hypar_sim.planner.plan import make_plan
    from hypar_sim.workload.network import load_network

    make_plan(load_network("lenet_c"), "exhaustive", 2, 64,
              options=PlanOptions(kinds=("batch", "in"), progress=True))
    assert "0/64" in capsys.readouterr().err  # conv1 (1 input channel) batch only: 1x4x4x4


def test_compare_in_parallel_gives_the_same_results():
    """`compare` runs its strategies in a process pool: the results are those of running
    them one after another (wall time aside)."""
    import json

    def runs(*extra):
        rows = json.loads(run_cli("compare", "lenet_c", "--engine", "analytic", "--strategies",
                                  "data,hypar,tofu,optimal", "--json", *extra).stdout)
        for row in rows:
            row.pop("wall_s")
        return rows

    assert runs("--workers", "1") == runs("--workers", "2")


def test_progress_changes_nothing_but_stderr(capsys):
    """A run with its progress bar on (the command line turns it on for a terminal) gives the
    same result, with no trace of the bar in it; a run under 2 s shows no bar at all."""
    from hypar_sim.request import make_request
    from hypar_sim.runner import SimOptions, simulate_request

    quiet, loud = (simulate_request(make_request(
        "lenet_c", accelerators=4, sim=SimOptions(progress=progress))).to_dict()
        for progress in (False, True))
    for data in (quiet, loud):
        data.pop("wall_s")
    assert loud == quiet and "progress" not in loud["config"]
    assert capsys.readouterr().err == ""


def test_plan_rows_alone_read_back_and_a_missing_file_is_named(cli, tmp_path):
    """`plan --json`'s 'plan' rows saved alone (a JSON list) are a plan; a --plan value that
    is a path to no file says so, not that the text has too few levels."""
    found = cli("plan", "vgg_a", "--traffic-model", "paper", "--json")
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(json.loads(found.stdout)["plan"]))
    again = cli("plan", "vgg_a", "--traffic-model", "paper", "--plan", str(rows), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["traffic_bytes"] == json.loads(found.stdout)["traffic_bytes"]
    missing = cli("plan", "vgg_a", "--plan", str(tmp_path / "none" / "plan"))
    assert missing.returncode == 2 and "plan file not found" in missing.stderr


def test_an_explicit_kind_the_traffic_model_does_not_take_is_named(cli):
    plan = ";".join(["batch " * 8 + "out in in"] + ["batch " * 8 + "in in in"] * 3)
    result = cli("plan", "vgg_a", "--traffic-model", "paper", "--plan", plan)
    assert result.returncode == 2
    assert "node fc1 takes (out in in in), but --traffic-model paper takes only kinds batch, " \
        "in" in result.stderr
    assert cli("plan", "vgg_a", "--plan", plan).returncode == 0  # the layout model takes out


def test_run_and_compare_say_which_traffic_model(cli):
    run = cli("run", "lenet_c", "--traffic-model", "paper", "--engine", "analytic")
    assert run.returncode == 0 and "traffic model paper" in run.stdout.splitlines()[0]
    compare = cli("compare", "lenet_c", "--strategies", "data,hypar", "--engine", "analytic")
    assert compare.returncode == 0 and "traffic model layout" in compare.stdout.splitlines()[0]

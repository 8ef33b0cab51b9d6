"""Sweeps: rows, resume, failures, overrides, executors (processes and Dask)."""

from __future__ import annotations

import pandas as pd
import pytest

from hypar_sim.sim.defaults import DEFAULT_DES_MESSAGES
from hypar_sim.sweep import Case, SweepSpec, run_case, run_sweep

SPEC = SweepSpec(networks=("lenet_c", "sconv"), strategies=("data", "hypar"),
                 topologies=("htree", "torus"), accelerators=(4,), batches=(64,))


def frame(path):
    return pd.read_csv(path).drop(columns=["wall_s"])


def test_rows_have_inputs_and_outputs(tmp_path):
    rows = run_sweep(SPEC.cases(), tmp_path / "s.csv", workers=2, progress=False)
    table = pd.read_csv(tmp_path / "s.csv")
    assert len(rows) == len(table) == 8
    for column in ("network", "strategy", "topology", "accelerators", "batch", "latency_s",
                   "energy_j", "energy_breakdown_j.dram", "traffic_bytes", "events", "plan",
                   "config.link_bandwidth_gbps", "time_shares.communication", "error"):
        assert column in table.columns
    assert table.error.isna().all()
    assert (table.latency_s > 0).all()


def test_one_and_two_workers_give_the_same_csv(tmp_path):
    run_sweep(SPEC.cases(), tmp_path / "one.csv", workers=1, progress=False)
    run_sweep(SPEC.cases(), tmp_path / "two.csv", workers=2, progress=False)
    pd.testing.assert_frame_equal(frame(tmp_path / "one.csv"), frame(tmp_path / "two.csv"))


def test_resume_skips_done_rows_and_ends_like_a_full_run(tmp_path):
    cases = SPEC.cases()
    out = tmp_path / "s.csv"
    run_sweep(cases[:3], out, workers=1, progress=False)
    first_walls = pd.read_csv(out).wall_s.tolist()
    with open(out, "a", encoding="utf-8") as handle:  # a torn row, as a killed writer might leave
        handle.write("lenet_c,data,htr")
    run_sweep(cases, out, workers=2, progress=False)
    resumed = pd.read_csv(out)
    assert resumed.wall_s.tolist()[:3] == first_walls  # not rerun
    run_sweep(cases, tmp_path / "full.csv", workers=1, progress=False)
    pd.testing.assert_frame_equal(frame(out), frame(tmp_path / "full.csv"))


def test_a_failed_simulation_is_a_row(tmp_path):
    bad = Case("vgg_e", "data", "htree", 2, 4096)
    good = Case("lenet_c", "data", "htree", 2, 64)
    rows = run_sweep([bad, good], tmp_path / "s.csv", executor="serial", progress=False)
    assert "fits vgg_e in a cube" in rows[0]["error"] and not rows[1]["error"]
    assert "capacity" in pd.read_csv(tmp_path / "s.csv").error.iloc[0]


def test_run_case_never_raises():
    row = run_case(Case("no_such_network", "data", "htree", 4, 64))
    assert "unknown network" in row["error"]


def test_overrides_are_swept(tmp_path):
    spec = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                     batches=(64,), overrides=(("link_bandwidth_gbps", (1.6, 3.2)),))
    rows = run_sweep(spec.cases(), tmp_path / "s.csv", executor="serial", progress=False)
    slow, fast = (float(r["latency_s"]) for r in rows)
    assert fast < slow
    assert [r["config.link_bandwidth_gbps"] for r in rows] == [1.6, 3.2]


def test_dask_local_cluster_gives_the_same_rows(tmp_path):
    pytest.importorskip("dask.distributed")
    cases = SPEC.cases()[:4]
    run_sweep(cases, tmp_path / "dask.csv", executor="dask", progress=False)
    run_sweep(cases, tmp_path / "local.csv", executor="serial", progress=False)
    pd.testing.assert_frame_equal(frame(tmp_path / "dask.csv"), frame(tmp_path / "local.csv"))


def test_sweep_command(cli, tmp_path):
    out = tmp_path / "main.csv"
    args = ("sweep", "--networks", "lenet_c,cifar_c", "--strategies", "data,hypar",
            "--topologies", "htree,torus", "--accelerators", "4", "--batch", "64",
            "--set", "link_bandwidth_gbps=1.6,3.2", "--out", str(out), "--no-progress")
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert "16 rows" in result.stdout and len(pd.read_csv(out)) == 16
    assert "16 rows" in cli(*args).stdout  # resumed: nothing to do
    for bad, fragment in ((("--set", "link_bw=3"), "unknown key 'link_bw'"),
                          (("--topologies", "ring"), "--topologies: unknown 'ring'"),
                          (("--strategies", "best"), "--strategies: unknown 'best'"),
                          (("--networks", "nonet"), "unknown network 'nonet'")):
        result = cli("sweep", "--out", str(tmp_path / "bad.csv"), "--no-progress", *bad)
        assert result.returncode == 2 and fragment in result.stderr
        assert not (tmp_path / "bad.csv").exists()


# --- regressions found in review ----------------------------------------------------------

def test_changing_the_config_file_reruns_the_cases(tmp_path):
    config = tmp_path / "hw.yaml"
    config.write_text("link_bandwidth_gbps: 1.6\n")
    spec = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,), batches=(64,),
                     config_file=str(config), engines=("analytic",))
    out = tmp_path / "s.csv"
    slow = run_sweep(spec.cases(), out, executor="serial", progress=False)[0]
    config.write_text("link_bandwidth_gbps: 16\n")
    fast = run_sweep(spec.cases(), out, executor="serial", progress=False)[0]
    assert float(fast["latency_s"]) < float(slow["latency_s"])
    assert len(pd.read_csv(out)) == 2  # both kept, told apart by config_digest


def test_rows_of_another_sweep_are_kept(tmp_path):
    out = tmp_path / "s.csv"
    first = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,), batches=(64,))
    second = SweepSpec(networks=("lenet_c",), strategies=("model",), accelerators=(4,),
                       batches=(64,))
    run_sweep(first.cases(), out, executor="serial", progress=False)
    run_sweep(second.cases(), out, executor="serial", progress=False)
    assert sorted(pd.read_csv(out).strategy) == ["data", "model"]


def test_column_order_does_not_depend_on_which_row_came_first(tmp_path):
    bad, good = Case("vgg_e", "data", "htree", 2, 4096), Case("lenet_c", "data", "htree", 2, 64)
    run_sweep([bad], tmp_path / "a.csv", executor="serial", progress=False)
    run_sweep([bad, good], tmp_path / "a.csv", executor="serial", progress=False)
    run_sweep([bad, good], tmp_path / "b.csv", executor="serial", progress=False)
    assert list(pd.read_csv(tmp_path / "a.csv").columns) == list(pd.read_csv(tmp_path / "b.csv").columns)
    pd.testing.assert_frame_equal(frame(tmp_path / "a.csv"), frame(tmp_path / "b.csv"))


@pytest.mark.parametrize("args, fragment", [
    (("--set", "batch=64,128"), "--set: batch is an axis of the sweep; use --batch"),
    (("--set", "accelerators=4"), "use --accelerators"),
    (("--set", "link_bandwidth_gbps="), "gives no value for link_bandwidth_gbps"),
    (("--scheduler", "tcp://127.0.0.1:1"), "--scheduler: only with --executor dask"),
    (("--zeros", "auto"), "--zeros auto: only optimal chooses it"),
    (("--strategies", "optimal", "--pipelines", "auto"), "add optimal to --strategies and time"),
    (("--pipelines", "2,x"), "comma-separated integers or auto"),
    (("--strategies", "optimal", "--objectives", "time", "--pipelines", "auto",
      "--accelerators", "4", "--hierarchies", "2x2"), "drop --hierarchies"),
])
def test_bad_sweep_options(cli, tmp_path, args, fragment):
    out = tmp_path / "s.csv"
    out.write_text("keep me\n")
    result = cli("sweep", "--networks", "lenet_c", "--out", str(out), "--no-progress", *args)
    assert result.returncode == 2 and fragment in result.stderr
    assert "Traceback" not in result.stderr and out.read_text() == "keep me\n"


def _written(path, content: bytes):
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("make_out, fragment", [
    (lambda d: _written(d / "afile", b"x") / "s.csv", "is not a folder"),
    (lambda d: d, "is a folder, not a file"),
    (lambda d: _written(d / "bin.csv", b"\xff\xfe\x00"), "cannot read it as"),
    (lambda d: _written(d / "other.csv", b"a,b\n1,2\n"), "not a sweep CSV"),
])
def test_bad_out_path_fails_before_running(cli, tmp_path, make_out, fragment):
    out = make_out(tmp_path)
    result = cli("sweep", "--networks", "lenet_c", "--out", str(out), "--no-progress")
    assert result.returncode == 2 and fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_repeated_axis_values_run_once(cli, tmp_path):
    out = tmp_path / "s.csv"
    result = cli("sweep", "--networks", "lenet_c,lenet_c", "--strategies", "data,data",
                 "--accelerators", "4,4", "--engine", "analytic", "--out", str(out), "--no-progress")
    assert result.returncode == 0 and len(pd.read_csv(out)) == 1


def test_output_files_have_the_usual_permissions(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    try:
        run_sweep([Case("lenet_c", "data", "htree", 2, 64)], tmp_path / "s.csv",
                  executor="serial", progress=False)
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "s.csv").stat().st_mode) == 0o644


@pytest.mark.slow  # a default run on 2 cores stays under 5 minutes
def test_partition_axes_are_swept_and_resumed(tmp_path, cli):
    """Hierarchies, kind sets, searches and traffic models are axes and part of the resume
    key: each combination is its own row, and a rerun runs nothing again."""
    out = tmp_path / "kinds.csv"
    args = ("sweep", "--networks", "lenet_c", "--strategies", "hypar", "--accelerators", "12",
            "--hierarchies", "3x2x2,2x3x2", "--kinds", "batch,in;batch,in,out",
            "--searches", "greedy,joint", "--traffic-models", "layout", "--batch", "24",
            "--executor", "serial", "--no-progress", "--out", str(out))
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    table = pd.read_csv(out)
    assert len(table) == 8 and table.error.isna().all()
    assert set(table.hierarchy) == {"3x2x2", "2x3x2"} and set(table.search) == {"greedy", "joint"}
    assert set(table.kinds) == {"batch,in", "batch,in,out"}
    assert (table.traffic_model == "layout").all()
    assert (table["config.hierarchy"] == table.hierarchy).all()  # the run used the axis
    joint = table[table.search == "joint"].set_index(["hierarchy", "kinds"]).traffic_bytes
    greedy = table[table.search == "greedy"].set_index(["hierarchy", "kinds"]).traffic_bytes
    assert (joint <= greedy * (1 + 1e-12)).all()
    before = out.read_text()
    again = cli(*args)
    assert again.returncode == 0 and out.read_text() == before
    bad = cli("sweep", "--networks", "lenet_c", "--accelerators", "12", "--hierarchies", "4x4",
              "--out", str(tmp_path / "bad.csv"))
    assert bad.returncode == 2 and "--hierarchies: 4x4 has 16 members" in bad.stderr


@pytest.mark.slow  # real processes and sleeps
def test_sweep_exits_1_when_a_row_failed_and_130_when_interrupted(tmp_path):
    """Failed rows: the others written, a one-line summary, exit 1. Ctrl-C (SIGINT to the
    process group, as a terminal sends it): one line, exit 130, no traceback, whole rows."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd

    out = tmp_path / "bad.csv"
    done = subprocess.run([sys.executable, "-m", "hypar_sim", "sweep", "--networks", "lenet_c",
                           "--strategies", "data,hypar", "--accelerators", "4", "--batch", "2,8",
                           "--out", str(out), "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 1 and "rows in" in done.stdout
    assert done.stderr.count("\n") == 1 and "runs failed" in done.stderr
    assert len(pd.read_csv(out)) == 4
    out = tmp_path / "long.csv"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "hypar_sim", "sweep", "--networks", "vgg_d,vgg_e",
         "--strategies", "data,model,hypar", "--accelerators", "32,64", "--out", str(out),
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    time.sleep(4)
    os.killpg(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().count("\n") == 0
    assert "interrupted;" in stderr and "rerun to resume" in stderr
    if out.exists():
        assert pd.read_csv(out).shape[0] < 12


def test_run_options_are_axes_of_the_sweep(tmp_path):
    """Objective and overlap are swept like the rest and are part of each row's key; a
    strategy that takes no objective (data) runs once, the others once per objective. (HyPar's
    reading, whose gradients are exchanged layer by layer: under `layout` lenet_c's 1.7 MB of
    gradients are one bucket, sent after the backward pass either way.)"""
    spec = SweepSpec(networks=("lenet_c",), strategies=("data", "optimal"), accelerators=(4,),
                     batches=(64,), engines=("analytic",), objectives=("bytes", "time"),
                     overlaps=(True, False), traffic_models=("paper",))
    cases = spec.cases()
    assert len(cases) == 2 + 4
    out = tmp_path / "s.csv"
    rows = run_sweep(cases, out, executor="serial", progress=False)
    table = pd.read_csv(out)
    assert not any(row["error"] for row in rows)
    assert sorted(zip(table.strategy, table.objective, table.overlap, strict=True)) == [
        ("data", "bytes", False), ("data", "bytes", True),
        ("optimal", "bytes", False), ("optimal", "bytes", True),
        ("optimal", "time", False), ("optimal", "time", True)]
    no_overlap = table[(table.strategy == "data") & ~table.overlap].latency_s.iloc[0]
    assert no_overlap > table[(table.strategy == "data") & table.overlap].latency_s.iloc[0]
    run_sweep(cases, out, executor="serial", progress=False)  # every row resumed, none rerun
    assert pd.read_csv(out).wall_s.tolist() == table.wall_s.tolist()


def test_phases_are_an_axis_and_an_older_csv_resumes(tmp_path):
    """`sweep --phases training,forward` (issue "Hardening": sweep had no --phases): a
    forward row is the inference, faster and without gradient traffic; a CSV written before
    the phases column existed resumes as training rows instead of running again."""
    spec = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                     batches=(64,), engines=("analytic",), phases=("training", "forward"))
    out = tmp_path / "s.csv"
    run_sweep(spec.cases(), out, executor="serial", progress=False)
    table = pd.read_csv(out).set_index("phases")
    assert table.loc["forward"].latency_s < table.loc["training"].latency_s
    assert table.loc["forward"].traffic_bytes == 0 < table.loc["training"].traffic_bytes
    older = tmp_path / "old.csv"
    table.reset_index().query("phases == 'training'").drop(columns="phases").to_csv(
        older, index=False)
    training = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                         batches=(64,), engines=("analytic",))
    walls = pd.read_csv(older).wall_s.tolist()
    run_sweep(training.cases(), older, executor="serial", progress=False)
    assert pd.read_csv(older).wall_s.tolist() == walls  # resumed, not rerun


def test_optimizers_are_an_axis():
    """`sweep --optimizers sgd,adam`: Adam's update reads and writes two moments per
    parameter, a longer and costlier step; rows without the column resume as sgd."""
    spec = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                     batches=(64,), engines=("analytic",), optimizers=("sgd", "adam"))
    rows = {row["optimizer"]: row for row in
            (run_case(case) for case in spec.cases())}
    assert rows["adam"]["energy_j"] > rows["sgd"]["energy_j"]
    assert rows["adam"]["latency_s"] > rows["sgd"]["latency_s"]


def test_training_options_are_axes_and_an_older_csv_resumes(tmp_path):
    """`sweep --precisions fp32,bf16 --zeros 0,1 --recomputes none,full`: bf16 halves the
    bytes, ZeRO 1 moves the same bytes, full recomputation takes longer; a CSV written before
    these columns resumes as fp32, ZeRO 0, no recomputation."""
    spec = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                     batches=(64,), precisions=("fp32", "bf16"), zeros=(0, 1),
                     recomputes=("none", "full"))
    out = tmp_path / "t.csv"
    run_sweep(spec.cases(), out, executor="serial", progress=False)
    table = pd.read_csv(out).set_index(["precision", "zero", "recompute"])
    assert len(table) == 8 and table.error.isna().all()
    assert table.loc[("bf16", 0, "none")].traffic_bytes * 2 == \
        table.loc[("fp32", 0, "none")].traffic_bytes
    assert table.loc[("fp32", 1, "none")].traffic_bytes == \
        table.loc[("fp32", 0, "none")].traffic_bytes
    assert table.loc[("fp32", 0, "full")].latency_s > table.loc[("fp32", 0, "none")].latency_s
    older = tmp_path / "old.csv"
    plain = table.reset_index().query("precision == 'fp32' and zero == 0 and "
                                      "recompute == 'none'")
    plain.drop(columns=["precision", "zero", "recompute"]).to_csv(older, index=False)
    walls = pd.read_csv(older).wall_s.tolist()
    base = SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                     batches=(64,))
    run_sweep(base.cases(), older, executor="serial", progress=False)
    assert pd.read_csv(older).wall_s.tolist() == walls  # resumed, not rerun


def test_pipelines_are_axes():
    """`sweep --pipelines 1,2 --microbatches 2,4`: without a pipeline one row (one
    micro-batch), with one a row per micro-batch count, each with its bubble."""
    spec = SweepSpec(networks=("workloads/examples/mlp.yaml",), strategies=("data",),
                     accelerators=(4,), batches=(16,), pipelines=(1, 2), microbatches=(2, 4))
    cases = spec.cases()
    assert [(c.pipeline, c.microbatches) for c in cases] == [(1, 1), (2, 2), (2, 4)]
    rows = [run_case(case) for case in cases]
    assert all(not row.get("error") for row in rows)
    assert rows[0]["pipeline_idle_fraction"] == 0
    assert rows[1]["pipeline_idle_fraction"] > rows[2]["pipeline_idle_fraction"] > 0


def test_auto_is_an_axis_optimal_chooses(tmp_path):
    """`sweep --zeros 0,auto --recomputes auto --pipelines auto`: optimal chooses under the
    time objective (its choice in the row's config.* columns); the other strategies take
    the defaults, one row each; the sweep resumes."""
    spec = SweepSpec(networks=("lenet_c",), strategies=("optimal", "hypar"),
                     objectives=("time",), accelerators=(4,), batches=(64,),
                     optimizers=("adam",), zeros=(0, "auto"), recomputes=("auto",),
                     pipelines=("auto",))
    cases = spec.cases()
    assert [(c.strategy, c.zero, c.recompute, c.pipeline) for c in cases] == [
        ("optimal", 0, "auto", "auto"), ("optimal", "auto", "auto", "auto"),
        ("hypar", 0, "none", 1)]
    out = tmp_path / "s.csv"
    rows = run_sweep(cases, out, "serial")
    assert all(not row.get("error") for row in rows)
    chosen = rows[1]
    assert chosen["zero"] == "auto" and chosen["config.zero"] in (0, 1, 2, 3)
    assert chosen["config.recompute"] in ("none", "full") and chosen["config.stages"] >= 1
    assert rows[0]["config.zero"] == 0 and rows[2]["config.recompute"] == "none"
    again = pd.read_csv(out)
    assert len(run_sweep(cases, out, "serial")) == 3 and pd.read_csv(out).equals(again)


def test_the_des_budget_is_every_cases_and_an_older_csv_resumes(tmp_path):
    """`sweep --des-messages N` gives every case the DES's budget of messages simulated one
    by one (`run --des-messages`): 0 groups every step (`group_operations` counts them),
    the default none on a small array; the budget is an input column, and a CSV written
    before it existed resumes as the default's rows instead of running again."""
    def spec(budget):
        return SweepSpec(networks=("lenet_c",), strategies=("data",), accelerators=(4,),
                         batches=(64,), des_messages=budget)
    out = tmp_path / "s.csv"
    run_sweep([*spec(0).cases(), *SweepSpec(networks=("lenet_c",), strategies=("data",),
                                            accelerators=(4,), batches=(64,)).cases()],
              out, executor="serial", progress=False)
    table = pd.read_csv(out).set_index("des_messages")
    assert table.loc[0].group_operations > 0 == table.loc[DEFAULT_DES_MESSAGES].group_operations
    older = tmp_path / "old.csv"
    table.reset_index().query("des_messages != 0").drop(columns="des_messages").to_csv(
        older, index=False)
    walls = pd.read_csv(older).wall_s.tolist()
    run_sweep(spec(DEFAULT_DES_MESSAGES).cases(), older, executor="serial", progress=False)
    assert pd.read_csv(older).wall_s.tolist() == walls  # resumed, not rerun

"""Issue "Hardening", item 1: a run's output files land together or not at all, and
standard output that cannot be written is one line, not a traceback."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from hypar_sim import atomic
from hypar_sim.atomic import write_together
from hypar_sim.cli import main, one_line
from hypar_sim.errors import InputError


def test_a_failed_file_leaves_none_of_the_others(tmp_path, monkeypatch):
    """The second file fails (a full disk): the first is not renamed into place and no
    hidden temporary file stays behind; the old content of an existing output is kept."""
    (tmp_path / "a.csv").write_text("old\n")
    real = atomic._temporary
    calls = []

    def full_disk_on_second(path, write):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, write)

    monkeypatch.setattr(atomic, "_temporary", full_disk_on_second)
    with pytest.raises(InputError, match="cannot write .*t.json .No space left on device"):
        write_together({tmp_path / "a.csv": b"new\n", tmp_path / "t.json": b"{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]
    assert (tmp_path / "a.csv").read_text() == "old\n"
    monkeypatch.setattr(atomic, "_temporary", real)
    write_together({tmp_path / "a.csv": b"new\n", tmp_path / "t.json": b"{}"})
    assert (tmp_path / "a.csv").read_text() == "new\n" and (tmp_path / "t.json").exists()
    assert not list(tmp_path.glob(".*"))


def test_a_refused_rename_restores_the_files_renamed_before_it(tmp_path, monkeypatch):
    """Renaming the second file into place fails (an immutable file, found by the audit:
    `run --csv` left the new .config.json beside the old CSV): the first gets its old
    content back, a new one is removed, and no temporary or backup file stays."""
    (tmp_path / "a.json").write_text("old a\n")
    real = atomic.os.replace
    calls = []

    def refuse_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", refuse_second)
    with pytest.raises(InputError, match="cannot write .*b.csv .Operation not permitted"):
        write_together({tmp_path / "a.json": b"new a\n", tmp_path / "b.csv": b"new b\n",
                        tmp_path / "c.svg": b"new c\n"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old a\n"


def test_an_error_quoting_a_line_break_stays_one_line(capsys):
    assert one_line("unknown key 'fo\no'") == "unknown key 'fo\\no'"
    assert main(["run", "lenet_c", "--set", "fo\no=1"]) == 2
    assert capsys.readouterr().err == "hypar-sim run: error: --set: unknown key 'fo\\no'; " \
        "see `hypar-sim hardware` for the keys\n"


def test_run_outputs_arrive_together(tmp_path, capsys, monkeypatch):
    """`run --csv --trace`: the trace failing to render left the CSV without its trace and
    a hidden .tmp file; now the CSV, its configuration and the trace land together."""
    import hypar_sim.commands as commands

    def interrupted(files):
        raise KeyboardInterrupt

    argv = ["run", "lenet_c", "--accelerators", "4", "--batch", "16", "--csv",
            str(tmp_path / "l.csv"), "--trace", str(tmp_path / "t.json")]
    monkeypatch.setattr(commands, "write_together", interrupted)
    assert main(argv) == 130
    assert not list(tmp_path.iterdir())
    monkeypatch.undo()
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.csv", "l.csv.config.json",
                                                         "t.json"]
    capsys.readouterr()


def test_two_outputs_onto_one_file_are_refused(tmp_path, capsys):
    path = str(tmp_path / "x.json")
    assert main(["run", "lenet_c", "--csv", path, "--trace", path]) == 2
    assert capsys.readouterr().err.strip() == \
        "hypar-sim run: error: --csv, --trace: give each output its own file"
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_standard_output_on_a_full_device_is_one_line():
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "hypar_sim", "networks"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "hypar-sim networks: error: standard output: cannot write " \
                          "(No space left on device)\n"

"""The closing and heading lines every sweep report shares: the machines and commits of
its cells, and their training time counted from steps and rates (a resumed cell counts
all its steps)."""

from weirdnet_lab.sweep.writing import machine_lines, progress_lines


def _record(cpu: str, commit: str, commits=None, **extra) -> dict:
    return {"machine": {"cpu_model": cpu, "torch": "2.13.0+cpu"}, "commit": commit,
            **({"commits": commits} if commits else {}), **extra}


def test_every_machine_and_commit_is_named():
    done = {"a": _record("Intel Xeon", "1" * 40),
            "b": _record("AMD EPYC", "3" * 40, commits=["2" * 40, "3" * 40 + "+dirty"]),
            "c": _record("AMD EPYC", "4" * 40)}
    assert machine_lines(done) == [
        "- machine: Intel Xeon (1 cell); torch 2.13.0+cpu; commit 1111111111",
        "- machine: AMD EPYC (2 cells); torch 2.13.0+cpu; commits 2222222222, "
        "3333333333+dirty, 4444444444"]
    assert machine_lines({}) == []


def test_a_report_names_its_machines_units_and_details_its_own_way():
    done = {"a": _record("EPYC", "1" * 40, torch_threads=1),
            "b": _record("EPYC", "2" * 40, torch_threads=2)}
    done["b"]["machine"]["transformers"] = "5.24.0"
    lines = machine_lines(done, name=lambda r: r["machine"]["cpu_model"] + ", 2 cores",
                          unit="run", details=lambda rs: "threads " + ", ".join(
                              str(r["torch_threads"]) for r in rs))
    assert lines == ["- machine: EPYC, 2 cores (2 runs); threads 1, 2; torch 2.13.0+cpu, "
                     "transformers 5.24.0; commits 1111111111, 2222222222"]


def test_training_time_counts_a_resumed_cells_every_step():
    done = {"resumed": _record("x", "1", steps=300, cpu_steps_per_s=0.03, wall_s=1.2,
                               resumed=True),
            "old": _record("x", "1", wall_s=1800.0)}  # no rate: its wall time
    line = progress_lines(["resumed", "old", "todo"], done, [])[0]
    assert line.startswith("2 of 3 cells done; their training time 3.28 h ")

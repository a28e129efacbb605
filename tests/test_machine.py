"""The machine state recorded with every latency, and the measured default thread count."""

import torch

from sjdbench import machine


def test_busy_means_more_load_than_cores():
    assert machine.is_busy(2.5, 2) and not machine.is_busy(2.0, 2) and not machine.is_busy(None, 2)


def test_snapshot_takes_the_larger_load_and_says_whether_it_was_busy(monkeypatch):
    monkeypatch.setattr(machine, "cpus_available", lambda: 2)
    monkeypatch.setattr(machine, "load_1m", lambda: 1.2)
    quiet = machine.snapshot("cpu", load_before=0.4)
    assert quiet["load_1m"] == 1.2 and quiet["busy"] is False and quiet["cpus"] == 2
    assert quiet["torch_threads"] == torch.get_num_threads() and quiet["cpu"] and quiet["gpu"] is None
    busy = machine.snapshot("cpu", load_before=3.7)  # the load fell during the decode: still busy
    assert busy["load_1m"] == 3.7 and busy["busy"] is True


def test_default_threads_one_on_cpu_unless_asked(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(machine, "cpus_available", lambda: 4)
    assert machine.choose_threads(None, "cpu") == machine.DEFAULT_CPU_THREADS == 1
    assert machine.choose_threads(3, "cpu") == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert machine.choose_threads(None, "cpu") == 2  # an explicit environment wins over the default


def test_threads_beyond_the_cpus_are_clamped_to_them(monkeypatch):
    """threads=1000 once started a thousand threads (a toy sample took a minute); the run uses the
    CPUs it may run on, and says so before it starts (config.ranges.spec_notes)."""
    from sjdbench.config.ranges import spec_notes
    from sjdbench.config.schema import compose_checked

    monkeypatch.setattr(machine, "cpus_available", lambda: 2)
    assert machine.choose_threads(1000, "cpu") == 2
    assert machine.choose_threads(2, "cpu") == 2
    monkeypatch.setattr("sjdbench.config.ranges.cpus_available", lambda: 2)
    config, decoder = compose_checked(["threads=1000"])
    (note,) = [n for n in spec_notes(config, decoder, 8, 8) if n.startswith("threads=")]
    assert "the run uses 2" in note


def test_a_run_applies_its_thread_count(tmp_path, monkeypatch):
    from sjdbench.config import compose_run
    from sjdbench.run.runner import execute

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        outcome = execute(
            compose_run(
                [
                    "model=debug",
                    "model.options.grid_h=3",
                    "model.options.grid_w=3",
                    "data.limit=1",
                    "warmup=0",
                    "threads=2",
                    f"results_dir={tmp_path}",
                ]
            )
        )
        from sjdbench.results.store import RunStore

        (row,) = RunStore(tmp_path, outcome.run_id).rows()
        assert row["machine"]["torch_threads"] == 2
    finally:
        torch.set_num_threads(before)

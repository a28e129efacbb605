"""Runner and store: results layout, resume after interruption, nothing lost, nothing repeated."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sjdbench.config import compose_run
from sjdbench.results.store import RunStore, append_jsonl, read_jsonl
from sjdbench.run.runner import execute

SMALL = ["model=debug", "model.options.grid_h=4", "model.options.grid_w=4", "data=smoke", "warmup=0"]


def config(tmp_path, *extra):
    return compose_run([*SMALL, f"results_dir={tmp_path}", *extra])


def test_run_writes_the_layout(tmp_path):
    outcome = execute(config(tmp_path, "data.limit=3"))
    run = Path(outcome.run_dir)
    assert outcome.status == "finished" and outcome.new_samples == 3
    for name in ("config.yaml", "env.json", "samples.jsonl", "summary.json"):
        assert (run / name).exists(), name
    rows = read_jsonl(run / "samples.jsonl")
    assert [r["prompt_id"] for r in rows] == [0, 1, 2]
    assert all((run / r["image"]).exists() for r in rows)
    summary = json.loads((run / "summary.json").read_text())
    for key in (
        "n_samples",
        "n_tokens",
        "nfe_mean",
        "step_compression",
        "acceptance_rate",
        "acceptance_rate_no_fresh",
        "mean_accepted_length",
        "latency_s_mean",
        "latency_s_median",
        "tokens_per_s",
        "growth_share",
        "growth_precision",
        "run_id",
        "model",
        "decoder",
        "complete",
    ):
        assert key in summary, key
    assert summary["complete"] is False and summary["n_samples"] == 3 and summary["n_wanted"] == 8  # 3 of smoke's 8
    assert summary["nfe_mean"] == sum(r["nfe"] for r in rows) / 3
    for row in rows:  # every latency comes with the machine it was timed on and how
        assert set(row["machine"]) >= {"load_1m", "cpus", "torch_threads", "busy", "cpu", "gpu", "host"}
        assert row["timing"]["mode"] == "single" and len(row["timing"]["session"]) == 12
    assert {r["timing"]["session"] for r in rows} == {rows[0]["timing"]["session"]}  # one command, one session
    assert summary["busy_samples"] == sum(r["machine"]["busy"] for r in rows)
    assert summary["latency_trusted"] is (summary["busy_samples"] == 0)
    assert summary["timing_modes"] == {"single": 3}
    env = json.loads((run / "env.json").read_text())
    assert env["torch"] and env["device"] == "cpu"


def test_finished_run_is_reported_not_redone(tmp_path):
    first = execute(config(tmp_path, "data.limit=2"))
    second = execute(config(tmp_path, "data.limit=2"))
    assert second.status == "done" and second.new_samples == 0
    assert second.run_id == first.run_id
    assert len(read_jsonl(Path(first.run_dir) / "samples.jsonl")) == 2


def test_two_presets_that_build_one_decoder_share_a_readable_run(tmp_path):
    """`decoder=lantern` and `decoder=sjd decoder/verifier=lantern` build one decoder, so they share one
    run; the second command finds it complete, and the run stays readable (its summary keeps the
    preset its config.yaml names) instead of being reported as damaged."""
    from sjdbench.results.runs import runs_frame

    first = execute(config(tmp_path, "data.limit=2", "decoder=lantern"))
    second = execute(config(tmp_path, "data.limit=2", "decoder=sjd", "decoder/verifier=lantern"))
    assert second.run_id == first.run_id and second.status == "done" and second.new_samples == 0
    summary = json.loads((Path(first.run_dir) / "summary.json").read_text())
    assert summary["decoder_preset"] == "lantern" and summary["decoder"] == "lantern"
    frame = runs_frame(tmp_path)  # raises UserError naming the damage when the files disagree
    assert list(frame["run_id"]) == [first.run_id] and list(frame["decoder_preset"]) == ["lantern"]


def test_interrupted_run_resumes_without_loss_or_repeats(tmp_path):
    partial = execute(config(tmp_path, "data.limit=5"), limit_new=2)
    assert partial.status == "partial" and partial.new_samples == 2
    before = read_jsonl(Path(partial.run_dir) / "samples.jsonl")
    resumed = execute(config(tmp_path, "data.limit=5"))
    after = read_jsonl(Path(resumed.run_dir) / "samples.jsonl")
    assert resumed.new_samples == 3
    assert [r["prompt_id"] for r in after] == [0, 1, 2, 3, 4]
    assert after[:2] == before  # earlier rows untouched


def test_resumed_samples_equal_uninterrupted_ones(tmp_path):
    """One generator per (seed, prompt): interruption does not change what is sampled."""
    a = tmp_path / "a"
    b = tmp_path / "b"
    execute(config(a, "data.limit=4"), limit_new=1)
    execute(config(a, "data.limit=4"))
    execute(config(b, "data.limit=4"))
    tokens = lambda root: [r["tokens"] for r in RunStore(root, execute(config(root, "data.limit=4")).run_id).rows()]  # noqa: E731
    assert tokens(a) == tokens(b)


def test_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "samples.jsonl"
    append_jsonl(path, {"prompt_id": 0})
    with open(path, "a") as handle:
        handle.write('{"prompt_id": 1, "tok')  # killed mid-write
    assert read_jsonl(path) == [{"prompt_id": 0}]


@pytest.mark.slow  # about 16 s: a killed subprocess; store resumption stays in make test (test_reliability)
def test_kill_during_run_then_resume(tmp_path):
    """A real SIGKILL in the middle of `sjdbench run`, then the same command completes the run."""
    args = [sys.executable, "-m", "sjdbench", "run", *SMALL, f"results_dir={tmp_path}", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    samples = None
    while time.time() < deadline:
        found = list(tmp_path.glob("runs/*/samples.jsonl"))
        if found and len(read_jsonl(found[0])) >= 2:
            samples = found[0]
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert samples is not None, "the run produced no rows before the deadline"
    done_before = len(read_jsonl(samples))
    finished = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    rows = read_jsonl(samples)
    ids = [r["prompt_id"] for r in rows]
    assert sorted(ids) == list(range(8)) and len(ids) == len(set(ids))
    assert done_before <= 8


def test_prompt_files(tmp_path):
    from sjdbench.data.prompts import load_prompts
    from sjdbench.errors import UserError

    tsv = tmp_path / "parti.tsv"
    tsv.write_text('Prompt\tCategory\n"G I G G L E" painted\tArt\nA cat\tAnimals\n')
    cfg = compose_run(["data=file", f"data.path={tsv}", "data.column=Prompt"])
    prompts, _ = load_prompts(cfg.data)
    assert [p.text for p in prompts] == ['"G I G G L E" painted', "A cat"]  # quotes survive
    csv_file = tmp_path / "p.csv"
    csv_file.write_text("id,prompt\n1,a dog\n2,a fish\n3,a bird\n")
    cfg = compose_run(["data=file", f"data.path={csv_file}", "data.shard=1/2"])
    prompts, _ = load_prompts(cfg.data)
    assert [(p.prompt_id, p.text) for p in prompts] == [(1, "a fish")]
    with pytest.raises(UserError, match="no column 'caption'"):
        load_prompts(compose_run(["data=file", f"data.path={csv_file}", "data.column=caption"]).data)


def test_runs_frame_collects_summaries(tmp_path):
    from sjdbench.results.runs import runs_frame

    execute(config(tmp_path, "data.limit=1"))
    execute(config(tmp_path, "data.limit=1", "decoder=ar"))
    frame = runs_frame(tmp_path)
    assert sorted(frame["decoder"]) == ["ar", "sjd"]
    assert (frame.loc[frame.decoder == "ar", "step_compression"] == 1.0).all()


def test_retrained_weights_get_a_new_run_id(tmp_path):
    """Results of different weights never mix: the run id includes a fingerprint of the weight files."""
    import shutil

    from sjdbench.config.resolve import resolve_run
    from sjdbench.models.toy.model import META_FILE, WEIGHTS_DIR

    copy = tmp_path / "weights"
    shutil.copytree(WEIGHTS_DIR, copy)
    base = ["model=toy", "data=smoke", f"results_dir={tmp_path}"]
    shipped = resolve_run(compose_run([*base, f"model.options.weights_dir={copy}"])).run_id
    assert shipped == resolve_run(compose_run([*base, f"model.options.weights_dir={copy}"])).run_id  # stable
    meta = json.loads((copy / META_FILE).read_text())
    meta["final"]["val_loss"] += 1e-6  # another training run
    (copy / META_FILE).write_text(json.dumps(meta))
    assert resolve_run(compose_run([*base, f"model.options.weights_dir={copy}"])).run_id != shipped


def test_env_records_the_weights_fingerprint(tmp_path):
    from sjdbench.models.registry import resolve_model

    outcome = execute(compose_run(["model=toy", "data=smoke", "data.limit=1", "warmup=0", f"results_dir={tmp_path}"]))
    env = json.loads((Path(outcome.run_dir) / "env.json").read_text())
    assert env["weights"] == resolve_model("toy", {}).fingerprint() and len(env["weights"]) == 16
    assert resolve_model("debug", {}).fingerprint() is None


def test_a_run_makes_one_store_object_and_reads_its_samples_once(tmp_path, monkeypatch):
    """Per command, each run has one store object (checks, lock, writes and summary share it) and
    reads its sample files once before decoding (under its lock); paired runs likewise."""
    from collections import Counter

    from sjdbench.config.resolve import resolve_run
    from sjdbench.run.runner import execute_runs

    made: Counter = Counter()
    reads: Counter = Counter()
    real_init, real_done = RunStore.__init__, RunStore.done_keys

    def counting_init(self, root, run_id, shard=None):
        made[run_id] += 1
        real_init(self, root, run_id, shard)

    def counting_done(self):
        reads[self.run_id] += 1
        return real_done(self)

    monkeypatch.setattr(RunStore, "__init__", counting_init)
    monkeypatch.setattr(RunStore, "done_keys", counting_done)
    outcome = execute(config(tmp_path, "data.limit=2", "decoder=sjd", "decoder.window=3"))
    assert outcome.status == "finished"
    assert made == {outcome.run_id: 1} and reads == {outcome.run_id: 1}
    made.clear(), reads.clear()
    runs = [resolve_run(config(tmp_path, "data.limit=3", *words)) for words in (["decoder=ar"], ["decoder=lantern"])]
    outcomes = execute_runs(runs, timing_mode="paired")
    assert [o.status for o in outcomes] == ["finished", "finished"]
    assert made == {r.run_id: 1 for r in runs} and reads == {r.run_id: 1 for r in runs}


@pytest.mark.slow  # about 9 s: a toy LANTERN decode; the verifier's own test is fast
def test_env_records_the_lantern_k_the_model_gave(tmp_path):
    words = ["model=toy", "decoder=lantern", "data=smoke", "data.limit=1", "warmup=0", f"results_dir={tmp_path}"]
    outcome = execute(compose_run(words))
    env = json.loads((Path(outcome.run_dir) / "env.json").read_text())
    assert env["lantern_k"] == 62  # the released 1000 of 8192 codes, at the toy's 512

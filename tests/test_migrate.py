"""Runs written by the previous sjdbench (ids hashed the flat decoder config) are re-keyed, not lost
and not mixed. The fixture is a real schema-1 run: LANTERN with k = 5 on the debug model, 2 smoke
prompts, decoded with what is now `reading=ours_all` (schema 1 had only our readings)."""

import json
import shutil
from pathlib import Path

from sjdbench.config import compose_run
from sjdbench.config.migrate import legacy_runs, migrate_store
from sjdbench.config.resolve import resolve_run
from sjdbench.run.runner import execute

FIXTURE = Path(__file__).parent / "data" / "legacy_run"
OLD_ID = "debug-lantern-e8cd28f3363f"


def legacy_store(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "runs" / OLD_ID)
    return tmp_path


def test_legacy_run_is_rekeyed_to_todays_id_and_resumed_not_redone(tmp_path):
    root = legacy_store(tmp_path)
    assert [p.name for p in legacy_runs(root)] == [OLD_ID]
    config = compose_run(
        [
            "model=debug",
            "decoder=lantern",
            "decoder.verifier.k=5",
            "decoder.verifier.reading=ours_all",
            "data=smoke",
            "data.limit=2",
            f"results_dir={root}",
        ]
    )
    new_id = resolve_run(config).run_id
    assert [m.status for m in migrate_store(root, dry_run=True)] == ["would move"]
    assert (root / "runs" / OLD_ID).exists()

    moves = migrate_store(root)
    assert [(m.old_id, m.new_id, m.status) for m in moves] == [(OLD_ID, new_id, "moved")]
    assert legacy_runs(root) == []
    env = json.loads((root / "runs" / new_id / "env.json").read_text())
    assert env["schema"] == 2 and env["migrated_from"] == OLD_ID
    outcome = execute(config)
    assert outcome.status == "done" and outcome.new_samples == 0 and outcome.summary["n_samples"] == 2
    assert outcome.summary["decoder"] == "lantern(k=5,reading=ours_all)"


def test_a_migrated_id_that_already_exists_is_left_alone(tmp_path):
    root = legacy_store(tmp_path)
    config = compose_run(
        [
            "model=debug",
            "decoder=lantern",
            "decoder.verifier.k=5",
            "decoder.verifier.reading=ours_all",
            "data=smoke",
            "data.limit=2",
            f"results_dir={root}",
            "warmup=0",
            "save_images=false",
        ]
    )
    execute(config)  # the user re-ran before migrating
    moves = migrate_store(root)
    assert [m.status for m in moves] == ["exists (left alone)"]
    assert (root / "runs" / OLD_ID / "samples.jsonl").exists()

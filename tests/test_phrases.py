"""SJD-PV's phrase-level verification: the rule, the phrase table mined from a model's AR runs (what it
counts, its provenance, its refusals), the shipped toy table, and the lossy decoder measured against
exact AR (slow)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.decoding.parts import ParentDrafts
from sjdbench.decoding.verifiers.exact import ExactVerifier
from sjdbench.decoding.verifiers.phrases import PhrasesConfig, PhraseVerifier, default_table, load_table
from sjdbench.errors import UserError

runner = CliRunner()


def parents(tokens, p, q, drafted):
    return ParentDrafts(
        torch.tensor(tokens), torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64),
        torch.tensor(drafted),
    )  # fmt: skip


def test_a_phrase_passes_by_its_summed_likelihood_ratio():
    verifier = PhraseVerifier(PhrasesConfig(), pairs=[(7, 2)])
    p = torch.tensor([[0.1, 0.2, 0.05, 0.65]] * 4, dtype=torch.float64)
    q = torch.tensor([[0.1, 0.1, 0.5, 0.3]] * 4, dtype=torch.float64)
    drafts = torch.tensor([2, 2, 2, 2])  # p/q = 0.1: alone it passes for u < 0.1 only
    u = torch.full((4,), 0.5, dtype=torch.float64)
    # parent token 7 with p = 0.9, q = 0.3: joint (0.05 + 0.9) / (0.5 + 0.3) > 1 passes any u;
    # not a phrase (token 8); a root parent (not drafted); a phrase whose partner carries little
    parent = parents([7, 8, 7, 7], [0.9, 0.9, 0.0, 0.01], [0.3, 0.3, 0.0, 0.9], [True, True, False, True])
    assert verifier.accept(p, q, drafts, u, parent=parent).tolist() == [True, False, False, False]
    assert ExactVerifier().accept(p, q, drafts, u).tolist() == [False] * 4


def test_a_joint_pass_never_accepts_a_token_the_model_cannot_write():
    verifier = PhraseVerifier(PhrasesConfig(), pairs=[(7, 2)])
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    parent = parents([7], [0.99], [0.01], [True])
    assert not verifier.accept(p, q, torch.tensor([2]), torch.tensor([0.0]), parent=parent).item()


def test_without_a_phrase_it_is_the_exact_test():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, 9, generator=g), -1)
    q = torch.softmax(torch.randn(64, 9, generator=g), -1)
    drafts, u = torch.randint(9, (64,), generator=g), torch.rand(64, generator=g)
    parent = parents([1] * 64, [0.9] * 64, [0.1] * 64, [True] * 64)
    verifier = PhraseVerifier(PhrasesConfig(), pairs=[(2, 3)])
    tokens_1 = drafts != -1  # every draft; the phrase (2, 3) never has parent 1
    assert torch.equal(verifier.accept(p, q, drafts, u, parent=parent), ExactVerifier().accept(p, q, drafts, u))
    assert tokens_1.all()


@pytest.fixture(scope="module")
def ar_store(tmp_path_factory):
    from sjdbench.config.schema import compose_run
    from sjdbench.run.runner import execute

    root = tmp_path_factory.mktemp("phrases")
    execute(compose_run(["model=toy", "data=toy", "data.limit=2", "warmup=0", "decoder=ar", f"results_dir={root}"]))
    return root


def test_mining_counts_consecutive_pairs_and_records_where_they_came_from(ar_store):
    from sjdbench.results.store import RunStore
    from sjdbench.run.phrases import ar_runs, mine

    table = mine(ar_store, "toy", min_count=2, min_pmi=0.0, max_pairs=50)
    (run_id,) = ar_runs(ar_store, "toy")
    rows = RunStore(ar_store, run_id).rows()
    pairs, singles = Counter(), Counter()
    for row in rows:
        pairs.update(zip(row["tokens"], row["tokens"][1:]))
        singles.update(row["tokens"])
    assert table["runs"] == [run_id] and table["samples"] == 2 and table["model"] == "toy"
    assert table["pairs_seen"] == len(pairs) and table["criterion"]["min_count"] == 2
    assert 0 < len(table["pairs"]) <= 50
    T, S = sum(pairs.values()), sum(singles.values())
    for a, b, count, pmi in table["pairs"]:
        assert count == pairs[(a, b)] >= 2
        assert pmi == pytest.approx(math.log(count * S**2 / (T * singles[a] * singles[b])), abs=1e-3)
    counts = [c for _, _, c, _ in table["pairs"]]
    assert counts == sorted(counts, reverse=True)


def test_the_command_writes_a_table_the_verifier_loads_and_refuses_in_one_line(ar_store, tmp_path):
    out = tmp_path / "toy_phrases.json"
    done = runner.invoke(app, ["phrases", "mine", "model=toy", f"results_dir={ar_store}", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert load_table(out, "toy")["pairs"]
    again = runner.invoke(app, ["phrases", "mine", "model=toy", f"results_dir={ar_store}", "--out", str(out)])
    assert again.exit_code != 0 and "exists; give another --out, or --overwrite" in again.output
    empty = runner.invoke(
        app, ["phrases", "mine", "model=debug", f"results_dir={ar_store}", "--out", str(tmp_path / "d")]
    )
    assert empty.exit_code != 0 and "no AR run of model 'debug'" in empty.output
    with pytest.raises(UserError) as error:
        load_table(out, "lumina")
    assert "was mined for model 'toy', not 'lumina'" in str(error.value)
    with pytest.raises(UserError) as error:
        load_table(tmp_path / "none.json", "lumina")
    assert "sjdbench phrases mine model=lumina" in str(error.value) and "\n" not in str(error.value)


def test_the_shipped_toy_table_was_mined_from_the_toys_own_ar_samples():
    table = json.loads(default_table("toy").read_text())
    assert table["model"] == "toy" and table["samples"] >= 100 and len(table["pairs"]) > 100
    assert all(count >= table["criterion"]["min_count"] for _, _, count, _ in table["pairs"])


def test_sjd_pv_runs_on_the_toy(tmp_path):
    from sjdbench.config.schema import compose_run
    from sjdbench.results.store import RunStore
    from sjdbench.run.runner import execute

    outcome = execute(
        compose_run(["model=toy", "data=toy", "data.limit=1", "warmup=0", "decoder=sjd_pv", f"results_dir={tmp_path}"])
    )
    (row,) = RunStore(tmp_path, outcome.run_id).rows()
    assert row["accepted"] > 0 and row["n_tokens"] > row["nfe"]

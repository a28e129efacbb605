"""The config's range checks ask the topology, by name of the question, never by the topology's name:
how many slots a forward can use, how long a position stays in the window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sjdbench.config import compose_run, decoder_spec
from sjdbench.config.ranges import fit_to_model
from sjdbench.decoding.parts import NoKnobs, Topology
from sjdbench.decoding.topologies.chain import ChainTopology
from sjdbench.errors import UserError
from sjdbench.models.debug import build_debug_adapter


@pytest.fixture(scope="module")
def debug():
    return build_debug_adapter(grid_h=4, grid_w=4, n_codes=16, init_std=0.5)


def fitted(debug, *overrides: str, topology: Topology | None = None):
    resolved = decoder_spec(compose_run(list(overrides)))
    built = resolved.build(debug)
    if topology is not None:
        built = replace(built, topology=topology)
    return fit_to_model(resolved, "debug", built, debug)


def test_each_topology_says_its_useful_window(debug):
    n = debug.layout.n_positions
    assert fitted(debug, "decoder=sjd", "decoder.window=1000")[0].window == n
    assert fitted(debug, "decoder=pjd", "decoder.window=1000")[0].window == n
    tree, notes = fitted(debug, "decoder=sjd_pac", "decoder.topology.width=2", "decoder.window=1000")
    assert tree.window == 1 + 2 + 4 + n  # the full tree's branches (depth 3), then the main path to the end
    assert any(f"use decoder.window=1..{tree.window}" in note for note in notes)


def test_a_topology_that_does_not_say_its_useful_window_is_refused_not_unclamped(debug):
    class Silent(Topology[NoKnobs]):
        Config = NoKnobs

    with pytest.raises(UserError) as error:
        fitted(debug, "decoder=sjd", "decoder.window=1000", topology=Silent())
    assert "does not say how many slots a forward can use" in str(error.value) and "\n" not in str(error.value)


def test_the_growth_note_asks_how_long_a_position_stays(debug):
    """A chain or tree window of W slots holds a position for at most W iterations; rows in flight
    below the leading one may wait longer, so they give no bound and no note."""
    for preset in ("sjd", "sjd_pac"):
        _, notes = fitted(debug, f"decoder={preset}", "decoder.window=3")
        assert any("a position stays in the window for at most 3 iterations" in n for n in notes), preset
    _, notes = fitted(debug, "decoder=pjd", "decoder.window=3")
    assert not any("stays in the window" in n for n in notes)
    assert ChainTopology().longest_stay(5) == 5 and Topology().longest_stay(5) is None

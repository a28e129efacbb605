"""Run configuration: the typed schema composed with Hydra (schema.py), run identity (identity.py),
and re-keying of runs written by an older sjdbench (migrate.py)."""

from sjdbench.config.schema import (
    DataConfig,
    DecoderConfig,
    ModelConfig,
    RunConfig,
    SamplingOverrides,
    available_groups,
    build_preset,
    compose_run,
    decoder_spec,
    group_choices,
    to_yaml,
)

__all__ = [
    "DataConfig",
    "DecoderConfig",
    "ModelConfig",
    "RunConfig",
    "SamplingOverrides",
    "available_groups",
    "build_preset",
    "compose_run",
    "decoder_spec",
    "group_choices",
    "to_yaml",
]

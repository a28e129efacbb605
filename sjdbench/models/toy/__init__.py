"""The embedded toy model: procedural world, k-means patch tokenizer, trained transformer, toy CLIP.

Entry points: `sjdbench.models.toy.model.build_toy_adapter`, `sjdbench.models.toy.clip.load_toy_clip`,
`sjdbench.models.toy.train.train_toy`, `sjdbench.models.toy.world.dataset`. See docs/TOY.md.
"""

"""The embedded toy model as an adapter: k-means patch tokenizer, word-level caption encoder and the
trained transformer, loaded from the shipped weights (`weights/`).

Entry point: `sjdbench.models.toy.model.build_toy_adapter` (its registry entry is
`sjdbench.models.toy.model.MODEL`, named by conf/model/toy.yaml). The world it was trained on, its
trainer and the toy CLIP live in `sjdbench.toyworld`.
"""

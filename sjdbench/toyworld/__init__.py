"""The toy's world and what is trained on it: the procedural scene grammar (`world`), its captions and
renders, the oracle object finder (`objects`), the toy model's trainer (`train`) and the toy CLIP
(`clip`). The toy *model* is an adapter like the others (`sjdbench.models.toy`); this package is
what made it, and what scores its samples offline. See docs/TOY.md.
"""

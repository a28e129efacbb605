"""Window topologies, one per file; registered by `conf/decoder/topology/<name>.yaml`.

A topology decides the shape of every forward: `chain` (one chain of drafts, SJD's window),
`tree` (a K-ary prefix tree of drafts verified by recursive rejection sampling over siblings), `rows`
(several image rows in flight, each its own chain, with a row-causal mask). `forest.py` holds what
they share: verification of a forest of drafts, and which slots re-propose the next drafts.
"""

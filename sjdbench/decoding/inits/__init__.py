"""Fresh-draft initialisations, one per file; registered by `conf/decoder/init/<name>.yaml`.

Every init is deterministic given the generator, so a fresh draft's reference q is one-hot and MRS
acceptance is simply p(d). Forced positions always get their forced token.
"""

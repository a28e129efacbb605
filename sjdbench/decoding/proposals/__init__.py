"""Draft proposals, one per file; registered by `conf/decoder/proposal/<name>.yaml`."""

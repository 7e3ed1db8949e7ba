"""The plan cache: a decision kept on disk under a key of everything that can change it.

``key`` (the key's ingredients, canonical JSON and its SHA-256, fast weight hashing),
``record_store`` (records on disk: a bundle plus its ingredients, atomic writes, records that
cannot be read set aside), ``comeback`` (how a cached plan's provider serves it again:
load its artifact, rebuild from the model, or rebuild with torch's compile caches
restored), ``revalidate`` (a hit is checked before it is trusted: validation against a
fresh reference, the constraints and a short paired probe against the baseline) and
``explain`` (what differs between two keys). See docs/cache.md.

This package imports nothing itself, so the CLI can list records without loading torch.
"""

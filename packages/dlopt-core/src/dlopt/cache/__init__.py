"""The plan cache: a decision kept on disk under a key of everything that can change it.

``key`` (the key's ingredients, canonical JSON and its SHA-256, fast weight hashing),
``record_store`` (records on disk: a bundle plus its ingredients, atomic writes, records
that cannot be read set aside), ``reload`` (how a saved plan is served again: loaded from
its artifacts, rebuilt from the model, or rebuilt with torch's compile caches restored;
``bring_back``, the one way a winner comes back), ``recheck`` (a hit is checked before it
is trusted: validation against a fresh reference, the constraints and a short paired
probe against the baseline), ``lookup`` (look a key up, store a decision),
``kept_rounding`` (the reference's fp32 rounding, kept with a record and read back on a
hit) and ``user_priors`` (the user's own evidence for priors: the reports of earlier
selections in the cache, read only where a race could vouch for them). See docs/cache.md.

This package imports nothing itself, so the CLI can list records without loading torch.
"""

"""A decision on disk: a bundle is written and verified.

``store`` (``write_bundle`` and ``verify_bundle``: the report, the plan's artifacts and a
manifest of their hashes; nothing is unpickled or run). Serving a bundle again is
:func:`dlopt.api.bundles.load_bundle`.
"""

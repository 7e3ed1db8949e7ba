"""A decision on disk: a bundle is written, verified and served again.

``store`` (``write_bundle`` and ``verify_bundle``: the report, the plan's artifacts and a
manifest of their hashes; nothing is unpickled or run) and ``serve`` (``load_bundle``: a
verified bundle's plan rebuilt and checked on this machine).
"""

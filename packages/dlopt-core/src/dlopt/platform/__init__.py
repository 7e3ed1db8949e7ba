"""Helpers every layer may use; they import nothing from the rest of dlopt but errors.

``machine`` (CPU facts: ISA flags, bf16 support), ``probing`` (SDK probing helpers:
installed versions, guarded imports, output capture of what an SDK prints),
``tree`` (the walker over nested outputs: tuples, dicts, dataclasses, pytrees),
``arrays`` (tensors handed to runtimes that read numpy arrays),
``serialization`` (strict JSON through cattrs: never NaN), ``fileio`` (atomic, capped,
permission-aware file writes), ``npz`` (``.npz`` archives read without unpickling),
``sizes`` (what torch can index and what memory can hold), ``processes`` (the processes a
process started, found and ended: nothing an isolated worker starts outlives it),
``containment`` (a decision's containment: the helper processes its plans start and a
temp directory of its own, ``TMPDIR``/``TMP``/``TEMP`` and Inductor's cache directory
scoped to it while plans are built and brought back; released when the decision
closes), ``interrupt`` (a deadline that abandons a block of third-party code, such as a
plan's build, in the thread that runs it), ``names`` (plan names that can never become
paths), ``config_checks`` (attrs validators for configuration values) and ``retired``
(retired public names that still work, with a warning).
"""

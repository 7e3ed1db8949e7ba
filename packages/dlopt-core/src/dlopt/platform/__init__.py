"""Helpers every layer may use; they import nothing from the rest of dlopt but errors.

``machine`` (CPU facts: ISA flags, bf16 support), ``probing`` (SDK probing helpers:
installed versions, guarded imports, output capture of what an SDK prints),
``tree`` (the walker over nested outputs: tuples, dicts, dataclasses, pytrees),
``arrays`` (tensors handed to runtimes that read numpy arrays),
``serialization`` (strict JSON through cattrs: never NaN), ``fileio`` (atomic, capped,
permission-aware file writes), ``processes`` (the processes a process started, found and
ended: nothing an isolated worker starts outlives it), ``names`` (plan names that can
never become paths) and ``config_checks`` (attrs validators for configuration values).
"""

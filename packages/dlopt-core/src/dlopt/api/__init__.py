"""What users call: the optimizer and the bundle loader.

``optimizer`` (``InferenceOptimizer``: checks what it is given, converts the workload once
and runs :func:`dlopt.engine.select.select` in process or in a supervised worker) and
``bundles`` (``load_bundle``: a verified bundle's plan loaded or rebuilt on this machine,
served as a decision).

The names users import are re-exported, lazily, by the top-level ``dlopt`` package; this
package imports nothing itself.
"""

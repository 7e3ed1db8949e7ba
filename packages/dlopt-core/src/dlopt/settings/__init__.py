"""The value types every stage reads, below all of them: what a user sets.

``target`` (``ExecutionTarget``: where plans compute and are called), ``workload``
(``WorkloadCase``, ``WorkloadProfile``: the serving inputs, their traffic weights and the
calling context), ``policy`` (``OptimizationPolicy``, ``DeploymentConstraints``: the
objective, the constraints and every switch of a selection), ``measurement``
(``MeasurementPolicy``: how the race measures), ``quality`` (``QualityPolicy``,
``QualityLimits``: what outputs must reproduce) and ``guard`` (``GuardPolicy``: how a
decision guards its plan in production). They import no stage, so validation,
measurement and the plugin contract can read them.

This package imports nothing itself; users import these names from ``dlopt``.
"""

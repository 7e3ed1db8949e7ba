"""The public API: what a user builds, calls and gets back.

``target`` (``ExecutionTarget``: where plans compute), ``workload`` (``WorkloadProfile``:
the serving inputs and their traffic weights), ``policy`` (``OptimizationPolicy`` and
``DeploymentConstraints``: what "better" means and the limits), ``optimizer``
(``InferenceOptimizer``: wires the stages of :mod:`dlopt.pipeline` in order) and
``decision`` (``OptimizationDecision``: the served plan plus its report).

The names users import are re-exported, lazily, by the top-level ``dlopt`` package; this
package imports nothing itself, so loading ``dlopt.settings.target`` does not load the optimizer.
"""

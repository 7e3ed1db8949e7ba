"""Process isolation: a selection run in a supervised worker that a crash or hang cannot
take down (``OptimizationPolicy(isolation="process")``, ``dlopt select --isolate``).

- ``journal``: the worker's strict-JSON-lines journal and the shared heartbeat that says
  which plan is in which call since when.
- ``transfer``: what crosses the process boundary: the worker's spec (strict JSON) and
  the workload's tensors in an ``.npz`` the host wrote (read without pickle).
- ``worker``: the worker's entry point (``python -m dlopt.isolation.worker SPEC``).
- ``supervisor``: starts workers, runs the watchdogs, names the culprit of a crash or a
  hang, resumes without it, and brings the winner back into the host.

See docs/isolation.md.
"""

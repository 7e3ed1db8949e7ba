"""The benchmark suite (issue 20): dlopt vs custom-dl-optimizer vs an oracle, one command.

- ``models``: the eight workloads (random weights, fixed seed).
- ``worker``: one measurement in a fresh process (a dlopt or peer decision, the oracle).
- ``oracle``: each validated plan built again (independently where practical) for timing.
- ``timing``: interleaved rounds and the median's order-statistic interval (torch-free).
- ``results``: records, regret, stability, targets and the Markdown table (torch-free).
- ``run``: the command: runs the workers under timeouts and writes docs/benchmarks/.
"""

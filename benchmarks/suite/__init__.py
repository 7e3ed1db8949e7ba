"""The benchmark suite (issues 20 and 39): dlopt vs custom-dl-optimizer vs an oracle, one command.

- ``models``: the nine workloads (random weights, fixed seed).
- ``worker``: one measurement in a fresh process (a dlopt decision, default or under a
  20 s budget, a peer decision, the oracle).
- ``oracle``: each plan dlopt validated or did not build, built (independently where
  practical) for timing.
- ``timing``: interleaved rounds and the median's order-statistic interval (torch-free).
- ``results``: records, regret, stability, targets and the Markdown table (torch-free).
- ``run``: the command: runs the workers under timeouts and writes docs/benchmarks/.
"""

"""The fleet: qualify many models on many machine kinds with one command, on Ray.

Each (job, machine kind) of a fleet spec is one Ray task that runs the isolated selection
on a node of that kind, one race per node at a time; its decision lands as a plan cache
record in the spec's result store, where serving processes on that kind of machine find
it. Ray is an optional dependency (``pip install 'dlopt-core[fleet]'``), imported only
inside the functions that talk to it. docs/fleet.md is the user's guide.

Modules:

- ``spec``: the fleet spec (TOML), read strictly; models named through the
  ``dlopt.models`` entry points (``factories``), machine kinds as labels or resources.
- ``factories``: the ``dlopt.models`` entry-point group (no import to list or name one).
- ``result_store``: the result store (a directory or an fsspec URL): plan cache records and
  each run's evidence (``FleetResult``).
- ``task``: what one Ray task runs on its node: the isolated selection, its evidence.
- ``runner``: ``dlopt fleet run``: Ray started or joined, one task per (job, kind),
  progress, retries of infrastructure failures, Ctrl-C.
- ``summary``: the table across jobs and machine kinds, and its CSV/LaTeX/HTML output.
"""

#: How long joining a cluster (``--address auto`` or ``ray://``) may take before it is an
#: error (``dlopt fleet run --connect-timeout``).
DEFAULT_CONNECT_TIMEOUT_S = 30.0
#: How long the races of a machine kind wait for a node of the kind after its last node
#: left the cluster, before they are reported lost (``--lost-node-wait``).
DEFAULT_LOST_NODE_WAIT_S = 60.0

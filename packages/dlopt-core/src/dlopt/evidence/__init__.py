"""The evidence of a selection: the report schema, its assembly and provenance.

``report`` (``OptimizationReport`` and ``CandidateEvidence``: the strict-JSON schema, its
version, saving and loading), ``assembly`` (``build_report``: one report from the
pipeline's typed results), ``provenance`` (``RuntimeInfo``: the machine, software and
plugins a decision was made on) and ``machine_load`` (how busy the machine was around the
selection, and whether that makes it busy).
"""

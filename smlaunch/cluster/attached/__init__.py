"""Cluster pieces only the attached path uses: matching a running cluster's nodes to the
config's groups, and its plan."""

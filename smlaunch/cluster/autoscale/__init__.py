"""Elastic data hosts: the policy (pure) and the controller that asks Ray's autoscaler (issue 42)."""

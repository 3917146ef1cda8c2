"""The resource manager: pods, containers and the active policy, their persistent cache, and placement diffs.

Modules: ``resource_manager`` (the relay's hook and the owner of the state), ``cache`` (the JSON cache
under ``--relay-dir``), ``placement_diff`` (which other containers a decision changed). The pod and
container model it works on is ``resmgr.model``.
"""

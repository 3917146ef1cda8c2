"""The ``none`` policy: tracks containers, changes nothing."""

from __future__ import annotations

from resmgr.model.explanation import POLICY_NONE
from resmgr.policy.base import Policy


class NonePolicy(Policy):
    name = "none"
    description = "A no-op policy: containers run where the runtime puts them."
    unplaced_reason = POLICY_NONE

"""When the agent's target counts a connection to cri-resmgr as lost (resmgr/agent/target.LossDetector).

A loss makes the agent deliver config and adjustments again; a loss counted where there was none pushed a
rejected config twice, under load, because grpc delivered a CONNECTING it had read before the first answer."""

from __future__ import annotations

import grpc
import pytest

from resmgr.agent.target import LossDetector

IDLE = grpc.ChannelConnectivity.IDLE
CONNECTING = grpc.ChannelConnectivity.CONNECTING
READY = grpc.ChannelConnectivity.READY
FAILURE = grpc.ChannelConnectivity.TRANSIENT_FAILURE
SHUTDOWN = grpc.ChannelConnectivity.SHUTDOWN
ANSWER = "answer"


def losses(events: list) -> int:
    """Feed delivered states and answered calls in order, as the target sees them; count the losses."""
    detector, lost = LossDetector(), 0
    for event in events:
        if event == ANSWER:
            detector.answer()
        else:
            lost += detector.delivered(event)
    return lost


@pytest.mark.parametrize("events,expected", [
    # grpc delivered every state in time
    ([IDLE, CONNECTING, READY, ANSWER, ANSWER], 0),
    ([IDLE, CONNECTING, READY, ANSWER, IDLE, CONNECTING, READY, ANSWER], 1),
    ([IDLE, CONNECTING, READY, FAILURE, CONNECTING, FAILURE, CONNECTING, READY], 1),
    ([IDLE, CONNECTING, READY, SHUTDOWN], 1),
    # a CONNECTING read on the way to READY, delivered after the first answer (seen under load)
    ([IDLE, ANSWER, CONNECTING, READY, ANSWER], 0),
    # ... and on the way back after a loss: one loss, not two
    ([IDLE, CONNECTING, READY, IDLE, ANSWER, CONNECTING, READY], 1),
    # READY skipped: the connection dropped right after the call that proved it
    ([IDLE, CONNECTING, ANSWER, IDLE], 1),
    ([IDLE, CONNECTING, ANSWER, FAILURE, CONNECTING, READY], 1),
    ([IDLE, ANSWER, FAILURE], 1),
    # ... also after a late CONNECTING (a restarted cri-resmgr went unnoticed that way)
    ([IDLE, ANSWER, CONNECTING, IDLE], 1),
    ([IDLE, ANSWER, CONNECTING, FAILURE, CONNECTING, READY], 1),
    # no connection was ever made: failures to connect are not losses
    ([IDLE, CONNECTING, FAILURE, CONNECTING, FAILURE], 0),
])
def test_losses(events: list, expected: int) -> None:
    assert losses(events) == expected

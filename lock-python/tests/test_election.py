"""Leader election on every store: one leader, followers that name it, resignation, with blocks, lead()."""

from __future__ import annotations

import asyncio
from typing import Callable

import pytest

import lease_lock
from lease_lock import LockClient, Role

Clients = Callable[..., LockClient]


def until_role(election: lease_lock.Election, kind: str, limit: float = 10.0) -> Role:
    """Wait (at most ``limit`` seconds) until ``election``'s role is of ``kind``."""
    role = election.role
    while role.kind != kind:
        changed = election.wait_role_change(timeout=limit)
        assert changed is not None, f"still {election.role} after {limit} s"
        role = changed
    return role


def test_one_candidate_leads_and_the_other_follows_it_by_name(clients: Clients) -> None:
    alice, bob = clients("alice", refresh=0.1), clients("bob", refresh=0.1)
    first = alice.elect("leader", data=b"10.0.0.1:8080")
    leadership = first.leadership(timeout=10)
    assert leadership is not None
    fence = leadership.fence
    assert (leadership.key, leadership.is_safe) == ("leader", True) and fence >= 1
    assert leadership.data == b"10.0.0.1:8080"
    assert first.is_leader and first.terms == 1
    assert first.role == Role(kind="leader", fence=fence, leader=None, data=None)

    second = bob.elect("leader")
    role = until_role(second, "follower")
    assert role == Role(kind="follower", fence=fence, leader="alice", data=b"10.0.0.1:8080")
    assert not second.is_leader and second.terms == 0
    assert second.leadership(timeout=0.3) is None

    # Resigning hands leadership on: bob leads at his next poll.
    first.resign()
    assert not first.campaigning and not first.is_leader
    first.resign()  # twice does nothing
    taken = second.leadership(timeout=10)
    assert taken is not None and taken.fence == fence + 1
    assert until_role(first, "campaigning") == Role(kind="campaigning", fence=None, leader=None, data=None)
    second.resign()
    info = alice.get_lock("leader")
    assert info is not None and info.released


def test_a_with_block_resigns_and_a_closed_client_ends_the_campaign(clients: Clients) -> None:
    alice = clients("alice")
    with alice.elect("scheduler") as election:
        leadership = election.leadership(timeout=10)
        assert leadership is not None and leadership.fence >= 1
        assert leadership.wait_unsafe(timeout=0.1) is None
    info = alice.get_lock("scheduler")
    assert info is not None and info.released and info.fence == leadership.fence
    assert "campaigning" in repr(election)

    waiting = alice.elect("scheduler")
    assert waiting.leadership(timeout=10) is not None
    alice.close()
    with pytest.raises(lease_lock.ClientClosed):
        waiting.leadership(timeout=10)
    assert waiting.role.kind == "campaigning"


def test_bad_input_is_refused_before_anything_is_written(clients: Clients) -> None:
    alice = clients("alice")
    with pytest.raises(lease_lock.InvalidInput):
        alice.elect("")
    with pytest.raises(lease_lock.ConfigError):
        alice.elect("leader", lease=0)
    with pytest.raises(TypeError):
        alice.elect("leader", retry_min="1s")  # type: ignore[arg-type]
    assert alice.list_locks() == []


def test_lead_cancels_the_work_when_leadership_is_taken_away(clients: Clients) -> None:
    alice, operator = clients("alice", lease=2), clients("operator")
    cancelled: list[bool] = []
    led: list[int] = []

    async def work(leadership: lease_lock.Leadership) -> int:
        assert leadership.fence >= 1
        led.append(leadership.fence)
        await operator.force_release_async("leader")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return leadership.fence

    async def main() -> None:
        async with alice.elect("leader") as election:
            with pytest.raises(lease_lock.LockLost) as raised:
                await election.lead(work)
            assert raised.value.reason is not None
            assert cancelled == [True] and len(led) == 1
            # It campaigns again and leads again, with a higher fence.
            again = await election.leadership_async(timeout=10)
            assert again is not None and again.fence == led[0] + 1
            assert await election.lead(lambda leadership: asyncio.sleep(0, leadership.fence)) == led[0] + 1
        assert not election.campaigning

    asyncio.run(asyncio.wait_for(main(), timeout=30))


def test_two_candidates_of_one_client_hand_over_in_one_write(clients: Clients) -> None:
    alice = clients("alice")
    first = alice.elect("leader")
    led = first.leadership(timeout=10)
    assert led is not None
    second = alice.elect("leader")
    # Queued inside the client behind the first: it reads nothing.
    assert second.leadership(timeout=0.2) is None
    assert second.role.kind == "campaigning"
    first.resign()
    taken = second.leadership(timeout=10)
    assert taken is not None and taken.fence == led.fence + 1
    second.resign()

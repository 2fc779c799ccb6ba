"""Episode ids the broker mints carry a tag of its signing key, so any replica (or a restarted broker) tells
an id it minted for a host, now gone (session_lost), from one it never minted (episode_not_found)."""

from __future__ import annotations

import pytest

from gymsandbox.broker.service import episode_name, minted_for
from gymsandbox.desired.names import DNS_LABEL_MAX
from gymsandbox.leases import SigningKey

KEY = SigningKey.generate()
HOST, HOST_UID = "swe-gym-run-1", "5f0c1f6e-1111-4a4a-8b8b-000000000001"


def test_a_minted_id_is_recognised_by_any_holder_of_the_key_and_only_for_its_host() -> None:
    episode_id = episode_name(HOST, HOST_UID, None, KEY)
    assert episode_id.startswith(f"{HOST}-ep-")
    assert minted_for(episode_id, HOST, HOST_UID, SigningKey.from_bytes(KEY.to_bytes()))  # another replica
    assert not minted_for(episode_id, HOST, "another-uid", KEY)  # a namesake host, recreated
    assert not minted_for(episode_id, "other-host", HOST_UID, KEY)
    assert not minted_for(episode_id, HOST, HOST_UID, SigningKey.generate())  # another cluster's key


def test_a_retried_create_names_the_same_episode_and_a_new_one_another() -> None:
    assert episode_name(HOST, HOST_UID, "key-1", KEY) == episode_name(HOST, HOST_UID, "key-1", KEY)
    assert episode_name(HOST, HOST_UID, "key-1", KEY) != episode_name(HOST, HOST_UID, "key-2", KEY)
    assert episode_name(HOST, HOST_UID, None, KEY) != episode_name(HOST, HOST_UID, None, KEY)


@pytest.mark.parametrize(
    "guess",
    ["", "x", f"{HOST}-ep-0123456789abcdef01", f"{HOST}-ep-{'0' * 18}", "ep-" + "a" * 200],
)
def test_ids_the_broker_never_minted_are_not_taken_for_closed_ones(guess: str) -> None:
    assert not minted_for(guess, HOST, HOST_UID, KEY)


def test_a_long_host_name_still_gives_a_dns_label_that_is_recognised() -> None:
    host = "h" * 80
    episode_id = episode_name(host, HOST_UID, "k", KEY)
    assert len(episode_id) <= DNS_LABEL_MAX
    assert minted_for(episode_id, host, HOST_UID, KEY)

"""Egress allowlists: parsing entries and model endpoints, forbidden address space, resolution."""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Sequence

import pytest

from gymsandbox.api.gymhost import Egress
from gymsandbox.policy.egress import (
    BoundedResolver,
    EgressError,
    EgressTarget,
    IPNetwork,
    ResolutionError,
    ResolvedTarget,
    check_forbidden,
    egress_targets,
    model_endpoint_target,
    parse_allow_entry,
    resolve,
    system_resolver,
)

CLOSED = "which the cluster policy does not open (egress.allowedPrivateCIDRs)"


def net(cidr: str) -> IPNetwork:
    return ipaddress.ip_network(cidr)


def no_dns(host: str) -> list[str]:
    raise AssertionError(f"unexpected DNS lookup of {host}")


class FakeResolver:
    """Answers from a table and records each lookup."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    def __call__(self, host: str) -> list[str]:
        self.lookups.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


# --- parse_allow_entry ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "host", "port", "kind", "network"),
    [
        ("api.example.com:443", "api.example.com", 443, "dns", None),
        ("API.Example.com:443", "api.example.com", 443, "dns", None),
        ("a-b.c-d.example:1", "a-b.c-d.example", 1, "dns", None),
        ("203.0.113.10:8080", "203.0.113.10", 8080, "ip", "203.0.113.10/32"),
        ("203.0.113.0/24:443", "203.0.113.0/24", 443, "cidr", "203.0.113.0/24"),
        ("203.0.113.10/32:443", "203.0.113.10/32", 443, "cidr", "203.0.113.10/32"),
        ("[2001:db8::1]:443", "2001:db8::1", 443, "ip", "2001:db8::1/128"),
        ("[2001:DB8:0::1]:443", "2001:db8::1", 443, "ip", "2001:db8::1/128"),
        ("[2001:db8::/32]:65535", "2001:db8::/32", 65535, "cidr", "2001:db8::/32"),
    ],
)
def test_parses_allow_entry(entry: str, host: str, port: int, kind: str, network: str | None) -> None:
    target = parse_allow_entry(entry)
    assert (target.host, target.port, target.kind) == (host, port, kind)
    assert target.network == (net(network) if network else None)


@pytest.mark.parametrize(
    ("target", "entry"),
    [
        (parse_allow_entry("[2001:DB8::1]:443"), "[2001:db8::1]:443"),
        (parse_allow_entry("[2001:db8::/32]:443"), "[2001:db8::/32]:443"),
        (parse_allow_entry("203.0.113.10:80"), "203.0.113.10:80"),
        (parse_allow_entry("Api.Example.com:80"), "api.example.com:80"),
    ],
)
def test_entry_is_written_back_normalized(target: EgressTarget, entry: str) -> None:
    assert target.entry == entry


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("api.example.com:0", "port 0 is out of range 1-65535"),
        ("api.example.com:70000", "port 70000 is out of range 1-65535"),
        ("api.example.com:https", 'port "https" is not a number'),
        ("api.example.com:", 'port "" is not a number'),
        ("api.example.com", "expected host:port"),
        ("*.example.com:443", "wildcards are not supported"),
        ("*:443", "wildcards are not supported"),
        (":443", "the host is empty"),
        ("[]:443", "the host is empty"),
        ("10.0.0.1/8:80", '"10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?'),
        ("[2001:db8::1/32]:80", "has host bits set; did you mean 2001:db8::/32?"),
        ("10.0.0.0/33:80", '"10.0.0.0/33" is not a valid CIDR'),
        ("10.0.0.0/255.0.0.0:80", "is not a CIDR"),
        ("999.1.1.1:80", '"999.1.1.1" is not a valid IP address'),
        ("1.2.3:80", '"1.2.3" is not a valid IP address'),
        ("010.0.0.1:80", '"010.0.0.1" is not a valid IP address'),
        ("2001:db8::1:443", "IPv6 addresses must be in brackets"),
        ("[2001:db8::1]443", "expected [IPv6 address or CIDR]:port"),
        ("[2001:db8::1:443", "expected [IPv6 address or CIDR]:port"),
        ("[203.0.113.10]:80", "brackets are only for IPv6"),
        ("[example.com]:80", "is not a valid IP address"),
        ("[fe80::1%eth0]:80", "is not a valid IP address"),
        ("localhost:80", '"localhost" is not a fully qualified DNS name'),
        ("kubernetes:443", "is not a fully qualified DNS name"),
        ("under_score.example.com:80", "is not a valid DNS name"),
        ("-lead.example.com:80", "is not a valid DNS name"),
        ("double..dot.example:80", "is not a valid DNS name"),
        (f"{'a' * 64}.example.com:80", "is not a valid DNS name"),
        ("example.123:80", "is not a valid IP address or DNS name"),
    ],
)
def test_refuses_malformed_entry(entry: str, message: str) -> None:
    with pytest.raises(EgressError, match=re.escape(message)) as caught:
        parse_allow_entry(entry)
    assert caught.value.entry == entry


def test_error_names_the_entry() -> None:
    with pytest.raises(EgressError) as caught:
        parse_allow_entry("api.example.com:0")
    assert str(caught.value) == 'egress entry "api.example.com:0": port 0 is out of range 1-65535'


# --- model_endpoint_target -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "entry", "kind"),
    [
        ("https://api.openai.example", "api.openai.example:443", "dns"),
        ("https://api.openai.example/v1/chat", "api.openai.example:443", "dns"),
        ("http://models.example.com/", "models.example.com:80", "dns"),
        ("https://models.example.com:8443/v1", "models.example.com:8443", "dns"),
        ("https://models.example.com/v1?api-version=2", "models.example.com:443", "dns"),
        ("HTTPS://Models.Example.com/v1", "models.example.com:443", "dns"),
        ("http://203.0.113.10:8080/v1", "203.0.113.10:8080", "ip"),
        ("https://[2001:db8::1]/v1", "[2001:db8::1]:443", "ip"),
        ("https://[2001:db8::1]:8443", "[2001:db8::1]:8443", "ip"),
    ],
)
def test_model_endpoint_becomes_host_and_port(url: str, entry: str, kind: str) -> None:
    target = model_endpoint_target(url)
    assert (target.entry, target.kind) == (entry, kind)


@pytest.mark.parametrize(
    ("url", "shown", "message"),
    [
        ("ftp://models.example.com/", "ftp://models.example.com/", "must be http:// or https:// URLs"),
        ("models.example.com:443", "models.example.com:443", "must be http:// or https:// URLs"),
        ("https://*.example.com/v1", "https://*.example.com/v1", "wildcards are not supported"),
        ("https://models.example.com:0/v1", "https://models.example.com:0/v1", "port 0 is out of range"),
        ("https:///v1", "https:///v1", "the host is empty"),
        ("https://[2001:db8::1/v1", "https://[2001:db8::1/v1", "not a valid URL"),
        ("https://localhost/v1", "https://localhost/v1", "not a fully qualified DNS name"),
    ],
)
def test_refuses_bad_model_endpoint(url: str, shown: str, message: str) -> None:
    with pytest.raises(EgressError, match=re.escape(message)) as caught:
        model_endpoint_target(url)
    assert caught.value.entry == shown


def test_refuses_credentials_in_endpoint_without_repeating_them() -> None:
    with pytest.raises(EgressError, match="credentials in the URL are not allowed") as caught:
        model_endpoint_target("https://user:hunter2@models.example.com/v1?key=sk-live-123")
    assert "hunter2" not in str(caught.value)
    assert "sk-live-123" not in str(caught.value)
    assert caught.value.entry == "https://***@models.example.com/v1"


def test_endpoint_errors_leave_out_query_and_fragment() -> None:
    with pytest.raises(EgressError) as caught:
        model_endpoint_target("https://models.example.com:0/v1?key=sk-live-123#token=abc")
    assert "sk-live-123" not in str(caught.value)
    assert "token=abc" not in str(caught.value)


# --- check_forbidden -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("127.0.0.1:80", "127.0.0.1 is in the loopback range 127.0.0.0/8"),
        ("127.255.255.254:80", "loopback range 127.0.0.0/8"),
        ("[::1]:80", "::1 is in the loopback range ::1/128"),
        ("169.254.169.254:80", "link-local range 169.254.0.0/16, which holds the cloud metadata address"),
        ("169.254.0.1:80", "link-local range 169.254.0.0/16"),
        ("[fe80::1]:80", "link-local range fe80::/10"),
        ("0.0.0.0:80", "0.0.0.0 is in the unspecified range 0.0.0.0/8"),
        ("0.1.2.3:80", "unspecified range 0.0.0.0/8"),
        ("[::]:80", ":: is in the unspecified range ::/128"),
        ("224.0.0.251:5353", "multicast range 224.0.0.0/4"),
        ("239.255.255.250:1900", "multicast range 224.0.0.0/4"),
        ("[ff02::1]:80", "multicast range ff00::/8"),
        ("240.0.0.1:80", "reserved range 240.0.0.0/4"),
        ("255.255.255.255:80", "reserved range 240.0.0.0/4"),
        ("[::ffff:127.0.0.1]:80", "(IPv4 127.0.0.1) is in the IPv4-mapped range ::ffff:0:0/96"),
        ("10.0.0.1:80", "10.0.0.1 is in the private range 10.0.0.0/8 (RFC 1918)"),
        ("10.255.255.255:80", "private range 10.0.0.0/8"),
        ("172.16.0.1:80", "private range 172.16.0.0/12"),
        ("172.31.255.254:80", "private range 172.16.0.0/12"),
        ("192.168.1.1:80", "private range 192.168.0.0/16"),
        ("100.64.0.1:80", "shared (carrier-grade NAT) range 100.64.0.0/10 (RFC 6598)"),
        ("100.127.255.254:80", "range 100.64.0.0/10"),
        ("[fc00::1]:80", "unique local range fc00::/7 (RFC 4193)"),
        ("[fd00:ec2::254]:80", "unique local range fc00::/7"),
    ],
)
def test_refuses_every_forbidden_range(entry: str, message: str) -> None:
    with pytest.raises(EgressError, match=re.escape(message)):
        check_forbidden(parse_allow_entry(entry), [])


@pytest.mark.parametrize(
    "entry",
    [
        "8.8.8.8:53",
        "9.255.255.255:80",
        "11.0.0.0/8:443",
        "8.0.0.0/7:443",
        "100.63.255.255:80",
        "100.128.0.1:80",
        "169.253.255.255:80",
        "169.255.0.1:80",
        "172.15.255.255:80",
        "172.32.0.1:80",
        "192.167.255.255:80",
        "192.169.0.1:80",
        "223.255.255.255:80",
        "[2606:4700::1111]:443",
        "[2001:db8::/32]:443",
        "[fe00::1]:80",
        "api.example.com:443",
    ],
)
def test_allows_public_space_next_to_forbidden_ranges(entry: str) -> None:
    check_forbidden(parse_allow_entry(entry), [])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("0.0.0.0/0:443", "0.0.0.0/0 overlaps the unspecified range"),
        ("0.0.0.0/1:443", "0.0.0.0/1 overlaps"),
        ("8.0.0.0/5:443", "8.0.0.0/5 overlaps the private range 10.0.0.0/8"),
        ("96.0.0.0/4:443", "overlaps the shared (carrier-grade NAT) range 100.64.0.0/10"),
        ("168.0.0.0/6:443", "overlaps the link-local range 169.254.0.0/16"),
        ("172.0.0.0/8:443", "overlaps the private range 172.16.0.0/12"),
        ("172.16.0.0/16:443", "overlaps the private range 172.16.0.0/12"),
        ("192.0.0.0/8:443", "overlaps the private range 192.168.0.0/16"),
        ("224.0.0.0/3:443", "overlaps the multicast range"),
        ("[::/0]:443", "::/0 overlaps"),
        ("[fc00::/6]:443", "fc00::/6 overlaps the link-local range fe80::/10"),
        ("[::ffff:0:0/104]:443", "overlaps the IPv4-mapped range"),
    ],
)
def test_refuses_cidr_containing_forbidden_range(entry: str, message: str) -> None:
    with pytest.raises(EgressError, match=re.escape(message)):
        check_forbidden(parse_allow_entry(entry), [])


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        ("10.20.30.40:443", ["10.20.30.0/24"]),
        ("10.20.30.0/25:443", ["10.20.30.0/24"]),
        ("10.20.30.0/24:443", ["10.20.30.0/24"]),
        ("10.20.30.40:443", ["192.168.0.0/16", "10.0.0.0/8"]),
        ("[fd12::1]:443", ["fd12::/16"]),
    ],
)
def test_allows_private_space_inside_an_allowed_cidr(entry: str, allowed: list[str]) -> None:
    check_forbidden(parse_allow_entry(entry), [net(a) for a in allowed])


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        ("10.20.31.1:443", ["10.20.30.0/24"]),
        ("10.20.0.0/16:443", ["10.20.30.0/24"]),
        ("10.20.30.0/23:443", ["10.20.30.0/24", "10.20.31.0/24"]),
        ("[fd13::1]:443", ["fd12::/16"]),
    ],
)
def test_refuses_private_space_not_entirely_inside_one_allowed_cidr(entry: str, allowed: list[str]) -> None:
    with pytest.raises(EgressError, match=re.escape(CLOSED)):
        check_forbidden(parse_allow_entry(entry), [net(a) for a in allowed])


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        ("127.0.0.1:80", "127.0.0.0/8"),
        ("169.254.169.254:80", "169.254.0.0/16"),
        ("0.0.0.0/0:80", "0.0.0.0/0"),
    ],
)
def test_allowed_private_cidrs_never_open_always_forbidden_ranges(entry: str, allowed: str) -> None:
    with pytest.raises(EgressError):
        check_forbidden(parse_allow_entry(entry), [net(allowed)])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("[64:ff9b::a00:1]:443", "in the NAT64 range 64:ff9b::/96, and 10.0.0.1 is in the private range"),
        ("[64:ff9b::10.0.0.1]:443", "and 10.0.0.1 is in the private range 10.0.0.0/8"),
        ("[64:ff9b::a9fe:a9fe]:80", "and 169.254.169.254 is in the link-local range"),
        ("[64:ff9b::7f00:1]:80", "and 127.0.0.1 is in the loopback range"),
        ("[64:ff9b::a00:0/104]:443", "NAT64 range 64:ff9b::/96, and 10.0.0.0/8 overlaps the private range"),
        ("[64:ff9b::/96]:443", "and 0.0.0.0/0 overlaps"),
        ("[64:ff9b::/64]:443", "and 0.0.0.0/0 overlaps"),
        ("[64:ff9b:1::808:808]:443", "local-use NAT64 range 64:ff9b:1::/48"),
        ("[2002:a00:1::1]:443", "in the 6to4 range 2002::/16, and 10.0.0.1 is in the private range"),
        ("[2002:a9fe:a9fe::/48]:443", "6to4 range 2002::/16, and 169.254.169.254 is in the link-local"),
        ("[2002:a00::/24]:443", "6to4 range 2002::/16, and 10.0.0.0/8 overlaps the private range"),
        ("[2002::/16]:443", "and 0.0.0.0/0 overlaps"),
        ("[2000::/3]:443", "6to4 range 2002::/16, and 0.0.0.0/0"),
        ("[2001:0:a00:1::1]:443", "Teredo (server) range 2001::/32, and 10.0.0.1 is in the private"),
        # The client address is stored inverted: f5ff:fffe is 10.0.0.1.
        ("[2001:0:808:808:0:0:f5ff:fffe]:443", "Teredo (client) range 2001::/32, and 10.0.0.1"),
        ("[::ffff:0:a00:1]:443", "IPv4-translated (SIIT) range ::ffff:0:0:0/96"),
        ("[::a00:1]:443", "IPv4-compatible range ::/96"),
        ("[::808:808]:443", "IPv4-compatible range ::/96"),
    ],
)
def test_refuses_every_ipv6_embedding_of_a_refused_ipv4_range(entry: str, message: str) -> None:
    with pytest.raises(EgressError, match=re.escape(message)):
        check_forbidden(parse_allow_entry(entry), [])


@pytest.mark.parametrize(
    "entry",
    [
        "[64:ff9b::808:808]:443",
        "[2002:808:808::1]:443",
        "[2001:0:808:808::f7f7:f7f7]:443",
        "[2001:db8::1]:443",
    ],
)
def test_allows_ipv6_embeddings_of_public_ipv4(entry: str) -> None:
    check_forbidden(parse_allow_entry(entry), [])


def test_embedding_of_an_opened_private_range_is_open_too() -> None:
    check_forbidden(parse_allow_entry("[64:ff9b::a14:1e28]:443"), [net("10.20.30.0/24")])


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        ("10.96.0.1:443", ["10.0.0.0/8"]),
        ("10.96.0.0/12:443", ["10.0.0.0/8"]),
        ("[64:ff9b::a60:1]:443", ["10.0.0.0/8"]),
        ("8.8.4.4:53", []),
        ("[2002:808:404::]:53", []),
    ],
)
def test_denied_cidrs_win_over_allowed_private_cidrs_and_public_space(entry: str, allowed: list[str]) -> None:
    with pytest.raises(EgressError, match=re.escape("which the cluster policy denies (egress.deniedCIDRs)")):
        check_forbidden(
            parse_allow_entry(entry),
            [net(a) for a in allowed],
            denied=[net("10.96.0.0/12"), net("8.8.4.0/24")],
        )


def test_denied_cidrs_refuse_what_a_name_resolves_to() -> None:
    resolver = FakeResolver({"svc.example.com": ["10.96.0.10"], "nat.example.com": ["64:ff9b::a60:a"]})
    for name in ("svc.example.com", "nat.example.com"):
        with pytest.raises(EgressError, match=re.escape(f"{name} resolves to")):
            resolve(
                [parse_allow_entry(f"{name}:443")],
                {},
                resolver,
                allowed_private=[net("10.0.0.0/8")],
                denied=[net("10.96.0.0/12")],
            )


def test_a_name_resolving_into_nat64_private_space_is_refused() -> None:
    resolver = FakeResolver({"sneaky.example.com": ["64:ff9b::a9fe:a9fe"]})
    with pytest.raises(EgressError, match=re.escape("169.254.169.254 is in the link-local range")):
        resolve([parse_allow_entry("sneaky.example.com:80")], {}, resolver)


# --- egress_targets ------------------------------------------------------------------------------------


def test_combines_allow_entries_then_model_endpoints_without_duplicates() -> None:
    egress = Egress.model_validate(
        {
            "allow": [
                "models.example.com:443",
                "203.0.113.10:80",
                "models.example.com:443",
                "203.0.113.10:80",
            ],
            "modelEndpoints": [
                "https://models.example.com/v1",
                "http://api.openai.example",
                "http://203.0.113.10/",
            ],
        }
    )
    assert [t.entry for t in egress_targets(egress)] == [
        "models.example.com:443",
        "203.0.113.10:80",
        "api.openai.example:80",
    ]


def test_no_egress_means_no_targets() -> None:
    assert egress_targets(Egress()) == []


def test_egress_targets_refuses_a_malformed_entry_rather_than_dropping_it() -> None:
    egress = Egress.model_validate({"allow": ["api.example.com:443", "10.0.0.1/8:80"]})
    with pytest.raises(EgressError, match="has host bits set"):
        egress_targets(egress)


# --- resolve -------------------------------------------------------------------------------------------


def test_resolves_static_hosts_without_dns() -> None:
    targets = [parse_allow_entry("models.example.com:443")]
    static = {"models.example.com": ["198.51.100.8", "198.51.100.7"]}
    assert resolve(targets, static, no_dns) == [
        ResolvedTarget("models.example.com:443", 443, ("198.51.100.7/32", "198.51.100.8/32"))
    ]


def test_static_hosts_take_precedence_over_dns() -> None:
    resolver = FakeResolver({"models.example.com": ["203.0.113.99"]})
    resolved = resolve(
        [parse_allow_entry("models.example.com:443")], {"models.example.com": ["198.51.100.7"]}, resolver
    )
    assert resolved[0].cidrs == ("198.51.100.7/32",)
    assert resolver.lookups == []


def test_resolves_other_names_with_the_resolver() -> None:
    resolver = FakeResolver({"api.example.com": ["203.0.113.20", "2001:db8::20"]})
    resolved = resolve([parse_allow_entry("api.example.com:443")], {}, resolver)
    assert resolved == [ResolvedTarget("api.example.com:443", 443, ("203.0.113.20/32", "2001:db8::20/128"))]


def test_cidrs_are_sorted_numerically_and_deduplicated() -> None:
    resolver = FakeResolver(
        {"api.example.com": ["2001:db8::2", "203.0.113.100", "203.0.113.9", "203.0.113.100"]}
    )
    resolved = resolve([parse_allow_entry("api.example.com:443")], {}, resolver)
    assert resolved[0].cidrs == ("203.0.113.9/32", "203.0.113.100/32", "2001:db8::2/128")


def test_addresses_and_cidrs_resolve_to_themselves() -> None:
    targets = [parse_allow_entry("203.0.113.10:80"), parse_allow_entry("[2001:db8::/32]:443")]
    assert resolve(targets, {}, no_dns) == [
        ResolvedTarget("203.0.113.10:80", 80, ("203.0.113.10/32",)),
        ResolvedTarget("[2001:db8::/32]:443", 443, ("2001:db8::/32",)),
    ]


def test_keeps_target_order_and_looks_each_name_up_once() -> None:
    resolver = FakeResolver({"api.example.com": ["203.0.113.20"]})
    targets = [parse_allow_entry("api.example.com:443"), parse_allow_entry("api.example.com:8443")]
    resolved = resolve(targets, {}, resolver)
    assert [(r.entry, r.port) for r in resolved] == [
        ("api.example.com:443", 443),
        ("api.example.com:8443", 8443),
    ]
    assert resolver.lookups == ["api.example.com"]


def test_lookup_failure_is_a_resolution_error() -> None:
    with pytest.raises(
        ResolutionError, match=re.escape('cannot resolve "gone.example.com": Name or service not known')
    ) as caught:
        resolve([parse_allow_entry("gone.example.com:443")], {}, FakeResolver({}))
    assert caught.value.host == "gone.example.com"


def test_resolution_error_is_not_an_egress_error() -> None:
    # A failed lookup is transient (retry), a bad entry is a spec problem (refuse): callers tell them apart.
    assert not issubclass(ResolutionError, EgressError)
    assert not issubclass(EgressError, ResolutionError)


@pytest.mark.parametrize(
    ("answers", "message"),
    [([], "no addresses"), (["not-an-ip"], '"not-an-ip" is not an IP address')],
)
def test_useless_answers_are_resolution_errors(answers: list[str], message: str) -> None:
    resolver = FakeResolver({"api.example.com": answers})
    with pytest.raises(ResolutionError, match=re.escape(message)):
        resolve([parse_allow_entry("api.example.com:443")], {}, resolver)


@pytest.mark.parametrize(
    "address", ["10.0.0.7", "127.0.0.1", "169.254.169.254", "fd00::7", "::ffff:10.0.0.7"]
)
def test_refuses_a_name_that_resolves_into_forbidden_space(address: str) -> None:
    resolver = FakeResolver({"internal.example.com": ["203.0.113.5", address]})
    with pytest.raises(EgressError, match=re.escape("internal.example.com resolves to")) as caught:
        resolve([parse_allow_entry("internal.example.com:443")], {}, resolver)
    assert caught.value.entry == "internal.example.com:443"


def test_refuses_a_static_host_pinned_to_forbidden_space() -> None:
    with pytest.raises(EgressError, match=re.escape("resolves to 10.0.0.7 is in the private range")):
        resolve(
            [parse_allow_entry("internal.example.com:443")], {"internal.example.com": ["10.0.0.7"]}, no_dns
        )


def test_admits_a_resolved_private_address_inside_an_allowed_cidr() -> None:
    resolver = FakeResolver({"internal.example.com": ["10.20.30.40"]})
    resolved = resolve(
        [parse_allow_entry("internal.example.com:443")], {}, resolver, allowed_private=[net("10.20.30.0/24")]
    )
    assert resolved[0].cidrs == ("10.20.30.40/32",)


def test_resolve_refuses_forbidden_addresses_written_in_the_spec() -> None:
    with pytest.raises(EgressError, match="loopback"):
        resolve([parse_allow_entry("127.0.0.1:80")], {}, no_dns)


def test_system_resolver_asks_for_the_absolute_name(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def fake_getaddrinfo(host: str, *args: object, **kwargs: object) -> Sequence[tuple[object, ...]]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.1", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    assert system_resolver("api.example.com") == ["203.0.113.1"]
    assert asked == ["api.example.com."]


# --- BoundedResolver -----------------------------------------------------------------------------------


def test_a_lookup_that_never_answers_fails_in_time_and_frees_no_caller_thread() -> None:
    answer = threading.Event()

    def never_answers(host: str) -> list[str]:
        answer.wait(30)
        return []

    stuck = BoundedResolver(never_answers, threads=1, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(ResolutionError, match=re.escape("no answer within 0.2 s")):
        resolve([parse_allow_entry("hangs.example.com:443")], {}, stuck)
    assert time.monotonic() - started < 2
    # Its one thread still waits: the next lookup is refused at once, not queued behind it.
    started = time.monotonic()
    with pytest.raises(ResolutionError, match="every resolver thread is waiting"):
        resolve([parse_allow_entry("next.example.com:443")], {}, stuck)
    assert time.monotonic() - started < 0.1
    answer.set()


def test_a_bounded_resolver_answers_like_the_one_it_wraps() -> None:
    bounded = BoundedResolver(FakeResolver({"api.example.com": ["203.0.113.7"]}), threads=2, timeout=5)
    [target] = resolve([parse_allow_entry("api.example.com:443")], {}, bounded)
    assert target.cidrs == ("203.0.113.7/32",)

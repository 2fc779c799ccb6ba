"""Egress allowlists: parse `host:port` entries and model endpoint URLs, refuse internal space, resolve names.

The result feeds a NetworkPolicy, which only knows IP blocks: a DNS name is resolved when the object is
reconciled, so the policy is a snapshot that must be refreshed (checklist S5). Every address, written or
resolved, is checked against the ranges a sandbox must never reach (loopback, link-local with the cloud
metadata address, private networks), so a name that resolves into the cluster is refused like the IP would be.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Literal, TypeAlias
from urllib.parse import urlsplit

from gymsandbox.api.gymhost import Egress

IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
TargetKind: TypeAlias = Literal["ip", "cidr", "dns"]
# (host) -> addresses as strings; raises OSError (e.g. socket.gaierror) when the name cannot be resolved.
Resolver: TypeAlias = Callable[[str], Sequence[str]]

_PORT = re.compile(r"[0-9]{1,5}")
_PREFIX_LENGTH = re.compile(r"[0-9]{1,3}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SCHEME_PORTS = {"https": 443, "http": 80}


class EgressError(ValueError):
    """An egress entry that can never be allowed as written: a bad spec, not a passing problem."""

    def __init__(self, entry: str, message: str) -> None:
        super().__init__(f'egress entry "{entry}": {message}')
        self.entry = entry
        self.message = message


class ResolutionError(Exception):
    """A DNS name did not resolve. Transient: the same spec may resolve on the next attempt."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f'cannot resolve "{host}": {message}')
        self.host = host
        self.message = message


@dataclass(frozen=True)
class EgressTarget:
    """One destination: a normalized host (address, CIDR or lower-case DNS name) and a port."""

    host: str
    port: int
    kind: TargetKind
    network: IPNetwork | None = None  # set for "ip" (a /32 or /128) and "cidr"; None for "dns"

    @property
    def entry(self) -> str:
        """The target written back as a `host:port` allow entry, IPv6 in brackets."""
        if self.network is not None and self.network.version == 6:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ResolvedTarget:
    """An allow entry and the CIDRs it stands for (an address as /32 or /128), sorted, without duplicates."""

    entry: str
    port: int
    cidrs: tuple[str, ...]


@dataclass(frozen=True)
class _Range:
    network: IPNetwork
    label: str  # reads as "<address> is in the <label> range <network><note>"
    note: str


def _ranges(label: str, note: str, *cidrs: str) -> list[_Range]:
    return [_Range(ipaddress.ip_network(cidr), label, note) for cidr in cidrs]


# Never reachable from a sandbox, whatever the cluster policy says.
_ALWAYS_FORBIDDEN = [
    *_ranges("unspecified", " (this host)", "0.0.0.0/8", "::/128"),
    *_ranges("loopback", "", "127.0.0.0/8", "::1/128"),
    *_ranges("link-local", ", which holds the cloud metadata address 169.254.169.254", "169.254.0.0/16"),
    *_ranges("link-local", "", "fe80::/10"),
    *_ranges("multicast", "", "224.0.0.0/4", "ff00::/8"),
    *_ranges("reserved", "", "240.0.0.0/4"),
    # Sockets reach ::ffff:a.b.c.d over IPv4, which would slip past the IPv4 ranges above; the translated
    # and the deprecated compatible forms are refused alike.
    *_ranges("IPv4-mapped", "; write the IPv4 address instead", "::ffff:0:0/96"),
    *_ranges("IPv4-translated (SIIT)", "; write the IPv4 address instead", "::ffff:0:0:0/96"),
    *_ranges("IPv4-compatible", " (deprecated); write the IPv4 address instead", "::/96"),
    *_ranges("local-use NAT64", " (RFC 8215), which may translate to any IPv4 address", "64:ff9b:1::/48"),
]
# Cluster-internal space: reachable only where an admin lists a CIDR in egress.allowedPrivateCIDRs.
_PRIVATE = [
    *_ranges("private", " (RFC 1918)", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_ranges("shared (carrier-grade NAT)", " (RFC 6598)", "100.64.0.0/10"),
    *_ranges("unique local", " (RFC 4193)", "fc00::/7"),
]


@dataclass(frozen=True)
class _Embedding:
    """An IPv6 prefix whose addresses stand for IPv4 ones: bits [offset, offset+32) carry the IPv4 address
    (inverted where `inverted`), and a translator or tunnel on the path delivers the packet there."""

    prefix: ipaddress.IPv6Network
    offset: int
    name: str
    inverted: bool = False


# The IPv6 forms a translator or relay delivers to an IPv4 address: an entry or answer in one of these is
# checked as the IPv4 space it embeds, so [64:ff9b::a00:1]:443 is refused like 10.0.0.1:443 would be.
_EMBEDDINGS = [
    _Embedding(ipaddress.IPv6Network("64:ff9b::/96"), 96, "NAT64"),
    _Embedding(ipaddress.IPv6Network("2002::/16"), 16, "6to4"),
    _Embedding(ipaddress.IPv6Network("2001::/32"), 32, "Teredo (server)"),
    _Embedding(ipaddress.IPv6Network("2001::/32"), 96, "Teredo (client)", inverted=True),
]
_ALL_IPV4 = ipaddress.IPv4Network("0.0.0.0/0")


def _embedded_ipv4(network: IPNetwork, embedding: _Embedding) -> ipaddress.IPv4Network | None:
    """The IPv4 space `network` reaches through `embedding`, or None when they do not overlap."""
    if not isinstance(network, ipaddress.IPv6Network) or not network.overlaps(embedding.prefix):
        return None
    if network.prefixlen <= embedding.prefix.prefixlen:
        return _ALL_IPV4  # the network holds the whole prefix
    shift = 128 - embedding.offset - 32
    value = (int(network.network_address) >> shift) & 0xFFFFFFFF
    length = max(0, min(32, network.prefixlen - embedding.offset))
    if embedding.inverted:
        value ^= 0xFFFFFFFF
    mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
    return ipaddress.IPv4Network((value & mask, length))


def parse_cidr(text: str) -> IPNetwork:
    """A CIDR such as 10.0.0.0/8 or 2001:db8::/32. Host bits must be clear; the prefix must be a number."""
    address, slash, prefix = text.partition("/")
    if not slash or not _PREFIX_LENGTH.fullmatch(prefix) or "%" in address:
        raise ValueError(f'"{text}" is not a CIDR (address/prefix-length, e.g. 10.0.0.0/8)')
    try:
        return ipaddress.ip_network(text)
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f'"{text}" is not a valid CIDR') from None
    raise ValueError(f'"{text}" has host bits set; did you mean {loose}?') from None


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A single IPv4 or IPv6 address, without a zone index."""
    try:
        if "%" in text:
            raise ValueError(text)
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f'"{text}" is not a valid IP address') from None


def check_host_name(name: str) -> str:
    """A fully qualified DNS name in lower case, e.g. api.example.com.

    A single label (localhost, kubernetes, metadata) is refused: its meaning depends on the resolver's search
    path, which differs between the operator and the sandbox.
    """
    host = name.lower()
    labels = host.split(".")
    if len(host) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f'"{name}" is not a valid DNS name')
    if len(labels) < 2:
        raise ValueError(f'"{name}" is not a fully qualified DNS name (it has no dot)')
    if labels[-1].isdigit():
        raise ValueError(f'"{name}" is not a valid IP address or DNS name')
    return host


def is_private_range(network: IPNetwork) -> bool:
    """Whether the network lies entirely inside one of the private ranges an admin may open."""
    return any(network_within(network, r.network) for r in _PRIVATE)


def network_within(inner: IPNetwork, outer: IPNetwork) -> bool:
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False


def _overlaps(a: IPNetwork, b: IPNetwork) -> bool:
    return a.version == b.version and a.overlaps(b)


def _describe(network: IPNetwork) -> str:
    if network.prefixlen != network.max_prefixlen:
        return str(network)
    address = network.network_address
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(address) if mapped is None else f"{address} (IPv4 {mapped})"


def _forbidden(
    network: IPNetwork, allowed_private: Sequence[IPNetwork], denied: Sequence[IPNetwork] = ()
) -> str | None:
    """Why a sandbox may not reach this network, as "<network> is in/overlaps ...", or None.

    A CIDR is refused if any part of it is forbidden, so 0.0.0.0/0 or 0.0.0.0/1 cannot smuggle in 10.0.0.0/8,
    and IPv6 space that embeds IPv4 (NAT64, 6to4, Teredo and the like) is refused if what it embeds is.
    """
    what = _describe(network)
    relation = "is in" if network.prefixlen == network.max_prefixlen else "overlaps"
    for forbidden in _ALWAYS_FORBIDDEN:
        if _overlaps(network, forbidden.network):
            return f"{what} {relation} the {forbidden.label} range {forbidden.network}{forbidden.note}"
    for deny in denied:
        if _overlaps(network, deny):
            return f"{what} {relation} {deny}, which the cluster policy denies (egress.deniedCIDRs)"
    for private in _PRIVATE:
        if _overlaps(network, private.network) and not any(
            network_within(network, a) for a in allowed_private
        ):
            return (
                f"{what} {relation} the {private.label} range {private.network}{private.note}, which the"
                " cluster policy does not open (egress.allowedPrivateCIDRs)"
            )
    for embedding in _EMBEDDINGS:
        embedded = _embedded_ipv4(network, embedding)
        reason = embedded and _forbidden(embedded, allowed_private, denied)
        if reason:
            return f"{what} {relation} the {embedding.name} range {embedding.prefix}, and {reason}"
    return None


def check_forbidden(
    target: EgressTarget, allowed_private: Sequence[IPNetwork], *, denied: Sequence[IPNetwork] = ()
) -> None:
    """Raise EgressError if an IP or CIDR target reaches forbidden space; DNS names are checked once resolved.

    Loopback, link-local (with the metadata address), unspecified, multicast, reserved, IPv4-mapped and
    local-use NAT64 space is always refused, and so is every CIDR the admin denies; private space (RFC 1918,
    RFC 6598, fc00::/7) only where the target lies entirely inside one of allowed_private. IPv6 that embeds
    IPv4 (NAT64, SIIT, IPv4-compatible, 6to4, Teredo) is checked as the IPv4 space it embeds.
    """
    if target.network is None:
        return
    reason = _forbidden(target.network, allowed_private, denied)
    if reason is not None:
        raise EgressError(target.entry, reason)


def _parse_port(entry: str, text: str) -> int:
    if not _PORT.fullmatch(text):
        raise EgressError(entry, f'port "{text}" is not a number')
    port = int(text)
    if not 1 <= port <= 65535:
        raise EgressError(entry, f"port {port} is out of range 1-65535")
    return port


def _split_host_port(entry: str) -> tuple[str, str, bool]:
    """(host, port, bracketed). Brackets are required around IPv6 so the port is unambiguous."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise EgressError(entry, "expected [IPv6 address or CIDR]:port")
        return host, rest[1:], True
    host, colon, port = entry.rpartition(":")
    if not colon:
        raise EgressError(entry, "expected host:port")
    if ":" in host:
        raise EgressError(entry, "IPv6 addresses must be in brackets, e.g. [2001:db8::1]:443")
    return host, port, False


def _parse_host(entry: str, host: str, port: int, bracketed: bool) -> EgressTarget:
    try:
        if "/" in host:
            network = parse_cidr(host)
            kind: TargetKind = "cidr"
        elif bracketed or host.replace(".", "").isdigit():
            address = parse_address(host)
            network = ipaddress.ip_network(address)
            kind = "ip"
        else:
            return EgressTarget(check_host_name(host), port, "dns")
    except ValueError as exc:
        raise EgressError(entry, str(exc)) from None
    if bracketed and network.version != 6:
        raise EgressError(entry, "brackets are only for IPv6; write IPv4 as address:port")
    host_text = str(network.network_address) if kind == "ip" else str(network)
    return EgressTarget(host_text, port, kind, network)


def parse_allow_entry(entry: str) -> EgressTarget:
    """Parse `host:port`; host is a DNS name, an IPv4 address or CIDR, or a bracketed IPv6 address or CIDR."""
    if "*" in entry:
        raise EgressError(entry, "wildcards are not supported; list each host name")
    host, port_text, bracketed = _split_host_port(entry)
    port = _parse_port(entry, port_text)
    if not host:
        raise EgressError(entry, "the host is empty")
    return _parse_host(entry, host, port, bracketed)


def _redacted_url(url: str) -> str:
    """The URL as messages may show it: userinfo masked, query and fragment (often holding keys) dropped."""
    base = re.split(r"[?#]", url, maxsplit=1)[0]
    scheme, separator, rest = base.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{separator}{authority}{slash}{path}"


def model_endpoint_target(url: str) -> EgressTarget:
    """The host:port a model endpoint URL needs: https defaults to 443, http to 80; path and query ignored.

    Errors name the URL without its userinfo, query or fragment, so a key pasted into the URL never reaches
    a condition, an event or a log.
    """
    shown = _redacted_url(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise EgressError(shown, "not a valid URL") from None
    if parts.scheme not in _SCHEME_PORTS:
        raise EgressError(shown, "model endpoints must be http:// or https:// URLs")
    if "@" in parts.netloc:
        raise EgressError(shown, "credentials in the URL are not allowed; use envFrom secret references")
    netloc = parts.netloc
    port_part = netloc.rpartition("]")[2] if netloc.startswith("[") else netloc
    if ":" not in port_part:
        netloc = f"{netloc}:{_SCHEME_PORTS[parts.scheme]}"
    try:
        return parse_allow_entry(netloc)
    except EgressError as exc:
        raise EgressError(shown, exc.message) from None


def egress_targets(egress: Egress) -> list[EgressTarget]:
    """Allow entries then model endpoints as targets, duplicates dropped, first occurrence kept.

    Raises EgressError on the first entry that does not parse.
    """
    parsed = [parse_allow_entry(entry) for entry in egress.allow]
    parsed += [model_endpoint_target(url) for url in egress.model_endpoints]
    return list(dict.fromkeys(parsed))


def system_resolver(host: str) -> list[str]:
    """Addresses of a name from the operator's resolver. The trailing dot keeps search domains out of it."""
    infos = socket.getaddrinfo(f"{host}.", None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class BoundedResolver:
    """`resolver` on threads of its own, at most `threads` lookups at once, and never longer than `timeout`
    seconds for the caller: a name whose servers never answer costs a reconcile a few seconds and a
    DNSResolutionFailed, not a worker thread of the operator. A lookup past its time keeps its thread until
    the system resolver gives up; while all are taken, lookups fail at once as busy."""

    def __init__(
        self, resolver: Resolver = system_resolver, *, threads: int = 4, timeout: float = 3.0
    ) -> None:
        self._resolver = resolver
        self._timeout = timeout
        self._slots = threading.BoundedSemaphore(threads)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dns")

    def _resolve(self, host: str) -> Sequence[str]:
        try:
            return self._resolver(host)
        finally:
            self._slots.release()

    def __call__(self, host: str) -> Sequence[str]:
        if not self._slots.acquire(blocking=False):
            raise OSError(errno.EBUSY, "every resolver thread is waiting on an unanswered lookup")
        future = self._pool.submit(self._resolve, host)
        try:
            return future.result(timeout=self._timeout)
        except FutureTimeout:
            raise OSError(errno.ETIMEDOUT, f"no answer within {self._timeout:g} s") from None


def _lookup(host: str, static_hosts: Mapping[str, Sequence[str]], resolver: Resolver) -> list[IPNetwork]:
    if host in static_hosts:
        answers: Sequence[str] = static_hosts[host]
    else:
        try:
            answers = resolver(host)
        except (OSError, UnicodeError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ResolutionError(host, detail or type(exc).__name__) from None
    if not answers:
        raise ResolutionError(host, "no addresses")
    networks = []
    for answer in answers:
        try:
            networks.append(ipaddress.ip_network(parse_address(answer.partition("%")[0])))
        except ValueError:
            raise ResolutionError(host, f'"{answer}" is not an IP address') from None
    return networks


def resolve(
    targets: Iterable[EgressTarget],
    static_hosts: Mapping[str, Sequence[str]],
    resolver: Resolver = system_resolver,
    *,
    allowed_private: Sequence[IPNetwork] = (),
    denied: Sequence[IPNetwork] = (),
) -> list[ResolvedTarget]:
    """Turn targets into CIDRs: IPs and CIDRs as written, names from static_hosts first, else the resolver.

    Raises EgressError when a target or any address a name resolves to is forbidden (the whole entry is
    refused, not just that address), ResolutionError when a name does not resolve.
    """
    cache: dict[str, list[IPNetwork]] = {}
    resolved = []
    for target in targets:
        check_forbidden(target, allowed_private, denied=denied)
        if target.network is not None:
            networks = [target.network]
        else:
            if target.host not in cache:
                cache[target.host] = _lookup(target.host, static_hosts, resolver)
            networks = cache[target.host]
            for network in networks:
                reason = _forbidden(network, allowed_private, denied)
                if reason is not None:
                    raise EgressError(target.entry, f"{target.host} resolves to {reason}")
        unique = sorted(set(networks), key=lambda n: (n.version, n.network_address.packed, n.prefixlen))
        resolved.append(ResolvedTarget(target.entry, target.port, tuple(str(n) for n in unique)))
    return resolved

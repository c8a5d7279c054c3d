"""Where a webhook may go: the destination checks and the guarded connection.

The connection checks the URL's host and every address it resolves to, and connects to
a checked one (so a second DNS answer cannot slip past): cloud metadata services (by name
and address), link-local, multicast and reserved addresses are never reached, loopback
and private ones only with ``FAIRSCHED_WEBHOOK_ALLOW_PRIVATE``. Redirects are not
followed. :mod:`jobs.webhooks` sends through :data:`opener`.
"""
from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.request

from django.conf import settings


class DestinationRefused(OSError):
    """The webhook's host resolves to an address Fairsched does not POST to."""


# Cloud metadata and platform services: a webhook pointed at one would have the scheduler
# fetch an instance's credentials and show the answer in the admin. Never reached, whatever
# FAIRSCHED_WEBHOOK_ALLOW_PRIVATE says: several are not link-local (an IPv6 unique-local
# address, the shared 100.64.0.0/10 space, even a public one) and passed with it.
METADATA_NETWORKS: dict[ipaddress.IPv4Network | ipaddress.IPv6Network, str] = {
    ipaddress.ip_network("169.254.169.254/32"): "AWS, GCP, Azure, DigitalOcean, OpenStack metadata",
    ipaddress.ip_network("169.254.170.2/32"): "AWS ECS task metadata",
    ipaddress.ip_network("fd00:ec2::/64"): "AWS instance services over IPv6: metadata fd00:ec2::254, DNS, time",
    ipaddress.ip_network("fd20:ce::254/128"): "GCP metadata over IPv6",
    ipaddress.ip_network("100.100.100.200/32"): "Alibaba Cloud metadata",
    ipaddress.ip_network("168.63.129.16/32"): "Azure platform (WireServer)",
    ipaddress.ip_network("192.0.0.192/32"): "Oracle Cloud metadata",
}
# The names the providers give those services, refused before any lookup: a resolver that
# answers otherwise for them (a search domain, a hosts file) must not open another way in.
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog",  # GCP
    "instance-data", "instance-data.ec2.internal",  # AWS
    "metadata.tencentyun.com",  # Tencent Cloud
})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def check_host(host: str) -> None:
    """Refuse a cloud metadata service's own name (see :data:`METADATA_HOSTS`)."""
    if (host or "").strip().rstrip(".").lower() in METADATA_HOSTS:
        raise DestinationRefused(f"webhook destination {host} is a cloud metadata service; never allowed")


def _carried_ipv4(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and reaches: 6to4, NAT64 (64:ff9b::/96),
    Teredo's client. (IPv4-mapped ones are checked as the IPv4 address itself.)"""
    if not isinstance(addr, ipaddress.IPv6Address):
        return []
    carried = [addr.sixtofour] if addr.sixtofour is not None else []
    if addr in _NAT64:
        carried.append(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    if addr.teredo is not None:
        carried.append(addr.teredo[1])
    return carried


def _check_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, host: str) -> None:
    for network, service in METADATA_NETWORKS.items():
        if addr.version == network.version and addr in network:
            raise DestinationRefused(f"webhook destination {host} ({addr}) is a cloud metadata address "
                                     f"({service}); never allowed")
    kind = ("link-local" if addr.is_link_local else "multicast" if addr.is_multicast
            else "unspecified" if addr.is_unspecified else None)
    if kind is None and addr.is_reserved and not addr.is_loopback:
        kind = "reserved"
    if kind is not None:
        raise DestinationRefused(f"webhook destination {host} ({addr}) is a {kind} address; never allowed")
    if not addr.is_global and not settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE:
        kind = "loopback" if addr.is_loopback else "private"
        raise DestinationRefused(f"webhook destination {host} ({addr}) is a {kind} address; "
                                 "set FAIRSCHED_WEBHOOK_ALLOW_PRIVATE=1 to allow private networks")


def check_destination(ip: str, host: str) -> None:
    """Refuse addresses a webhook must not reach (server-side request forgery): cloud
    metadata services (:data:`METADATA_NETWORKS`), link-local, multicast, unspecified and
    reserved ones always; loopback and private networks unless FAIRSCHED_WEBHOOK_ALLOW_PRIVATE.
    An IPv6 address that carries an IPv4 one (mapped, 6to4, NAT64, Teredo) is refused if
    either is."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for carried in _carried_ipv4(addr):
        _check_address(carried, host)
    _check_address(addr, host)


def _guarded_connection(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
    """``socket.create_connection`` that checks the host's name and every address it resolves
    to first and then connects to one of those very addresses (no second lookup a DNS answer
    could change)."""
    host, port = address
    check_host(host)
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    for *_, sockaddr in infos:
        check_destination(sockaddr[0], host)
    error: OSError | None = None
    for family, socktype, proto, _, sockaddr in infos:
        sock = socket.socket(family, socktype, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error or OSError(f"{host} resolves to no address")


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _guarded_connection


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = _guarded_connection


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_GuardedHTTPConnection, req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_GuardedHTTPSConnection, req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 - urllib's API
        return None  # a redirect is an answer to report, not to follow with the signed body


def _build_opener() -> urllib.request.OpenerDirector:
    """HTTP and HTTPS only. ``build_opener`` would add urllib's file:, ftp: and data:
    handlers, and a webhook URL that got past the model's check (written through the ORM,
    or saved before the check existed) would read a local file and show it in the admin."""
    opener = urllib.request.OpenerDirector()
    for handler in (_GuardedHTTPHandler(), _GuardedHTTPSHandler(), _NoRedirect(),
                    urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor(),
                    urllib.request.UnknownHandler()):
        opener.add_handler(handler)
    return opener


_opener = _build_opener()
opener = _opener

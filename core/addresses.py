"""Which network addresses the platform refuses to call on a customer's say-so (SSRF): loopback, private,
link-local, CGNAT, multicast and the other non-global ranges. Used for webhook targets and image registries."""
import ipaddress
import socket


def address_internal(address: str) -> bool:
    """Whether an IP address (v4, v6, v4-mapped v6, with or without a zone) is not a public unicast one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def host_addresses(host: str, port: int, *, resolve=socket.getaddrinfo) -> set[str]:
    """The addresses `host` resolves to (socket.gaierror / UnicodeError when it does not)."""
    return {info[4][0] for info in resolve(host, port, type=socket.SOCK_STREAM)}

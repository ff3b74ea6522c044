"""Hosts in network namespaces on one private switch: several machines' networks on one.

    switch namespace  <prefix>-<pid>-switch   bridge br0, one port per host, named v-<host>
    host namespace    <prefix>-<pid>-<host>   lo, and eth0 = 10.203.N.<i>/24 (a veth to its port)

Nothing is created in the machine's own namespace: each veth pair is made inside the
switch's namespace with its other end born in the host's, so the machine's interfaces
and routes never change, and the hosts reach one another only through the bridge. The
test reaches them the same way: ``Host.run`` starts a process inside one (``ip netns
exec``); ``Host.call`` runs a function on a thread that entered it, so the sockets the
function opens, and the processes it starts, belong to that host.

A cut (``Host.cut``) puts the host's switch port in the bridge's *disabled* state:
frames to and from it are dropped inside the switch, silently (no RST, no ICMP), while
the host's own link stays up, as when the network between two machines fails and
neither end is told. ``heal`` puts the port back to forwarding. (``tc netem`` is not in
this kernel; setting the link down would also tell the host its cable is out.)

Names are unique per run (prefix and pid). A run that crashed leaves namespaces whose
pid is no longer alive: the next ``Network`` with the same prefix kills the processes
left inside them and deletes them before it makes its own; links need no sweep, since
they only ever live inside our namespaces. ``close`` (the context manager's exit, also
after a failure) stops every process started here and deletes every namespace.

The subnet is the first 10.203.N.0/24 that overlaps no IPv4 network of the machine nor
of another live run with this prefix; hosts get .1, .2, ... in the order they are made.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

T = TypeVar("T")

SUBNET_BASE = ipaddress.IPv4Network("10.203.0.0/16")
BRIDGE = "br0"
HOST_LINK = "eth0"
PORT_PREFIX = "v-"
IFNAMSIZ = 15  # longest interface name Linux takes
NETNS_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000
_HOST_NAME = re.compile(rf"[a-z][a-z0-9]{{0,{IFNAMSIZ - len(PORT_PREFIX) - 1}}}")
_PREFIX = re.compile(r"[a-z][a-z0-9]{0,15}")
_STOP_TIMEOUT_S = 10.0
_DISABLED, _FORWARDING = "0", "3"  # bridge port states (STP's numbering; STP itself is off)


class NetnsError(RuntimeError):
    """An ``ip`` command failed, or a name or address does not fit."""


class NetnsUnavailable(NetnsError):
    """Not root, or ``ip netns`` cannot make namespaces on this machine."""


# Names and addresses (pure) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Naming:
    """The names of one run's namespaces: ``<prefix>-<pid>-<host>``."""

    prefix: str
    pid: int

    def __post_init__(self) -> None:
        if not _PREFIX.fullmatch(self.prefix):
            raise NetnsError(f"a prefix is 1-16 lower-case letters or digits, not {self.prefix!r}")

    @property
    def switch(self) -> str:
        return f"{self.prefix}-{self.pid}-switch"

    def namespace(self, host: str) -> str:
        check_host_name(host)
        return f"{self.prefix}-{self.pid}-{host}"

    def owner(self, namespace: str) -> int | None:
        """The pid of the run that made ``namespace``, if it is one of this prefix's."""
        match = re.fullmatch(rf"{re.escape(self.prefix)}-(\d+)-[a-z][a-z0-9]*", namespace)
        return int(match.group(1)) if match else None


def check_host_name(name: str) -> None:
    if name == "switch" or not _HOST_NAME.fullmatch(name):
        longest = IFNAMSIZ - len(PORT_PREFIX)
        raise NetnsError(
            f"a host name is 1-{longest} lower-case letters or digits starting with a "
            f"letter (its switch port is {PORT_PREFIX}<name>), and not 'switch': {name!r}"
        )


def port_name(host: str) -> str:
    """The host's port on the bridge, inside the switch's namespace."""
    check_host_name(host)
    return PORT_PREFIX + host


def stale_namespaces(
    namespaces: Iterable[str], naming: Naming, alive: Callable[[int], bool]
) -> list[str]:
    """This prefix's namespaces left by runs that are gone (their pid is not alive), and
    any that carry this run's own pid (a leftover of a pid used before)."""
    stale = []
    for namespace in namespaces:
        pid = naming.owner(namespace)
        if pid is not None and (pid == naming.pid or not alive(pid)):
            stale.append(namespace)
    return stale


def choose_subnet(
    used: Iterable[ipaddress.IPv4Network], base: ipaddress.IPv4Network = SUBNET_BASE
) -> ipaddress.IPv4Network:
    """The first /24 of ``base`` (skipping the .0.0/24) that overlaps none of ``used``."""
    taken = list(used)
    for subnet in list(base.subnets(new_prefix=24))[1:]:
        if not any(subnet.overlaps(network) for network in taken):
            return subnet
    raise NetnsError(f"every /24 of {base} is in use")


def host_address(subnet: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Address:
    """The address of the ``index``-th host made (0-based): .1, .2, ..."""
    if not 0 <= index < subnet.num_addresses - 2:
        raise NetnsError(f"{subnet} has no room for a host number {index + 1}")
    return subnet.network_address + index + 1


def ipv4_networks(ip_json: str) -> list[ipaddress.IPv4Network]:
    """The networks of the addresses in ``ip -j -4 addr``'s output."""
    networks = []
    for link in json.loads(ip_json or "[]"):
        for address in link.get("addr_info", ()):
            if address.get("family") == "inet":
                interface = ipaddress.IPv4Interface(f"{address['local']}/{address['prefixlen']}")
                networks.append(interface.network)
    return networks


# Running ip -----------------------------------------------------------------------------


def _iproute2(tool: str, *args: str) -> str:
    """``tool args...``; its stdout, or ``NetnsError`` with its stderr."""
    done = subprocess.run(
        [tool, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit status {done.returncode}"
        raise NetnsError(f"{tool} {' '.join(args)}: {why}")
    return done.stdout


def ip(*args: str) -> str:
    return _iproute2("ip", *args)


def list_namespaces() -> list[str]:
    """Names of the machine's named network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def namespace_pids(namespace: str) -> list[int]:
    return [int(pid) for pid in ip("netns", "pids", namespace).split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all_in(namespace: str) -> None:
    """SIGKILL every process left in ``namespace`` (never this one)."""
    for pid in namespace_pids(namespace):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _delete_namespace(namespace: str) -> None:
    _kill_all_in(namespace)
    ip("netns", "delete", namespace)


def _enter(namespace: str) -> None:
    """Move the calling thread (only it) into ``namespace``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def require_netns() -> None:
    """``NetnsUnavailable`` unless this process can make namespaces with ``ip``."""
    if os.geteuid() != 0:
        raise NetnsUnavailable(
            "multi-host tests make network namespaces and veth pairs: run them as root"
        )
    for tool in ("ip", "bridge"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"{tool!r} is not on PATH: install iproute2")


# Hosts and the network ------------------------------------------------------------------


class Host:
    """One machine: a namespace with an address on the switch."""

    def __init__(self, network: Network, name: str, address: ipaddress.IPv4Address) -> None:
        self.name = name
        self.namespace = network.naming.namespace(name)
        self.port = port_name(name)
        self.address = str(address)
        self._network = network
        self._processes: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(
            max_workers=4,
            thread_name_prefix=f"netns-{name}",
            initializer=_enter,
            initargs=(self.namespace,),
        )
        self.is_cut = False

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        **popen: Any,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside this host (``ip netns exec`` execs it: the pid is its own).
        The network stops it at close if it is still running."""
        process: subprocess.Popen[bytes] = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, *argv],
            env=None if env is None else dict(env),
            **popen,
        )
        with self._lock:
            self._processes.append(process)
        return process

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` on one of this host's threads (each entered its namespace)."""
        return self._threads.submit(fn, *args, **kwargs)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` inside this host; its result, or its exception."""
        return self.submit(fn, *args, **kwargs).result()

    def cut(self) -> None:
        """Drop every frame to and from this host, silently, until ``heal``."""
        self._port_state(_DISABLED)
        self.is_cut = True

    def heal(self) -> None:
        """Forward this host's frames again."""
        self._port_state(_FORWARDING)
        self.is_cut = False

    def _port_state(self, state: str) -> None:
        switch = self._network.naming.switch
        _iproute2("bridge", "-n", switch, "link", "set", "dev", self.port, "state", state)

    def _stop_processes(self) -> None:
        with self._lock:
            processes, self._processes = self._processes, []
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(_STOP_TIMEOUT_S)

    def _close(self) -> None:
        self._stop_processes()
        self._threads.shutdown(wait=True, cancel_futures=True)
        _delete_namespace(self.namespace)


class Network:
    """A switch and the hosts on it; everything is torn down on exit."""

    def __init__(self, prefix: str = "hwt") -> None:
        self.naming = Naming(prefix, os.getpid())
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self.removed_stale: list[str] = []
        """Namespaces of crashed earlier runs removed at start."""
        self._open = False

    def __enter__(self) -> Self:
        require_netns()
        try:
            existing = list_namespaces()
        except NetnsError as exc:
            raise NetnsUnavailable(f"ip netns does not work here: {exc}") from exc
        self.removed_stale = stale_namespaces(existing, self.naming, _alive)
        for namespace in self.removed_stale:
            _delete_namespace(namespace)
        used = ipv4_networks(ip("-j", "-4", "addr"))
        for namespace in set(existing) - set(self.removed_stale):
            if self.naming.owner(namespace) is not None:
                with contextlib.suppress(NetnsError):  # a run that is tearing down
                    used += ipv4_networks(ip("-n", namespace, "-j", "-4", "addr"))
        self.subnet = choose_subnet(used)
        switch = self.naming.switch
        try:
            ip("netns", "add", switch)
        except NetnsError as exc:
            raise NetnsUnavailable(f"cannot make a network namespace: {exc}") from exc
        self._open = True
        try:
            ip("-n", switch, "link", "add", "name", BRIDGE, "type", "bridge")
            ip("-n", switch, "link", "set", BRIDGE, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def host(self, name: str) -> Host:
        """A new host on the switch, with the next address of the subnet."""
        if not self._open or self.subnet is None:
            raise NetnsError("the network is not open")
        if name in self.hosts:
            raise NetnsError(f"there is already a host {name!r}")
        address = host_address(self.subnet, len(self.hosts))
        namespace, port, switch = self.naming.namespace(name), port_name(name), self.naming.switch
        ip("netns", "add", namespace)
        try:
            ip(
                "-n",
                switch,
                "link",
                "add",
                "name",
                port,
                "type",
                "veth",
                "peer",
                "name",
                HOST_LINK,
                "netns",
                namespace,
            )
            ip("-n", switch, "link", "set", port, "master", BRIDGE)
            ip("-n", switch, "link", "set", port, "up")
            ip("-n", namespace, "link", "set", "lo", "up")
            prefix = self.subnet.prefixlen
            ip("-n", namespace, "addr", "add", f"{address}/{prefix}", "dev", HOST_LINK)
            ip("-n", namespace, "link", "set", HOST_LINK, "up")
        except BaseException:
            _delete_namespace(namespace)  # its end of the veth goes, and so the pair
            raise
        host = self.hosts[name] = Host(self, name, address)
        return host

    def close(self) -> None:
        """Stop every process started on a host, delete every namespace (errors are
        raised once everything has been tried)."""
        errors: list[BaseException] = []
        for host in reversed(list(self.hosts.values())):
            try:
                host._close()
            except Exception as exc:  # the rest must still go
                errors.append(exc)
        self.hosts.clear()
        if self._open:
            self._open = False
            try:
                _delete_namespace(self.naming.switch)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise NetnsError(f"teardown: {'; '.join(map(str, errors))}") from errors[0]
